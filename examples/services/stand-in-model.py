#!/usr/bin/env python3
"""A stand-in model server for trying Troupe's services without a GPU or a model (Python 3 stdlib only).

It answers like an OpenAI-compatible endpoint -- GET /v1/models, POST /v1/chat/completions, GET /health --
and marks every answer with who gave it: the node's group and replica rank (DSTACK_NODE_GROUP_NAME,
DSTACK_NODE_GROUP_NODE_RANK) and, where its env has one, TROUPE_REVISION or TROUPE_DEPLOYMENT.

  --role prefill|decode  answers a chat completion itself (prefill hands back a stand-in KV cache,
                         decode turns it into the answer's text).
  --role router          forwards each chat completion to a prefill replica, then a decode replica, as an
                         smg router in PD-disaggregation mode does; it picks them from the run's live
                         address book ($TROUPE_PEERS_FILE, read again on every request, `ready` nodes
                         only) and says in its answer which ones it used.

  --error-rate F         answers that share (0..1) of chat completions with HTTP 500 instead, as a bad
                         revision of a model server would (also env STAND_IN_ERROR_RATE; default 0) —
                         one that passes its health checks: a prompt of just `ping` (the probes') always
                         answers.

  GET /metrics           its own traffic in Prometheus' text format, as a model server exports it:
                         stand_in_chat_completions_total (a counter of the chat completions it answered,
                         by HTTP status) and stand_in_chat_completions_running (a gauge: those it is
                         answering now); what Troupe's `scaling.replica_metrics` reads.

It listens on 0.0.0.0:PORT (--host to narrow it), serves requests concurrently and stops cleanly on SIGTERM.
"""

import argparse
import itertools
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def share(text):
    """A share of requests, 0..1 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not from 0 to 1")
    return value


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--role", choices=["router", "prefill", "decode"], required=True)
parser.add_argument("--port", type=int, default=8000)
parser.add_argument("--host", default="0.0.0.0", help="the address to listen on (a node's every address by default)")
parser.add_argument("--model", default=os.environ.get("MODEL", "stand-in"))
parser.add_argument("--warmup", type=float, default=0.0, help="seconds /health answers 503 (loading the model)")
parser.add_argument("--worker-port", type=int, help="the prefill and decode replicas' port (default: --port)")
parser.add_argument("--prefill-group", default="prefill")
parser.add_argument("--decode-group", default="decode")
parser.add_argument(
    "--error-rate",
    type=share,
    default=None,
    help="the share (0..1) of chat completions answered with HTTP 500, as a bad revision would (env STAND_IN_ERROR_RATE)",
)
args = parser.parse_args()
if args.error_rate is None:
    try:
        args.error_rate = share(os.environ.get("STAND_IN_ERROR_RATE") or "0")
    except argparse.ArgumentTypeError as err:
        parser.error(f"STAND_IN_ERROR_RATE: {err}")
WORKER_PORT = args.worker_port or args.port

GROUP = os.environ.get("DSTACK_NODE_GROUP_NAME", args.role)
REPLICA = int(os.environ.get("DSTACK_NODE_GROUP_NODE_RANK", "0"))
NAME = f"{GROUP}/{REPLICA}"
REVISION = os.environ.get("TROUPE_REVISION") or os.environ.get("TROUPE_DEPLOYMENT")
MARK = {"group": GROUP, "replica": REPLICA, "role": args.role, **({"revision": REVISION} if REVISION else {})}
READY_AT = time.monotonic() + args.warmup
# One counter per worker group: requests go round the ready replicas in turn.
TURNS = {args.prefill_group: itertools.count(), args.decode_group: itertools.count()}
TURNS_LOCK = threading.Lock()
# Its own traffic (GET /metrics): chat completions answered, by status, and those being answered now.
ANSWERED = {}
RUNNING = 0
COUNTS_LOCK = threading.Lock()


def exposition():
    """The counters in Prometheus' text format (0.0.4)."""
    with COUNTS_LOCK:
        answered = sorted(ANSWERED.items())
        running = RUNNING
    lines = [
        "# HELP stand_in_chat_completions_total Chat completions this replica answered, by HTTP status.",
        "# TYPE stand_in_chat_completions_total counter",
        *(f'stand_in_chat_completions_total{{group="{GROUP}",status="{code}"}} {n}' for code, n in answered),
        "# HELP stand_in_chat_completions_running Chat completions this replica is answering now.",
        "# TYPE stand_in_chat_completions_running gauge",
        f'stand_in_chat_completions_running{{group="{GROUP}"}} {running}',
    ]
    return ("\n".join(lines) + "\n").encode()


class Unavailable(Exception):
    """No ready replica to forward to, or one that failed: the router answers 503/502 with why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def peers():
    """The live address book, read whole each time (the file is replaced atomically on every change)."""
    path = os.environ.get("TROUPE_PEERS_FILE")
    if not path:
        raise Unavailable(503, "no TROUPE_PEERS_FILE: the router runs on a Troupe node")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pick(book, group):
    """The next ready node of `group` (round-robin), as {name, url}."""
    nodes = next((g["nodes"] for g in book["groups"] if g["name"] == group), None)
    if nodes is None:
        raise Unavailable(503, f"no group {group!r} in the address book (peers v{book.get('version')})")
    ready = [n for n in nodes if n.get("ready") and n.get("status") == "ready" and n.get("ip")]
    if not ready:
        raise Unavailable(503, f"no ready replica in group {group!r} (peers v{book.get('version')})")
    with TURNS_LOCK:
        node = ready[next(TURNS[group]) % len(ready)]
    return {"name": f"{group}/{node['group_rank']}", "url": f"http://{node['ip']}:{WORKER_PORT}"}


def post(target, body):
    req = urllib.request.Request(f"{target['url']}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return json.load(res)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise Unavailable(502, f"{target['name']} at {target['url']} failed: {err}") from err


def last_user_text(body):
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def completion(text, troupe):
    return {
        "id": f"chatcmpl-{NAME.replace('/', '-')}-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": args.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": len(text.split()), "total_tokens": len(text.split())},
        "troupe": troupe,
    }


def answer(body):
    """A chat completion as this node's role gives it."""
    prompt = last_user_text(body)
    if args.role == "prefill":
        # A stand-in KV cache: what decode needs to go on from the prompt.
        return completion("", {**MARK, "kv": {"prompt": prompt, "by": NAME}})
    if args.role == "decode":
        kv = (body.get("troupe") or {}).get("kv") or {"prompt": prompt}
        return completion(f"{kv['prompt']}, world", MARK)
    book = peers()
    prefill = pick(book, args.prefill_group)
    pre = post(prefill, body)
    decode = pick(book, args.decode_group)
    out = post(decode, {**body, "troupe": {"kv": pre["troupe"]["kv"]}})
    path = f"{NAME} -> {prefill['name']} -> {decode['name']}"
    text = out["choices"][0]["message"]["content"]
    return completion(f"[{path}] {text}", {**MARK, "peers_version": book.get("version"), "prefill": pre["troupe"], "decode": out["troupe"]})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body):
        self.counted(status)
        raw = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("X-Troupe-Replica", NAME)
        self.end_headers()
        self.wfile.write(raw)

    def error(self, status, message):
        self.reply(status, {"error": {"message": f"{NAME}: {message}", "type": "stand_in_error"}})

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/health":
            loading = time.monotonic() < READY_AT
            return self.reply(503 if loading else 200, {"status": "loading" if loading else "ok", **MARK})
        if path == "/metrics":
            raw = exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        if path == "/v1/models":
            return self.reply(200, {"object": "list", "data": [{"id": args.model, "object": "model", "owned_by": "troupe-stand-in", "troupe": MARK}]})
        self.error(404, f"no GET {path}: try /health, /v1/models or POST /v1/chat/completions")

    def do_POST(self):
        global RUNNING
        if self.path.split("?", 1)[0] != "/v1/chat/completions":
            return self.completion_post()
        with COUNTS_LOCK:
            RUNNING += 1
        self.counting = True
        try:
            self.completion_post()
        finally:
            self.counted(0)

    def counted(self, status):
        """A chat completion answered (before its answer goes out, so a client that reads /metrics next sees it)."""
        global RUNNING
        if not getattr(self, "counting", False):
            return
        self.counting = False
        with COUNTS_LOCK:
            RUNNING -= 1
            ANSWERED[status] = ANSWERED.get(status, 0) + 1

    def completion_post(self):
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path != "/v1/chat/completions":
            return self.error(404, f"no POST {path}: try /v1/chat/completions")
        if time.monotonic() < READY_AT:
            return self.error(503, "the model is still loading")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as err:
            return self.error(400, f"the body is not JSON: {err}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self.error(400, 'the body wants {"messages": [{"role": "user", "content": "..."}]}')
        if body.get("stream"):
            return self.error(400, "the stand-in does not stream: send stream=false")
        # A bad revision that passes its health checks: the probes' `ping` always answers.
        if args.error_rate and last_user_text(body) != "ping" and random.random() < args.error_rate:
            return self.error(500, f"a bad revision: this stand-in fails {args.error_rate:.0%} of chat completions (--error-rate {args.error_rate})")
        try:
            self.reply(200, answer(body))
        except Unavailable as err:
            self.error(err.status, str(err))

    def log_message(self, *_):
        pass


def main():
    # socketserver's listen backlog is 5: a burst of connections past it waits out SYN retries (1 s, 3 s, ...).
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True

    def stop(*_):
        # shutdown() waits for serve_forever to return, so not from its own thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{NAME}: stand-in {args.role} on {args.host}:{args.port}, model {args.model}" + (f", loading for {args.warmup}s" if args.warmup else ""), flush=True)
    server.serve_forever()
    server.server_close()
    print(f"{NAME}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

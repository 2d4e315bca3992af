import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import type { Resources } from '../../src/config/resources-schema';
import type { GroupPlan, Plan } from '../../src/plan/plan-schema';
import type { RunState } from '../../src/contract/run-state';
import { makePlan } from '../helpers/plans';
import { waitFor } from './local-fixtures';

/**
 * The PD sample as a long-lived service for the healing and resizing tests: stand-in prefill and
 * decode workers (HTTP on :8000, READY after a short warm-up) and a router that forwards every
 * request through a READY prefill and a READY decode node read from its peers.json, with an
 * `on_peers_change` hook that logs what it sees.
 */

const WORKER = `python3 - <<'PY'
import json, os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = os.environ["DSTACK_NODE_GROUP_NAME"]
node = f"{mode}/{os.environ['DSTACK_NODE_GROUP_NODE_RANK']}"
ready_at = time.time() + 1.0
class H(BaseHTTPRequestHandler):
    def reply(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(raw))); self.end_headers(); self.wfile.write(raw)
    def do_GET(self):
        self.reply(503 if time.time() < ready_at else 200, {"node": node})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if mode == "prefill": self.reply(200, {"node": node, "kv": req["prompt"] + ", "})
        else: self.reply(200, {"node": node, "ip": os.environ.get("DSTACK_NODE_RANK"), "text": req["kv"] + "world"})
    def log_message(self, *a): pass
ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
PY`;

const ROUTER = `python3 - <<'PY'
import json, os, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
def ready(group):
    with open(os.environ["TROUPE_PEERS_FILE"]) as f:
        book = json.load(f)
    g = next(g for g in book["groups"] if g["name"] == group)
    return [n["ip"] for n in g["nodes"] if n["ready"]]
def call(ip, body):
    req = urllib.request.Request(f"http://{ip}:8000/generate", data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        pre = call(ready("prefill")[0], {"prompt": body["prompt"]})
        out = call(ready("decode")[-1], {"kv": pre["kv"]})
        raw = json.dumps({"text": out["text"], "prefill": pre["node"], "decode": out["node"]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(raw))); self.end_headers(); self.wfile.write(raw)
    def log_message(self, *a): pass
print("router up", flush=True)
ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
PY`;

/** Appends the peers version and the READY decode addresses the router sees, one line per hook run. */
export function hookCommand(logPath: string): string {
  return `python3 -c 'import json,os; b=json.load(open(os.environ["TROUPE_PEERS_FILE"])); d=[n["ip"] for g in b["groups"] if g["name"]=="decode" for n in g["nodes"] if n["ready"]]; print(os.environ["TROUPE_PEERS_VERSION"], b["version"], ",".join(d))' >> ${logPath}`;
}

const probe = { check: { kind: 'http' as const, port: 8000, path: '/' }, interval_s: 0.3, timeout_s: 60 };

export interface ServicePlanOptions {
  hookLog: string;
  prefillNodes?: number;
  prefill?: Partial<GroupPlan>;
  router?: Partial<GroupPlan>;
  /** Every group's resources (default: the plans helper's CPU-only node). */
  resources?: Resources;
}

export function servicePlan(name: string, decode: Partial<GroupPlan>, opts: ServicePlanOptions): Plan {
  const { resources } = opts;
  const plan = makePlan(name, [
    { name: 'router', nodes: 1, commands: [ROUTER], resources },
    { name: 'prefill', nodes: opts.prefillNodes ?? 1, commands: [WORKER], resources },
    { name: 'decode', nodes: decode.nodes ?? 1, commands: [WORKER], resources },
  ]);
  const [router, prefill, decodeGroup] = plan.groups as [GroupPlan, GroupPlan, GroupPlan];
  Object.assign(router, { depends_on: [1, 2], on_peers_change: hookCommand(opts.hookLog), ...opts.router });
  Object.assign(prefill, { ready: probe, ...opts.prefill });
  Object.assign(decodeGroup, { ready: probe, ...decode });
  return plan;
}

/** Every node up: READY, the router (no probe) RUNNING. */
export const allUp = (s: RunState): boolean =>
  s.status === 'RUNNING' && s.jobs.filter((j) => !j.removed).every((j) => j.status === 'READY' || (j.group_name === 'router' && j.status === 'RUNNING'));

export const hookLines = (path: string): string[] => (existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : []);

/** The first line of the hook log that passes `check` (60 s at most). */
export function waitForLine(path: string, check: (line: string) => boolean): Promise<string> {
  return waitFor(`a line in ${path}`, async () => hookLines(path).find(check), 60_000);
}

/** POST /generate through the router at `ip` (its server may still be coming up: refused connections are tried again for 10 s). */
export async function askRouter(ip: string): Promise<{ text: string; prefill: string; decode: string }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      return await postGenerate(ip);
    } catch (err) {
      if (!(err instanceof Error && err.message.includes('ECONNREFUSED')) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

function postGenerate(ip: string): Promise<{ text: string; prefill: string; decode: string }> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ prompt: 'Hello' });
    const req = request({ host: ip, port: 8000, path: '/generate', method: 'POST', timeout: 10_000, headers: { 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let data = '';
      res.on('data', (c: Buffer) => (data += c.toString()));
      res.on('end', () => {
        try {
          resolve(JSON.parse(data) as { text: string; prefill: string; decode: string });
        } catch {
          reject(new Error(`router answered ${res.statusCode}: ${data}`));
        }
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * The python server a node runs, found in the node's network namespace (`ip netns pids`). Looked
 * for up to 10 s: a node RUNNING (no probe) may still be a shell about to exec python3 on a loaded machine.
 */
export function serverPidIn(netns: string): number {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (const deadline = Date.now() + 10_000; ; Atomics.wait(pause, 0, 0, 50)) {
    const pids = execFileSync('ip', ['netns', 'pids', netns], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
    const server = pids.find((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('python3');
      } catch {
        return false;
      }
    });
    if (server !== undefined) return server;
    if (Date.now() > deadline) throw new Error(`no python3 in namespace ${netns}`);
  }
}

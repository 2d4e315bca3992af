import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A replica for services' e2e tests: a threaded HTTP server on port 8000 (python3's standard
 * library) that answers `<label> <rank>` — the label its first argument, else `replica` — and
 * `/slow` after 2 s; `/where` adds the address the request reached it on (which host answered);
 * `/metrics` a Prometheus counter, `replica_answered_total`, that counts ANSWER_RATE (its environment,
 * default 0) requests a second since it started whatever it is sent (a replica_metrics test's own traffic).
 * Written to `dir` (readable by a run's user); returns the command that runs it.
 */
export function writeReplicaServer(dir: string): (label?: string) => string {
  const file = join(dir, 'replica-server.py');
  writeFileSync(file, SERVER, { mode: 0o644 });
  return (label) => `exec python3 ${file}${label ? ` ${label}` : ''}`;
}

const SERVER = `
import http.server, os, sys, time
LABEL = sys.argv[1] if len(sys.argv) > 1 else 'replica'
START = time.monotonic()
RATE = float(os.environ.get('ANSWER_RATE', '0'))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/slow':
            time.sleep(2)
        where = ' %s' % self.connection.getsockname()[0] if self.path == '/where' else ''
        body = ('%s %s%s\\n' % (LABEL, os.environ['DSTACK_NODE_RANK'], where)).encode()
        if self.path == '/metrics':
            body = ('# TYPE replica_answered_total counter\\nreplica_answered_total %d\\n' % int(RATE * (time.monotonic() - START))).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('0.0.0.0', 8000), H).serve_forever()
`;

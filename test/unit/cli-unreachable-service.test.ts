import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/free-port';
import { troupeCli } from '../helpers/troupe-cli';

/**
 * The CLI against a Temporal address where nothing answers: it fails within its deadline, with one
 * line naming the address and what to check, instead of hanging.
 */

// A port that accepts connections and never says a word (a wrong service, a stuck proxy).
let silent: Server;
const held: Socket[] = [];
beforeAll(async () => {
  silent = createServer((socket) => held.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  for (const s of held) s.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

describe('the CLI when the Temporal service does not answer', () => {
  it('a closed port: fails at once, in one line naming the address and what to do', async () => {
    const port = await freePort();
    const r = await troupeCli(['ps', '--address', `127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    const lines = r.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      `cannot reach the Temporal service at 127.0.0.1:${port}: connection refused (nothing listens there); ` +
        'start the embedded one with `npm run dev-server -- start`, or point Troupe at yours with --address / TEMPORAL_ADDRESS',
    );
  }, 60_000);

  it('a port that accepts and never answers: fails after its 5 s deadline, in one line', async () => {
    const address = silent.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    for (const command of [['ps'], ['stop', 'some-run', '-y']]) {
      const r = await troupeCli([...command, '--address', `127.0.0.1:${port}`]);
      expect(r.code).toBe(1);
      const lines = r.stderr.trimEnd().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`cannot reach the Temporal service at 127.0.0.1:${port}: it accepts connections but no Temporal service answered within 5 s`);
      expect(lines[0]).toContain("check that this is the frontend's gRPC port");
      expect(r.ms).toBeLessThan(30_000);
    }
  }, 120_000);
});

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { loadServicePlan } from '../../src/plan';

/** `troupe plan` and `troupe apply` given a service, as a user runs them: the real bin script. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-service-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const EXAMPLE = 'examples/services/pd-router.yml';

function troupe(args: string[]) {
  const result = spawnSync(process.execPath, ['bin/troupe.js', ...args], {
    cwd: root,
    env: { ...process.env, NO_COLOR: '1' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('troupe plan -f SERVICE', () => {
  it('prints the service plan as JSON', () => {
    const { code, stdout, stderr } = troupe(['plan', '-f', EXAMPLE, '--json']);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual(loadServicePlan(readFileSync(join(root, EXAMPLE), 'utf8'), EXAMPLE, { environ: {} }));
  });

  it('shows the revision, port, auth, router, rollout and a row per group with its replicas', () => {
    const { code, stdout } = troupe(['plan', '-f', EXAMPLE]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^ Service +pd-service$/m);
    expect(stdout).toMatch(/^ Revision +[0-9a-f]{12}$/m);
    expect(stdout).toMatch(/^ Port +8000$/m);
    expect(stdout).toMatch(/^ Auth +token required$/m);
    expect(stdout).toMatch(/^ Router +group router \(smg\)$/m);
    expect(stdout).toMatch(/^ Rollout +independent \(each group on its own, one replica at a time\); rollback auto; drain 30s$/m);
    expect(stdout).toMatch(/^ router +1 +smg /m);
    expect(stdout).toMatch(/^ prefill +1\.\.4 \(rps 10\/replica\) +- /m);
    expect(stdout).toMatch(/^ decode +2 +- .*after prefill/m);
    expect(stdout).not.toContain('not built yet');
  });

  it('refuses an invalid service with one file:line:col line and exit 1', () => {
    const file = join(scratch, 'bad.yml');
    writeFileSync(file, 'type: service\nport: 8000\ngroups:\n  - {replicas: 2, router: {}, commands: [a]}\n');
    const { code, stdout, stderr } = troupe(['plan', '-f', file]);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr.trim()).toBe(`${file}:4:16: groups[0].replicas: the router group "0" must have replicas: 1 (dstack runs one router)`);
  });
});


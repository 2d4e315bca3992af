import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { hiddenDirectories, isolationTools } from '../../src/backends/local/job-isolation';
import { isolationNotice } from '../../src/backends/local/isolation-mode';
import { ensureRunUser, lookupUser, removeRunUser, runUserName } from '../../src/backends/local/run-user';
import { renderEnvFile } from '../../src/runner/env-file';
import { ISOLATION_FAILED_EXIT_CODE, renderIsolatedLaunch } from '../../src/runner/isolated-launch';
import { JobLayout as L } from '../../src/runner/job-layout';
import { renderLaunchScript } from '../../src/runner/launch-script';
import { renderNodeHosts } from '../../src/runner/node-hosts';

/** The pieces of local job isolation: the run's user, what is hidden, the script that sets it up. */

const root = process.getuid?.() === 0;
const scratch = mkdtempSync(join(tmpdir(), 'troupe-isolation-unit-'));
const users: string[] = [];
afterAll(async () => {
  for (const name of users) await removeRunUser(name);
  rmSync(scratch, { recursive: true, force: true });
});

function freshUserName(): string {
  const name = runUserName(`unit-${randomBytes(6).toString('hex')}`, 0);
  users.push(name);
  return name;
}

describe('hiddenDirectories', () => {
  it('hides the state directory, the key directories and the outermost closed ancestor, none inside another', async () => {
    const closed = join(scratch, 'closed');
    const state = join(closed, 'state');
    const job = join(state, 'runs', 'r', '0', 'job');
    const keys = join(scratch, 'keys');
    mkdirSync(job, { recursive: true });
    mkdirSync(keys);
    writeFileSync(join(keys, 'secret.key'), 'k', { mode: 0o600 });
    chmodSync(scratch, 0o755);
    chmodSync(closed, 0o700);
    expect(await hiddenDirectories(job, state, [join(keys, 'secret.key')])).toEqual([keys, closed]);
    // Traversable all the way: the state directory itself; a key inside it adds nothing; no key file, nothing for it.
    chmodSync(closed, 0o755);
    expect(await hiddenDirectories(job, state, [join(state, 'secret.key')])).toEqual([state]);
    expect(await hiddenDirectories(job, state, [join(scratch, 'missing', 'secret.key')])).toEqual([state]);
    // The key beside the state directory (`.troupe/secret.key` and `.troupe/state`): its directory covers both.
    expect(await hiddenDirectories(job, state, [join(closed, 'secret.key')])).toEqual([state]);
    writeFileSync(join(closed, 'secret.key'), 'k', { mode: 0o600 });
    expect(await hiddenDirectories(job, state, [join(closed, 'secret.key')])).toEqual([closed]);
    // A codec key file elsewhere (TROUPE_CODEC_KEY_FILE): its directory is hidden as well.
    const codecKeys = join(scratch, 'codec');
    mkdirSync(codecKeys);
    writeFileSync(join(codecKeys, 'codec.keys'), 'k', { mode: 0o600 });
    expect(await hiddenDirectories(job, state, [join(closed, 'secret.key'), join(codecKeys, 'codec.keys')])).toEqual([codecKeys, closed]);
  });
});

describe('isolationNotice', () => {
  it('says plainly when jobs are not isolated, and is silent when they are', () => {
    const previous = process.env.TROUPE_LOCAL_ISOLATION;
    try {
      process.env.TROUPE_LOCAL_ISOLATION = '0';
      expect(isolationNotice('the local fleet')).toMatch(/^the local fleet does not isolate jobs \((not root|TROUPE_LOCAL_ISOLATION=0)\): /);
      delete process.env.TROUPE_LOCAL_ISOLATION;
      if (root) expect(isolationNotice('the local fleet')).toBeNull();
      else expect(isolationNotice('the local fleet')).toContain('(not root)');
    } finally {
      if (previous === undefined) delete process.env.TROUPE_LOCAL_ISOLATION;
      else process.env.TROUPE_LOCAL_ISOLATION = previous;
    }
  });
});

describe.skipIf(!root)('the run user (as root)', () => {
  it('is created once however many ask, and removed with what it left: processes killed, files given to root', async () => {
    const name = freshUserName();
    const [a, b] = await Promise.all([ensureRunUser(name), ensureRunUser(name)]);
    expect(a).toEqual(b);
    expect(a.uid).toBeGreaterThan(0);
    expect(await lookupUser(name)).toEqual(a);
    // What a job left: a process that outlived it, and a file in the machine's scratch directory.
    const left = spawn('setpriv', [`--reuid=${a.uid}`, `--regid=${a.gid}`, '--clear-groups', 'sleep', '300'], { stdio: 'ignore' });
    const file = join('/tmp', `troupe-left-${randomBytes(4).toString('hex')}`);
    writeFileSync(file, 'secret', { mode: 0o600 });
    chownSync(file, a.uid, a.gid);
    await sleep(100);
    const exited = new Promise((resolve) => left.once('exit', resolve));
    await removeRunUser(name);
    await exited;
    expect(await lookupUser(name)).toBeNull();
    expect(statSync(file).uid).toBe(0);
    rmSync(file);
    await removeRunUser(name);
  });

  it('made by a worker that died is removed by any other: the name derives from the run', async () => {
    const name = runUserName('a-run-whose-worker-died', 3);
    users.push(name);
    expect(name).toMatch(/^troupe-[0-9a-f]{10}$/);
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', name]);
    await removeRunUser(runUserName('a-run-whose-worker-died', 3));
    expect(await lookupUser(name)).toBeNull();
  });
});

describe.skipIf(!root)('renderIsolatedLaunch in real namespaces (as root)', () => {
  it.each([
    ['its mounts by one perl process', true],
    ['its mounts by a `mount` process each', false],
  ])("runs the commands as the run's user, sees its own directory and pids only, and no task env reaches root (%s)", async (_how, byPerl) => {
    const state = join(scratch, `launch-state-${byPerl ? 'perl' : 'mount'}`);
    const job = join(state, 'runs', 'r', '0', 'job');
    // A name no other process of the machine uses: what the node writes in its /tmp must not appear in the machine's.
    const leak = `/tmp/troupe-isolation-${randomBytes(6).toString('hex')}`;
    const other = join(state, 'runs', 'other', '0', 'job');
    mkdirSync(join(job, L.workDir), { recursive: true });
    mkdirSync(join(job, L.started));
    mkdirSync(other, { recursive: true });
    writeFileSync(join(other, L.env), 'secret');
    const name = freshUserName();
    const user = await ensureRunUser(name);
    chownSync(join(job, L.workDir), user.uid, user.gid);
    chownSync(job, 0, user.gid);
    chmodSync(job, 0o750);
    // A task that sets PATH and LD_PRELOAD: they take effect only once the commands run as the user.
    writeFileSync(join(job, L.env), renderEnvFile({ PATH: '/nowhere:/usr/bin:/bin', LD_PRELOAD: '/nowhere/evil.so', GREETING: 'hi' }), { mode: 0o640 });
    chownSync(join(job, L.env), 0, user.gid);
    const commands = [
      'export PATH=/usr/bin:/bin',
      'echo "uid $(id -u) home $HOME cwd $PWD greeting $GREETING"',
      `ls ${join(state, 'runs')}`,
      `cat ${join(other, L.env)} || echo "other env: hidden"`,
      'echo "pids $(ls /proc | grep -c "^[0-9]")"',
      // A machine of its own: name, /etc/hosts, /tmp and /dev/shm, TMPDIR.
      'echo "host $(hostname) at $(getent hosts "$(hostname)" | cut -d" " -f1) peer $(getent hosts gpu-1 | cut -d" " -f1)"',
      `echo "tmp $TMPDIR $(ls -A /tmp | tr '\\n' ' ')"`,
      `echo mine > ${leak} && echo "shm $(df -k --output=size /dev/shm | tail -1 | tr -d " ")"`,
    ];
    writeFileSync(join(job, L.launchScript), renderLaunchScript({ commands, workingDir: null, image: null }), { mode: 0o750 });
    chownSync(join(job, L.launchScript), 0, user.gid);
    const found = isolationTools();
    if (byPerl) expect(found.perlMounts, 'this machine has perl and a known mount(2)').not.toBeNull();
    const tools = byPerl ? found : { ...found, perlMounts: null };
    const hide = await hiddenDirectories(job, state, []);
    const identity = renderNodeHosts({ ip: '127.213.9.2', name: 'gpu-0' }, [{ ip: '127.213.9.3', name: 'gpu-1' }]);
    writeFileSync(join(job, L.hosts), identity.hosts, { mode: 0o644 });
    const node = { hostname: identity.hostname, hostsFile: L.hosts };
    writeFileSync(join(job, L.isolatedLaunch), renderIsolatedLaunch({ jobDir: job, hide, user, ownNetwork: false, node, shmBytes: 8 * 1024 ** 2, tools }), { mode: 0o700 });
    const hostTmp = mkdtempSync('/tmp/troupe-host-');
    const hostName = readFileSync('/proc/sys/kernel/hostname', 'utf8');
    const r = spawnSync(tools.unshare, ['--mount', '--pid', '--uts', '--ipc', '--fork', 'bash', join(job, L.isolatedLaunch)], { encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } });
    rmSync(hostTmp, { recursive: true, force: true });
    expect(r.status, r.stderr.split('\n').filter((l) => !l.includes('LD_PRELOAD')).join('\n')).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe(`uid ${user.uid} home ${join(job, L.workDir)} cwd ${join(job, L.workDir)} greeting hi`);
    expect(lines[1]).toBe('r');
    expect(lines[2]).toBe('other env: hidden');
    expect(Number(lines[3]?.replace('pids ', ''))).toBeLessThan(10);
    expect(lines[4]).toBe('host gpu-0 at 127.213.9.2 peer 127.213.9.3');
    // The machine's /tmp (hostTmp in it) is not there; the job dir, under the scratch dir, may be.
    expect(lines[5]).not.toContain(basename(hostTmp));
    expect(lines[5]?.startsWith('tmp /tmp')).toBe(true);
    expect(lines[6]).toBe('shm 8192');
    // Nothing of the node's leaked out: the machine's name and /tmp are as they were.
    expect(readFileSync('/proc/sys/kernel/hostname', 'utf8')).toBe(hostName);
    expect(existsSync(leak)).toBe(false);
  });

  it('a step that fails names its target and ends the launch with the isolation exit code', () => {
    const job = join(scratch, 'launch-fails');
    mkdirSync(join(job, L.started), { recursive: true });
    const tools = isolationTools();
    const user = { name: 'nobody', uid: 65534, gid: 65534 };
    // A hidden directory that is not there: mount(2) fails with ENOENT.
    const missing = join(scratch, 'not-there');
    writeFileSync(join(job, L.isolatedLaunch), renderIsolatedLaunch({ jobDir: job, hide: [missing], user, ownNetwork: false, node: null, shmBytes: null, tools }), { mode: 0o700 });
    const r = spawnSync(tools.unshare, ['--mount', '--pid', '--uts', '--ipc', '--fork', 'bash', join(job, L.isolatedLaunch)], { encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } });
    expect(r.status).toBe(ISOLATION_FAILED_EXIT_CODE);
    expect(r.stderr).toContain(`troupe: mount ${missing}: No such file or directory`);
    expect(r.stderr).toContain('troupe: could not isolate the job');
  });
});

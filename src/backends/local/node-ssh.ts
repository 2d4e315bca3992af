import { mkdirSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import type { NodeSshKeys } from '../backend';
import { renderNodeSsh, SshLayout } from '../../runner/inter-node-ssh';
import { JobLayout as L } from '../../runner/job-layout';
import { isAlive, type ProcessIdentity } from './proc';
import type { RunUser } from './run-user';
import { pathExists, writeFileAtomicSync } from './state-files';
import { setDirectoryOwner } from './job-dir-safety';
import type { FolderWatch } from './folder-watch';

/**
 * Inter-node SSH on the local fleet (src/runner/inter-node-ssh.ts says what it is): each node's
 * server listens on port 22 of the node's own address, in its network namespace, as the job's
 * user (the run's user when jobs are isolated: then it runs inside the job's mount and pid
 * namespaces and ends with them). Stopping or releasing the job ends it like any process of the
 * job, and release removes the `ssh/` directory with the rest of the job's files.
 *
 * Loopback mode has none: its nodes share this machine's ports, so there is no port 22 per node.
 */

const SSHD = '/usr/sbin/sshd';
const SSH = '/usr/bin/ssh';
const PORT = 22;

/**
 * Writes the job's `ssh/` directory: root's, readable by the run's group when isolated (the keys
 * too: ssh and sshd refuse a key its own user could share, not one root owns), its `state/` the
 * job user's. Returns the entry script, relative to the job directory, for the wrapper.
 * Synchronous, as the job's other files are (writeFileAtomicSync says why): ~10 small files.
 */
export function writeNodeSsh(jobDir: string, ip: string, keys: NodeSshKeys, user: RunUser | null): string {
  const rendered = renderNodeSsh({
    jobDir,
    keys,
    listen: { ip, port: PORT },
    peerPorts: keys.peers.map(() => PORT),
    user: user?.name ?? userInfo().username,
    home: user ? join(jobDir, L.workDir) : null,
    // An isolated job's sessions run in its mount namespace: its private /tmp (isolated-launch.ts).
    tmpdir: user ? '/tmp' : null,
    // Its processes are found by their namespaces (network, and pid when isolated).
    sessionEnv: {},
    sshd: SSHD,
    ssh: SSH,
  });
  const owner = user ? { uid: 0, gid: user.gid } : null;
  const base = join(jobDir, SshLayout.dir);
  for (const sub of [base, join(base, SshLayout.bin), join(base, SshLayout.state)]) {
    mkdirSync(sub, { recursive: true });
    setDirectoryOwner(sub, { uid: 0, gid: user?.gid ?? 0 }, user ? 0o750 : 0o700);
  }
  if (user) setDirectoryOwner(join(base, SshLayout.state), user, 0o700);
  for (const [name, content] of Object.entries(rendered.files)) {
    const executable = rendered.scripts.includes(name);
    const mode = user ? (executable ? 0o750 : 0o640) : executable ? 0o700 : 0o600;
    writeFileAtomicSync(join(base, name), content, mode, owner);
  }
  return `${SshLayout.dir}/${SshLayout.run}`;
}

/**
 * Waits until the node's SSH server listens (its pid file), so a job is RUNNING only with its
 * server up: with `startup_order: workers-first` the master's `mpirun` finds every peer's. A job
 * that ended first (its server could not start: its log says why), or runs without a server (no
 * sshd on this machine: its log says so), is not waited for. `folders` watches its `ssh/state/`.
 */
export async function waitForSshServer(jobDir: string, leader: ProcessIdentity, timeoutMs: number, folders: FolderWatch): Promise<void> {
  const state = join(jobDir, SshLayout.dir, SshLayout.state);
  const settled = async () => (await pathExists(join(state, SshLayout.pidFile))) || (await pathExists(join(state, SshLayout.off)));
  const deadline = Date.now() + timeoutMs;
  while (!(await settled()) && Date.now() < deadline) {
    if (!(await isAlive(leader))) return;
    await folders.changed(50);
  }
}

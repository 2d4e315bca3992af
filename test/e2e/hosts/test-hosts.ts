import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { appendFile, chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SshTarget } from '../../../src/backends/ssh/target';
import { CGROUP_PARENT } from '../../../src/backends/cgroup-limits';
import { sshRunCgroupPrefix } from '../../../src/backends/ssh/job-cgroup-script';
import { runDirectory } from '../../../src/backends/ssh/job-paths';
import { CONTROL_SHELL_COMMAND } from '../../../src/backends/ssh/control-shell';
import { WATCHER_READY_MARK } from '../../../src/backends/ssh/job-watch';
import { listNow, readFileNow } from '../../helpers/live-dir';
import { run, runSync } from './command';
import { FAKE_DOCKER_OOM_NEXT, fakeDocker } from './fake-docker';
import { fakeAmdSmi, fakeNvidiaSmi, fakeRocmSmi, type FakeGpus } from './fake-gpu-tools';

/**
 * Real SSH hosts on this machine, for end-to-end tests. Each host is a network namespace
 * (`trph-<pid>-<n>`) with its own sshd (own ed25519 host key, key-only root login with a generated
 * client key) and its own mount namespace, where fake GPU tools are bind-mounted over
 * /usr/local/sbin. See README.md beside this file for the network layout.
 */

export interface TestHostSpec {
  name: string;
  gpus?: FakeGpus;
  /** Which fake tools to install for the GPUs: nvidia-smi (default), or amd-smi and rocm-smi. */
  vendor?: 'nvidia' | 'amd';
  /** Name of another host of the same call: this one is then reachable only from that host. */
  behindJump?: string;
  /** sshd port inside the namespace (default 22). */
  port?: number;
  /** 'fake-docker': a docker CLI stand-in on the host's PATH (see fake-docker.ts). */
  containerRuntime?: 'fake-docker';
  /**
   * Keep bash from reading root's ~/.bashrc in SSH sessions (here it runs `pyenv init`, ~0.15 s
   * and more under load, in every command). Default true: a session killed while `pyenv rehash`
   * holds its lock (a host taken down mid-command) leaves the lock behind, and every later
   * .bashrc then waits 60 s for it. Set false to measure what the login shell costs.
   */
  skipBashrc?: boolean;
}

export interface TestHost {
  name: string;
  namespace: string;
  address: string;
  port: number;
  /** `ssh-ed25519 AAAA...` of the current host key. */
  hostPublicKey: string;
  /** `SHA256:...` of the current host key, as ssh-keygen -l prints it. */
  hostKeyFingerprint: string;
  behindJump: string | null;
  /** A directory only this host's jobs use (the hosts share one file system). */
  jobBaseDir: string;
  /** pid of the host's listening sshd (0 once the host is stopped). */
  sshdPid: number;
}

export interface JobProcess {
  pid: number;
  command: string;
}

/** The network of one harness, its own on this machine (see claimNetwork). */
export interface TestNetwork {
  /** The bridge in the root namespace that hosts not behind a jump are on. */
  bridge: string;
  /** The bridge's address, the root namespace's side of `subnet`. */
  gateway: string;
  /** The hosts' /24, e.g. `10.214.38.0/24`. */
  subnet: string;
  /** Where the jump hosts' private subnets are, routed nowhere from the root namespace. */
  hiddenSubnet: string;
  /** Root-namespace ends of the hosts' veth pairs. */
  links: readonly string[];
}

export interface TestHosts {
  hosts: Record<string, TestHost>;
  network: TestNetwork;
  host(name: string): TestHost;
  /** Private key that every host accepts for root (mode 600). */
  clientKeyPath: string;
  /** known_hosts with every host's key as created (changeHostKey does not update it). */
  knownHostsFile: string;
  /** The known_hosts line of a host's current key (`[addr]:port` form when the port is not 22). */
  knownHostsLine(name: string): string;
  /** An SshTarget for root on the host, with the proxy_jump chain of behindJump. */
  target(name: string, overrides?: Partial<SshTarget>): SshTarget;
  /** "Host lost": its link goes down, then every process in it is killed (no FIN ever leaves). */
  stopHost(name: string): Promise<void>;
  /** "Host hangs": every process in it is stopped (SIGSTOP); the link stays up. */
  freezeHost(name: string): Promise<void>;
  thawHost(name: string): Promise<void>;
  /** Restarts the host's sshd with a freshly generated host key. */
  changeHostKey(name: string): Promise<void>;
  /** Processes running in the host's namespace; sshd itself, Troupe's control shells and zombies left out. */
  jobProcesses(name: string): Promise<JobProcess[]>;
  /** Arguments of every `docker run` on a host with the fake docker, oldest first. */
  dockerRuns(name: string): Promise<string[][]>;
  /** The fake docker's next `inspect` says the container was OOM-killed (once). */
  dockerReportsOomNext(name: string): Promise<void>;
  /** A new client key pair that no host accepts (mode 600). */
  generateClientKey(fileName: string): Promise<string>;
  /** A new client key pair every host accepts for root with these authorized_keys options (`restrict,permitopen="…"`). */
  authorizedClientKey(fileName: string, keyOptions: string): Promise<string>;
  /** Removes every namespace, link, bridge, route and process made; safe to call twice. */
  destroy(): Promise<void>;
}

const NETNS_PREFIX = 'trph-';
/** Bridges of harnesses, `trps<k>` (see claimNetwork); the owner's pid is in the bridge's alias. */
const BRIDGE_PREFIX = 'trps';
/** Pairs of /24s a harness may claim: k in 1..PAIRS (10.214.0.0/24 is older checkouts' fixed subnet). */
const PAIRS = 127;
/** A jump host's private bridge, inside its namespace; the j-th jump host of a harness gets the j-th /27 of hiddenSubnet. */
const JUMP_BRIDGE = 'trpjb0';
/** The checkout this file is in: with the pid, what makes a harness's first choice of network its own. */
const CHECKOUT = fileURLToPath(new URL('../../..', import.meta.url));

interface HostState extends TestHost {
  skipBashrc: boolean;
  dir: string;
  sshdConfig: string;
  hostKeyPath: string;
  keyGeneration: number;
}

const live = new Set<HarnessInstance>();
let harnessesMade = 0;
let exitHooked = false;

interface HarnessInstance {
  destroySync(): void;
}

function namespaceOwnerAlive(ns: string): boolean {
  const pid = Number(ns.slice(NETNS_PREFIX.length).split('-')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return true;
  return existsSync(`/proc/${pid}`);
}

function listNamespaces(): string[] {
  try {
    return readdirSync('/run/netns').filter((n) => n.startsWith(NETNS_PREFIX));
  } catch {
    return [];
  }
}

function killNamespaceSync(ns: string): void {
  const pids = runSync('ip', ['netns', 'pids', ns]).split('\n').filter(Boolean);
  for (const pid of pids) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
  runSync('ip', ['netns', 'del', ns]);
}

interface ClaimedNetwork {
  k: number;
  bridge: string;
  gateway: string;
  subnet: string;
  hiddenSubnet: string;
  /** Both /24s: unreachable from the root namespace but for the bridge's own /24, which is more specific. */
  range: string;
}

function networkOf(k: number): ClaimedNetwork {
  return {
    k,
    bridge: `${BRIDGE_PREFIX}${k}`,
    gateway: `10.214.${2 * k}.1`,
    subnet: `10.214.${2 * k}.0/24`,
    hiddenSubnet: `10.214.${2 * k + 1}.0/24`,
    range: `10.214.${2 * k}.0/23`,
  };
}

function releaseNetworkSync(net: ClaimedNetwork): void {
  runSync('ip', ['link', 'del', net.bridge]);
  runSync('ip', ['route', 'del', 'unreachable', net.range]);
}

/**
 * Claims a network no other harness on this machine uses (two checkouts, or two test files, at
 * once): with one shared subnet their hosts had the same addresses, and one run's ssh reached the
 * other's sshd ("HOST KEY CHANGED"). Creating the bridge `trps<k>` is the claim: the kernel lets
 * one process create a name. k is first picked from a hash of the checkout and the pid, as the
 * local fleet picks its subnet from its state directory, then the next free one.
 */
async function claimNetwork(): Promise<ClaimedNetwork> {
  const seed = `${CHECKOUT}\0${process.pid}\0${harnessesMade++}`;
  const first = createHash('sha256').update(seed).digest().readUInt32BE(0) % PAIRS;
  for (let i = 0; i < PAIRS; i++) {
    const net = networkOf(1 + ((first + i) % PAIRS));
    try {
      await run('ip', ['link', 'add', net.bridge, 'type', 'bridge']);
    } catch (err) {
      if (/File exists/.test((err as Error).message)) continue;
      throw err;
    }
    try {
      await run('ip', ['link', 'set', net.bridge, 'alias', `${NETNS_PREFIX}${process.pid}`]);
      await run('ip', ['addr', 'add', `${net.gateway}/24`, 'dev', net.bridge]);
      await run('ip', ['link', 'set', net.bridge, 'up']);
      // Hidden hosts' addresses must not leave the machine by its default route: refused at once instead.
      await run('ip', ['route', 'replace', 'unreachable', net.range]);
    } catch (err) {
      releaseNetworkSync(net);
      throw err;
    }
    return net;
  }
  throw new Error(`test hosts: all ${PAIRS} networks 10.214.2..255.0/24 are taken (bridges ${BRIDGE_PREFIX}1..${PAIRS})`);
}

/** Namespaces and networks left by a test process that died without cleaning up (SIGKILL, OOM). */
function sweepStaleSync(): void {
  for (const ns of listNamespaces()) if (!namespaceOwnerAlive(ns)) killNamespaceSync(ns);
  for (const name of listNow('/sys/class/net')) {
    const k = Number(name.slice(BRIDGE_PREFIX.length));
    if (!name.startsWith(BRIDGE_PREFIX) || !Number.isInteger(k) || k < 1 || k > PAIRS) continue;
    const owner = (readFileNow(`/sys/class/net/${name}/ifalias`) ?? '').trim();
    if (owner.startsWith(NETNS_PREFIX) && !namespaceOwnerAlive(owner)) releaseNetworkSync(networkOf(k));
  }
}

function hookProcessExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  const cleanup = (): void => {
    for (const instance of [...live]) instance.destroySync();
  };
  process.on('exit', cleanup);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      cleanup();
      process.kill(process.pid, signal);
    });
  }
}

function fingerprintOfPublicKey(line: string): string {
  const blob = Buffer.from(line.trim().split(/\s+/)[1] ?? '', 'base64');
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

function orderByJump(specs: TestHostSpec[]): TestHostSpec[] {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const ordered: TestHostSpec[] = [];
  const visiting = new Set<string>();
  const visit = (spec: TestHostSpec): void => {
    if (ordered.includes(spec)) return;
    if (visiting.has(spec.name)) throw new Error(`test hosts: jump cycle through ${spec.name}`);
    visiting.add(spec.name);
    if (spec.behindJump) {
      const jump = byName.get(spec.behindJump);
      if (!jump) throw new Error(`test hosts: ${spec.name} is behind unknown host ${spec.behindJump}`);
      visit(jump);
    }
    ordered.push(spec);
  };
  specs.forEach(visit);
  return ordered;
}

export async function createTestHosts(specs: TestHostSpec[]): Promise<TestHosts> {
  const names = new Set<string>();
  for (const spec of specs) {
    if (!/^[a-z0-9][a-z0-9-]*$/.test(spec.name)) throw new Error(`test hosts: bad host name "${spec.name}"`);
    if (names.has(spec.name)) throw new Error(`test hosts: duplicate host name "${spec.name}"`);
    names.add(spec.name);
  }
  if (!existsSync('/usr/sbin/sshd')) {
    throw new Error('test hosts need openssh-server: run scripts/setup.sh --test');
  }
  hookProcessExit();
  sweepStaleSync();
  await mkdir('/run/sshd', { recursive: true });
  const net = await claimNetwork();

  const root = mkdtempSync(join(tmpdir(), `trph-${process.pid}-`));
  const tag = `${process.pid}-${root.slice(-6)}`;
  const hosts = new Map<string, HostState>();
  const namespaces: string[] = [];
  /** Root-namespace ends of veth pairs: deleted explicitly, as a namespace's own teardown is asynchronous. */
  const rootLinks: string[] = [];
  /** Per jump host: the first address of its /27 in net.hiddenSubnet and the next free one. */
  const jumpSubnets = new Map<string, { base: number; next: number }>();
  const hiddenPrefix = net.hiddenSubnet.slice(0, net.hiddenSubnet.lastIndexOf('.'));
  let nextBridgeHost = 2;
  let destroyed = false;

  const instance: HarnessInstance = {
    destroySync() {
      if (destroyed) return;
      destroyed = true;
      live.delete(instance);
      for (const link of rootLinks) runSync('ip', ['link', 'del', link]);
      for (const ns of namespaces) killNamespaceSync(ns);
      for (const host of hosts.values()) removeJobCgroupsSync(host.jobBaseDir);
      releaseNetworkSync(net);
      rmSync(root, { recursive: true, force: true });
    },
  };
  live.add(instance);

  const clientKeyPath = join(root, 'client_ed25519');
  await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'troupe-test-client', '-f', clientKeyPath]);
  await writeFile(join(root, 'authorized_keys'), await readFile(`${clientKeyPath}.pub`, 'utf8'));
  const knownHostsFile = join(root, 'known_hosts');

  const state = (name: string): HostState => {
    const host = hosts.get(name);
    if (!host) throw new Error(`test hosts: no host named "${name}"`);
    return host;
  };

  async function startSshd(host: HostState): Promise<void> {
    host.keyGeneration += 1;
    host.hostKeyPath = join(host.dir, `host_ed25519_key.${host.keyGeneration}`);
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `${host.name}-host`, '-f', host.hostKeyPath]);
    host.hostPublicKey = (await readFile(`${host.hostKeyPath}.pub`, 'utf8')).trim().split(/\s+/).slice(0, 2).join(' ');
    host.hostKeyFingerprint = fingerprintOfPublicKey(host.hostPublicKey);
    const pidFile = join(host.dir, 'sshd.pid');
    rmSync(pidFile, { force: true });
    await writeFile(
      host.sshdConfig,
      [
        `ListenAddress ${host.address}:${host.port}`,
        `HostKey ${host.hostKeyPath}`,
        `PidFile ${pidFile}`,
        `AuthorizedKeysFile ${join(root, 'authorized_keys')}`,
        'PermitRootLogin prohibit-password',
        'PubkeyAuthentication yes',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'UseDNS no',
        'PrintMotd no',
        'AllowTcpForwarding yes',
        'MaxStartups 100:30:200',
        'Subsystem sftp internal-sftp',
        // bash reads ~/.bashrc for an SSH command only at shell level 1; from SHLVL=1 it starts at 2.
        ...(host.skipBashrc ? ['SetEnv SHLVL=1'] : []),
        '',
      ].join('\n'),
    );
    // ip netns exec, unshare and sh all exec the next program: the child's pid is sshd's.
    const child = spawn(
      'ip',
      [
        'netns', 'exec', host.namespace, 'unshare', '-m', '--propagation', 'private', 'sh', '-c',
        // A /dev/shm of its own, as a machine has (Open MPI names its shared-memory segments by host name);
        // the machine's cgroup hierarchies, as a machine has them (ip netns exec mounts a /sys without them).
        `mount --bind "$0" /usr/local/sbin && mount -t tmpfs -o mode=1777,nosuid,nodev test-shm /dev/shm && ${cgroupMountsScript()}exec /usr/sbin/sshd -D -f "$1" -E "$2"`,
        join(host.dir, 'sbin'), host.sshdConfig, join(host.dir, 'sshd.log'),
      ],
      { stdio: 'ignore' },
    );
    child.unref();
    const deadline = Date.now() + 10_000;
    const writtenPid = (): number => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) || 0 : 0);
    while (writtenPid() === 0) {
      if (child.exitCode !== null || Date.now() > deadline) {
        const log = existsSync(join(host.dir, 'sshd.log')) ? readFileSync(join(host.dir, 'sshd.log'), 'utf8') : '';
        throw new Error(`test hosts: sshd of ${host.name} did not start: ${log.trim()}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    host.sshdPid = writtenPid();
    if (host.sshdPid !== child.pid) throw new Error(`test hosts: sshd of ${host.name} has pid ${host.sshdPid}, expected ${child.pid}`);
  }

  async function addHost(spec: TestHostSpec, index: number): Promise<void> {
    const namespace = `${NETNS_PREFIX}${tag}-${index}`;
    const dir = join(root, spec.name);
    await mkdir(join(dir, 'sbin'), { recursive: true });
    await mkdir(join(dir, 'jobs'), { recursive: true });
    await run('ip', ['netns', 'add', namespace]);
    namespaces.push(namespace);
    await run('ip', ['-n', namespace, 'link', 'set', 'lo', 'up']);

    // Root-side link names must be unique machine-wide and at most 15 characters: the claimed k makes them so.
    const linkBase = `${net.k}n${index}`;
    let address: string;
    let prefix = 24;
    if (!spec.behindJump) {
      address = `${net.gateway.slice(0, net.gateway.lastIndexOf('.'))}.${nextBridgeHost++}`;
      if (nextBridgeHost > 254) throw new Error('test hosts: out of addresses on the bridge');
      const outside = `trh${linkBase}`;
      await run('ip', ['link', 'add', outside, 'type', 'veth', 'peer', 'name', `trn${linkBase}`]);
      rootLinks.push(outside);
      await run('ip', ['link', 'set', `trn${linkBase}`, 'netns', namespace]);
      await run('ip', ['link', 'set', outside, 'master', net.bridge, 'up']);
    } else {
      const jump = state(spec.behindJump);
      let subnet = jumpSubnets.get(jump.name);
      if (!subnet) {
        if (jumpSubnets.size === 8) throw new Error('test hosts: at most 8 jump hosts');
        subnet = { base: 32 * jumpSubnets.size, next: 32 * jumpSubnets.size + 2 };
        jumpSubnets.set(jump.name, subnet);
        await run('ip', ['-n', jump.namespace, 'link', 'add', JUMP_BRIDGE, 'type', 'bridge']);
        await run('ip', ['-n', jump.namespace, 'addr', 'add', `${hiddenPrefix}.${subnet.base + 1}/27`, 'dev', JUMP_BRIDGE]);
        await run('ip', ['-n', jump.namespace, 'link', 'set', JUMP_BRIDGE, 'up']);
      }
      if (subnet.next > subnet.base + 30) throw new Error(`test hosts: at most 29 hosts behind ${jump.name}`);
      address = `${hiddenPrefix}.${subnet.next++}`;
      prefix = 27;
      const outside = `trj${linkBase}`;
      await run('ip', ['link', 'add', outside, 'type', 'veth', 'peer', 'name', `trn${linkBase}`]);
      await run('ip', ['link', 'set', outside, 'netns', jump.namespace]);
      await run('ip', ['link', 'set', `trn${linkBase}`, 'netns', namespace]);
      await run('ip', ['-n', jump.namespace, 'link', 'set', outside, 'master', JUMP_BRIDGE, 'up']);
    }
    await run('ip', ['-n', namespace, 'link', 'set', `trn${linkBase}`, 'name', 'eth0']);
    await run('ip', ['-n', namespace, 'addr', 'add', `${address}/${prefix}`, 'dev', 'eth0']);
    await run('ip', ['-n', namespace, 'link', 'set', 'eth0', 'up']);

    if (spec.gpus && spec.gpus.count > 0) {
      const tools: Array<[string, string]> =
        spec.vendor === 'amd'
          ? [['amd-smi', fakeAmdSmi(spec.gpus)], ['rocm-smi', fakeRocmSmi(spec.gpus)]]
          : [['nvidia-smi', fakeNvidiaSmi(spec.gpus)]];
      for (const [tool, script] of tools) {
        await writeFile(join(dir, 'sbin', tool), script);
        await chmod(join(dir, 'sbin', tool), 0o755);
      }
    }

    if (spec.containerRuntime === 'fake-docker') {
      await writeFile(join(dir, 'sbin', 'docker'), fakeDocker(join(dir, 'fake-docker')));
      await chmod(join(dir, 'sbin', 'docker'), 0o755);
    }

    const host: HostState = {
      name: spec.name,
      namespace,
      address,
      port: spec.port ?? 22,
      hostPublicKey: '',
      hostKeyFingerprint: '',
      behindJump: spec.behindJump ?? null,
      jobBaseDir: join(dir, 'jobs'),
      sshdPid: 0,
      skipBashrc: spec.skipBashrc ?? true,
      dir,
      sshdConfig: join(dir, 'sshd_config'),
      hostKeyPath: '',
      keyGeneration: 0,
    };
    hosts.set(spec.name, host);
    await startSshd(host);
  }

  const knownHostsLine = (name: string): string => {
    const host = state(name);
    const hostName = host.port === 22 ? host.address : `[${host.address}]:${host.port}`;
    return `${hostName} ${host.hostPublicKey}`;
  };

  const namespacePids = async (host: HostState): Promise<number[]> =>
    (await run('ip', ['netns', 'pids', host.namespace], { allowFailure: true })).split('\n').filter(Boolean).map(Number);

  const signalAll = async (host: HostState, signal: NodeJS.Signals): Promise<void> => {
    for (const pid of await namespacePids(host)) {
      try {
        process.kill(pid, signal);
      } catch {
        // exited meanwhile
      }
    }
  };

  try {
    let index = 0;
    for (const spec of orderByJump(specs)) await addHost(spec, index++);
    await writeFile(knownHostsFile, [...hosts.keys()].map((n) => knownHostsLine(n)).join('\n') + '\n');
  } catch (err) {
    instance.destroySync();
    throw err;
  }

  const api: TestHosts = {
    hosts: Object.fromEntries(hosts),
    network: { bridge: net.bridge, gateway: net.gateway, subnet: net.subnet, hiddenSubnet: net.hiddenSubnet, links: rootLinks },
    host: state,
    clientKeyPath,
    knownHostsFile,
    knownHostsLine,
    target(name, overrides = {}) {
      const host = state(name);
      const target: SshTarget = {
        hostname: host.address,
        port: host.port,
        user: 'root',
        identity_file: clientKeyPath,
        ...(host.behindJump ? { proxy_jump: api.target(host.behindJump) } : {}),
      };
      return { ...target, ...overrides };
    },
    async stopHost(name) {
      const host = state(name);
      await run('ip', ['-n', host.namespace, 'link', 'set', 'eth0', 'down']);
      await signalAll(host, 'SIGKILL');
      host.sshdPid = 0;
    },
    async freezeHost(name) {
      await signalAll(state(name), 'SIGSTOP');
    },
    async thawHost(name) {
      await signalAll(state(name), 'SIGCONT');
    },
    async changeHostKey(name) {
      const host = state(name);
      const old = host.sshdPid;
      if (old > 0) {
        process.kill(old, 'SIGTERM');
        const deadline = Date.now() + 5_000;
        while (existsSync(`/proc/${old}`) && !readFileSync(`/proc/${old}/stat`, 'utf8').includes(') Z') && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      await startSshd(host);
    },
    async jobProcesses(name) {
      const out: JobProcess[] = [];
      for (const pid of await namespacePids(state(name))) {
        let stat: string;
        let cmdline: string;
        try {
          stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
          cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
        } catch {
          continue;
        }
        const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        const procState = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
        if (comm === 'sshd' || procState === 'Z' || isControlShell(stat, cmdline)) continue;
        out.push({ pid, command: cmdline || `[${comm}]` });
      }
      return out;
    },
    async dockerRuns(name) {
      const runs = join(state(name).dir, 'fake-docker', 'runs');
      if (!existsSync(runs)) return [];
      const files = readdirSync(runs).sort((a, b) => Number(a) - Number(b));
      return files.map((f) => readFileSync(join(runs, f), 'utf8').split('\0').slice(0, -1));
    },
    async dockerReportsOomNext(name) {
      await mkdir(join(state(name).dir, 'fake-docker'), { recursive: true });
      await writeFile(join(state(name).dir, 'fake-docker', FAKE_DOCKER_OOM_NEXT), '');
    },
    async generateClientKey(fileName) {
      const path = join(root, fileName);
      await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path]);
      return path;
    },
    async authorizedClientKey(fileName, keyOptions) {
      const path = await api.generateClientKey(fileName);
      await appendFile(join(root, 'authorized_keys'), `${keyOptions} ${(await readFile(`${path}.pub`, 'utf8')).trim()}\n`);
      return path;
    },
    async destroy() {
      instance.destroySync();
    },
  };
  return api;
}

/**
 * The cgroups of the jobs of runs under `jobBaseDir` (job-cgroup-script.ts), left on this kernel by
 * tests that stop a job without releasing it: empty once the host's processes are killed.
 */
function removeJobCgroupsSync(jobBaseDir: string): void {
  let runs: string[];
  try {
    runs = readdirSync(jobBaseDir);
  } catch {
    return;
  }
  const prefixes = runs.map((run) => sshRunCgroupPrefix(runDirectory(jobBaseDir, run)));
  let mounts: string[];
  try {
    mounts = [join('/sys/fs/cgroup', CGROUP_PARENT), ...readdirSync('/sys/fs/cgroup').map((m) => join('/sys/fs/cgroup', m, CGROUP_PARENT))];
  } catch {
    return;
  }
  for (const parent of mounts) {
    let names: string[];
    try {
      names = readdirSync(parent);
    } catch {
      continue;
    }
    for (const name of names) {
      if (!prefixes.some((p) => name.startsWith(p))) continue;
      try {
        rmdirSync(join(parent, name));
      } catch {
        // not empty, or gone: a test's own check says what is left
      }
    }
  }
}

/**
 * Shell that mounts this machine's cgroup hierarchies at their usual places in a host's mount
 * namespace (the same hierarchies: jobs' limits on a host hold on this kernel). Best effort: a host
 * without them runs its jobs without limits, and their logs say so.
 */
function cgroupMountsScript(): string {
  const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n').map((l) => l.split(' ')).filter(([, mp, type]) => (type === 'cgroup' || type === 'cgroup2') && mp?.startsWith('/sys/fs/cgroup'));
  if (mounts.length === 0) return '';
  const q = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;
  const root = mounts.some(([, mp]) => mp === '/sys/fs/cgroup') ? '' : 'mount -t tmpfs -o mode=755 test-cgroup /sys/fs/cgroup 2>/dev/null; ';
  return `${root}${mounts.map(([, mp = '', type = '', opts = '']) => `{ mkdir -p ${q(mp)} && mount -t ${type} -o ${q(opts)} ${type} ${q(mp)}; } 2>/dev/null; `).join('')}`;
}

/**
 * A control shell of Troupe's connection (src/backends/ssh/control-shell.ts) or its job watcher
 * (job-watch.ts): a bash an exec request started, child of the session's sshd. Not a job's
 * process: each ends with its channel.
 */
function isControlShell(stat: string, cmdline: string): boolean {
  const controlShell = cmdline === CONTROL_SHELL_COMMAND.replace(/^exec /, '');
  const watcher = cmdline.startsWith('bash --noprofile --norc -c ') && cmdline.includes(WATCHER_READY_MARK);
  if (!controlShell && !watcher) return false;
  const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  try {
    const parentStat = readFileSync(`/proc/${parent}/stat`, 'utf8');
    return parentStat.slice(parentStat.indexOf('(') + 1, parentStat.lastIndexOf(')')) === 'sshd';
  } catch {
    return false;
  }
}

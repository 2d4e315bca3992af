import { createHash } from 'node:crypto';
import {
  CGROUP_PARENT,
  cgroupPlan,
  detectCgroups,
  DEFAULT_PIDS_MAX,
  inJobCgroup,
  JobLimitsSchema,
  noLimitsLine,
  type CgroupHierarchy,
  type JobLimits,
} from '../cgroup-limits';
import { quoteShellWord } from '../../runner/shell-quote';

/**
 * A job's cgroup on an SSH host: the same limits, hierarchy choice and files as on the local fleet
 * (cgroup-limits.ts), written on the host by the start script before the wrapper starts, so the
 * wrapper and all it starts (the commands, the job's SSH server and its sessions) are born in it.
 * Where the SSH user is root, under CGROUP_PARENT in each hierarchy; where it is not, under a
 * subtree an admin delegated to it once (`delegated` below), with no root at run time. Elsewhere
 * the job runs without limits and its log says why and how to delegate.
 */

export type SshCgroup =
  /** Made by the start script: `setup` lines make it, `procs` are the files the wrapper joins by, `leaves` its directories. */
  | { kind: 'cgroup'; setup: string[]; procs: string[]; leaves: string[] }
  /** No cgroup: `why` goes in the job's log, once. */
  | { kind: 'none'; why: string };

/** The worker's environment variable that names the delegated subtree on its SSH hosts, relative to each cgroup mount. */
export const CGROUP_PARENT_VARIABLE = 'TROUPE_SSH_CGROUP_PARENT';

/** A delegated subtree's path relative to a mount: plain names, no `.` or `..`, nothing a shell or the probe's lines would split. */
const RELATIVE_CGROUP = /^(?!.*(?:^|\/)\.{1,2}(?:\/|$))[A-Za-z0-9._@-]+(?:\/[A-Za-z0-9._@-]+)*$/;

/** The subtree the worker's environment names (CGROUP_PARENT_VARIABLE), null for the default; refuses a path that is not a plain relative one. */
export function cgroupParentFrom(env: Record<string, string | undefined>): string | null {
  const text = env[CGROUP_PARENT_VARIABLE];
  if (text === undefined || text === '') return null;
  const path = text.replace(/^\/+|\/+$/g, '');
  if (!RELATIVE_CGROUP.test(path)) throw new Error(`ssh fleets: ${CGROUP_PARENT_VARIABLE} must be a path relative to each cgroup mount (names of letters, digits, '.', '_', '@', '-'), not "${text}"`);
  return path;
}

/**
 * The default delegated subtree of user NAME (uid UID), relative to each mount: on cgroup v1
 * `troupe-NAME` in each of the memory, cpu, pids hierarchies; on v2 `troupe` in the user's
 * systemd manager (`user@UID.service`, which systemd delegates to the user).
 */
export function defaultDelegatedParent(version: 1 | 2, user: string, uid: string): string {
  return version === 1 ? `troupe-${user}` : `user.slice/user-${uid}.slice/user@${uid}.service/troupe`;
}

/**
 * What the probe prints: the SSH user's uid, the cgroup mounts, and each cgroup v2 mount's
 * controllers. For a user who is not root, also the subtree delegated to it in each mount
 * (`delegated MOUNT STATE PATH`: writable, not-writable or missing), on v2 the controllers it
 * may enable (`subtree MOUNT ...`) and whether the user may move its login's processes into it
 * (`containment MOUNT ok|no ANCESTOR`: the kernel asks for write access to the cgroup.procs of
 * the nearest cgroup above both). `parent`: the worker's choice of subtree, null for the default.
 */
export function cgroupProbeScript(parent: string | null): string {
  const q = quoteShellWord;
  const [v1, v2] = parent === null ? [defaultDelegatedParent(1, '$u', '$i'), defaultDelegatedParent(2, '$u', '$i')] : [q(parent), q(parent)];
  return [
    'echo "result cgroups $(id -u)"',
    'while read -r dev mp type opts rest; do',
    '  case $type in cgroup|cgroup2) echo "mount $dev $mp $type $opts" ;; esac',
    '  [ "$type" = cgroup2 ] && echo "controllers $mp $(cat "$mp/cgroup.controllers" 2>/dev/null)"',
    'done < /proc/self/mounts',
    '[ "$(id -u)" = 0 ] && exit 0',
    'u=$(id -un) i=$(id -u) login=',
    'echo "user $u"',
    'while IFS= read -r l; do [ "${l:0:3}" = 0:: ] && login=${l:3}; done < /proc/self/cgroup',
    'while read -r dev mp type opts rest; do',
    `  case $type in cgroup) p=${v1} ;; cgroup2) p=${v2} ;; *) continue ;; esac`,
    '  d=$mp/$p',
    '  if [ -d "$d" ] && [ -w "$d" ] && [ -w "$d/cgroup.procs" ]; then s=writable; elif [ -d "$d" ]; then s=not-writable; else s=missing; fi',
    '  echo "delegated $mp $s $p"',
    '  [ "$type" = cgroup2 ] || continue',
    '  echo "subtree $mp $(cat "$d/cgroup.controllers" 2>/dev/null)"',
    '  a=/$p',
    '  while [ -n "$a" ] && [ "$login" != "$a" ] && [ "${login#"$a"/}" = "$login" ]; do a=${a%/*}; done',
    '  if [ -w "$mp$a/cgroup.procs" ]; then echo "containment $mp ok ${a:-/}"; else echo "containment $mp no ${a:-/}"; fi',
    'done < /proc/self/mounts',
    'exit 0',
  ].join('\n');
}

/** How an admin delegates the subtree (the line a job's log ends with where there is none). */
function howToDelegate(h: Exclude<CgroupHierarchy, { version: null }>, user: string, parent: string): string {
  if (h.version === 2) {
    return `to delegate one, as root: mkdir ${h.root}/${parent} && chown ${user} ${h.root}/${parent} ${h.root}/${parent}/cgroup.procs ${h.root}/${parent}/cgroup.subtree_control, with memory, cpu, pids enabled above it and the user's SSH logins under a cgroup whose cgroup.procs it may write (README: Security)`;
  }
  return `to delegate one, as root, for c in memory cpu pids (and cpuacct): mkdir /sys/fs/cgroup/$c/${parent} && chown ${user} /sys/fs/cgroup/$c/${parent}{,/cgroup.procs,/tasks} (README: Security)`;
}

/**
 * For a user who is not root: the hierarchy with the subtree delegated to it (the probe's
 * `delegated` lines), or why there is none. On v1 the memory, cpu and pids mounts must each have
 * it, writable (cpuacct is used where it has it too); on v2 the tree's, writable, its parent
 * enabling memory, cpu and pids, and the login's processes allowed to move into it.
 */
function delegatedHierarchy(h: Exclude<CgroupHierarchy, { version: null }>, lines: string[], host: string, uid: string): CgroupHierarchy {
  const fields = (kind: string) => new Map(lines.filter((l) => l.startsWith(`${kind} `)).map((l) => {
    const [, mountPoint = '', ...rest] = l.split(' ');
    return [mountPoint, rest] as const;
  }));
  const delegated = fields('delegated');
  const user = /^user (\S+)$/m.exec(lines.join('\n'))?.[1] ?? `uid ${uid}`;
  const notRoot = `the SSH user of ${host} is not root (uid ${uid})`;
  const mounts = h.version === 2 ? [h.root] : [...new Set([h.memory, h.cpu, h.pids])];
  const parents = new Set(mounts.map((m) => delegated.get(m)?.[1] ?? ''));
  const [parent = ''] = parents;
  if (parents.size !== 1 || !RELATIVE_CGROUP.test(parent)) return { version: null, why: `${notRoot} and ${host} did not say where its delegated cgroup subtree is` };
  const how = howToDelegate(h, user, parent);
  for (const m of mounts) {
    const state = delegated.get(m)?.[0];
    if (state !== 'writable') return { version: null, why: `${notRoot} and has no cgroup subtree delegated to it: ${m}/${parent} ${state === 'not-writable' ? 'is not writable by it' : 'is missing'}; ${how}` };
  }
  if (h.version === 2) {
    const enabled = fields('subtree').get(h.root) ?? [];
    const lacking = ['memory', 'cpu', 'pids'].filter((c) => !enabled.includes(c));
    if (lacking.length > 0) return { version: null, why: `${notRoot} and its delegated cgroup ${h.root}/${parent} cannot enable ${lacking.join(', ')} (the cgroup above it does not); ${how}` };
    const [moves, ancestor = '/'] = fields('containment').get(h.root) ?? [];
    if (moves !== 'ok') return { version: null, why: `${notRoot} and cannot move its processes into ${h.root}/${parent}: its SSH login's cgroup and the subtree meet at ${ancestor}, whose cgroup.procs it may not write; ${how}` };
    return { ...h, delegated: parent };
  }
  const cpuacct = h.cpuacct && delegated.get(h.cpuacct)?.[0] === 'writable' ? h.cpuacct : null;
  return { ...h, cpuacct, delegated: parent };
}

/** The host's hierarchy for job limits, from the probe's output (detectCgroups, as on the local fleet); for a user who is not root, its delegated subtree. */
export function parseCgroupProbe(stdout: string, host: string): CgroupHierarchy {
  const lines = stdout.split('\n');
  const uid = /^result cgroups (\d+)$/m.exec(stdout)?.[1];
  if (uid === undefined) return { version: null, why: `${host} did not say which cgroups it has` };
  const mounts = lines.filter((l) => l.startsWith('mount ')).map((l) => l.slice('mount '.length)).join('\n');
  const controllers = new Map(lines.filter((l) => l.startsWith('controllers ')).map((l) => {
    const [, mountPoint = '', ...names] = l.split(' ');
    return [mountPoint, names.join(' ')] as const;
  }));
  const h = detectCgroups(mounts, (m) => controllers.get(m) ?? null, true);
  if (h.version === null) return { version: null, why: `${host}: ${h.why}` };
  return uid === '0' ? h : delegatedHierarchy(h, lines, host, uid);
}

/**
 * A job's cgroup name on its host: from its directory, which is unique per host and attempt; the
 * run's directory first, so a run's clean-up finds all of its jobs' by a prefix. Nothing in it comes from a job.
 */
export function sshCgroupName(runDir: string, jobDir: string): string {
  return `${sshRunCgroupPrefix(runDir)}${hash(jobDir, 16)}`;
}

export function sshRunCgroupPrefix(runDir: string): string {
  return `ssh-${hash(runDir, 10)}-`;
}

function hash(text: string, length: number): string {
  return createHash('sha256').update(text).digest('hex').slice(0, length);
}

/** The limits a job's instance carries (SshBackend.provision); absent (instances from before limits): the pids limit alone. */
export function limitsOfDetails(details: Record<string, string>): JobLimits {
  return details.limits ? JobLimitsSchema.parse(JSON.parse(details.limits)) : { memory_bytes: null, cpus: null, pids: DEFAULT_PIDS_MAX };
}

/** What the start script does for the job's cgroup: make it with its limits, or say why there is none. */
export function sshJobCgroup(h: CgroupHierarchy, name: string, limits: JobLimits): SshCgroup {
  if (h.version === null) return { kind: 'none', why: h.why };
  const plan = cgroupPlan(h, name, limits);
  const q = quoteShellWord;
  const setup = [
    'cg_fail=',
    `mkdir -p ${plan.dirs.map(q).join(' ')} 2>/dev/null || cg_fail=${q(`cannot make ${plan.dirs.at(-1) ?? name}`)}`,
    ...plan.writes.map(({ file, value, optional }) => {
      const absent = optional ? ` || [ ! -e ${q(file)} ]` : '';
      return `[ -n "$cg_fail" ] || { printf %s ${q(value)} > ${q(file)}; } 2>/dev/null${absent} || cg_fail=${q(`cannot set ${file} to ${value}`)}`;
    }),
  ];
  return { kind: 'cgroup', setup, procs: plan.procs, leaves: plan.procs.map((f) => f.slice(0, f.lastIndexOf('/'))) };
}

/**
 * Bash (run in the job's directory, before the wrapper starts) that makes the job's cgroup and
 * sets the array `cg_join` to the words that put the wrapper in it (inJobCgroup); where it cannot,
 * the job's log (`log`) gets the one line that says why, and the wrapper starts without it.
 */
export function cgroupStartLines(cgroup: SshCgroup, log: string): string[] {
  const q = quoteShellWord;
  if (cgroup.kind === 'none') return ['cg_join=()', `printf '%s\\n' ${q(noLimitsLine(cgroup.why).trimEnd())} >> ${log}`];
  return [
    ...cgroup.setup,
    'if [ -z "$cg_fail" ]; then',
    `  cg_join=(${inJobCgroup(cgroup.procs, []).map(q).join(' ')})`,
    'else',
    '  cg_join=()',
    `  rmdir ${cgroup.leaves.map(q).join(' ')} 2>/dev/null`,
    `  printf '%s%s on this host\\n' ${q(noLimitsLine('').slice(0, -1))} "$cg_fail" >> ${log}`,
    'fi',
  ];
}

/** Where a host's job cgroups may be, relative to each mount: CGROUP_PARENT, and the subtree delegated to the SSH user where it has one. */
export function sshCgroupParents(h: CgroupHierarchy): string[] {
  return h.version !== null && h.delegated !== undefined ? [CGROUP_PARENT, h.delegated] : [CGROUP_PARENT];
}

/**
 * Bash functions for the clean-up scripts: `remove_cgroups PATTERN PARENT...` kills whatever is
 * left in each cgroup under a PARENT whose name matches (in every cgroup mount of the host), then
 * removes it, printing `result survivors ...` and failing when some outlive SIGKILL for 10 s.
 */
export const REMOVE_CGROUPS = `
remove_cgroups() {
  local pattern=$1 dev mp type rest d p i left parent
  shift
  local -a dirs=()
  while read -r dev mp type rest; do
    case $type in cgroup|cgroup2) ;; *) continue ;; esac
    for parent in "$@"; do
      for d in "$mp/$parent"/$pattern; do [ -d "$d" ] && dirs+=("$d"); done
    done
  done < /proc/self/mounts
  for ((i = 0; i < 100 && \${#dirs[@]} > 0; i++)); do
    left=()
    for d in "\${dirs[@]}"; do
      [ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null
      while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$d/cgroup.procs" 2>/dev/null
      rmdir "$d" 2>/dev/null || { [ -d "$d" ] && left+=("$d"); }
    done
    dirs=("\${left[@]}")
    [ \${#dirs[@]} -gt 0 ] && sleep 0.1
  done
  if [ \${#dirs[@]} -gt 0 ]; then
    echo "result survivors $(cat "\${dirs[@]/%//cgroup.procs}" 2>/dev/null | tr '\\n' ' ')"
    return 1
  fi
}
`;

/** Bash that sets `oom` to the OOM kills the cgroup `name` counted (`oom_kill N`, in any mount of the host, under any of `parents`); empty when it is gone or counts none. */
export function oomKillsLines(name: string, parents: readonly string[] = [CGROUP_PARENT]): string {
  const files = parents.flatMap((parent) => ['memory.events', 'memory.oom_control'].map((f) => `"$mp"/${quoteShellWord(`${parent}/${name}`)}/${f}`)).join(' ');
  return [
    'oom=',
    'while read -r dev mp type rest; do',
    '  case $type in cgroup|cgroup2) ;; *) continue ;; esac',
    `  for f in ${files}; do`,
    '    [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && oom=$v; done < "$f"',
    '  done',
    'done < /proc/self/mounts',
  ].join('\n');
}

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
 * Only where the SSH user is root: the cgroup is a directory of cgroupfs the user must be able to
 * make and move a process into. Elsewhere the job runs without limits and its log says why.
 */

export type SshCgroup =
  /** Made by the start script: `setup` lines make it, `procs` are the files the wrapper joins by, `leaves` its directories. */
  | { kind: 'cgroup'; setup: string[]; procs: string[]; leaves: string[] }
  /** No cgroup: `why` goes in the job's log, once. */
  | { kind: 'none'; why: string };

/** What the probe prints: the SSH user's uid, the cgroup mounts, and each cgroup v2 mount's controllers. */
export const CGROUP_PROBE_SCRIPT = [
  'echo "result cgroups $(id -u)"',
  'while read -r dev mp type opts rest; do',
  '  case $type in cgroup|cgroup2) echo "mount $dev $mp $type $opts" ;; esac',
  '  [ "$type" = cgroup2 ] && echo "controllers $mp $(cat "$mp/cgroup.controllers" 2>/dev/null)"',
  'done < /proc/self/mounts',
  'exit 0',
].join('\n');

/** The host's hierarchy for job limits, from the probe's output (detectCgroups, as on the local fleet). */
export function parseCgroupProbe(stdout: string, host: string): CgroupHierarchy {
  const lines = stdout.split('\n');
  const uid = /^result cgroups (\d+)$/m.exec(stdout)?.[1];
  if (uid === undefined) return { version: null, why: `${host} did not say which cgroups it has` };
  if (uid !== '0') return { version: null, why: `the SSH user of ${host} is not root (uid ${uid}), and only root can make a job's cgroup there` };
  const mounts = lines.filter((l) => l.startsWith('mount ')).map((l) => l.slice('mount '.length)).join('\n');
  const controllers = new Map(lines.filter((l) => l.startsWith('controllers ')).map((l) => {
    const [, mountPoint = '', ...names] = l.split(' ');
    return [mountPoint, names.join(' ')] as const;
  }));
  const h = detectCgroups(mounts, (m) => controllers.get(m) ?? null, true);
  return h.version === null ? { version: null, why: `${host}: ${h.why}` } : h;
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

/**
 * Bash functions for the clean-up scripts: `remove_cgroups PATTERN` kills whatever is left in
 * each cgroup under CGROUP_PARENT whose name matches (in every cgroup mount of the host), then
 * removes it, printing `result survivors ...` and failing when some outlive SIGKILL for 10 s.
 */
export const REMOVE_CGROUPS = `
remove_cgroups() {
  local pattern=$1 dev mp type rest d p i left
  local -a dirs=()
  while read -r dev mp type rest; do
    case $type in cgroup|cgroup2) ;; *) continue ;; esac
    for d in "$mp"/${CGROUP_PARENT}/$pattern; do [ -d "$d" ] && dirs+=("$d"); done
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

/** Bash that sets `oom` to the OOM kills the cgroup `name` counted (`oom_kill N`, in any mount of the host); empty when it is gone or counts none. */
export function oomKillsLines(name: string): string {
  const files = ['memory.events', 'memory.oom_control'].map((f) => `"$mp"/${CGROUP_PARENT}/${quoteShellWord(name)}/${f}`).join(' ');
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

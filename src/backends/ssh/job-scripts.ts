import { SshLayout } from '../../runner/inter-node-ssh';
import { JobLayout as L } from '../../runner/job-layout';
import { quoteShellWord } from '../../runner/shell-quote';
import type { Confinement } from '../no-new-privs';
import { CGROUP_PARENT, type JobLimits } from '../cgroup-limits';
import { containerLimitFlags } from './container-limits';
import { cgroupStartLines, oomKillsLines, REMOVE_CGROUPS, type SshCgroup } from './job-cgroup-script';
import { noPrivilegesLogLines, privilegesWords } from './job-privileges-script';

/**
 * The bash scripts the SSH runner runs on a host, one round trip each. They follow the job
 * directory protocol of src/runner/job-wrapper.ts (the same one the local fleet uses): `started/`
 * is the start claim, made with mkdir; `started/pid` holds the wrapper's pid and start time;
 * `started/stopped` marks a stop that came before any start; `exit_code` is written when the
 * commands end. Every script prints one `result ...` line for the runner to read.
 */

/** Every process of a job inherits `TROUPE_INSTANCE_ID=<instance id>`: stop finds the ones that left its group. */
export const MARKER_NAME = 'TROUPE_INSTANCE_ID';
/** The instance id, beside the job's files, so a run's cleanup can find processes by marker. */
export const INSTANCE_FILE = 'instance_id';
/** `<runtime> <container name>` of a job run in an image. */
export const CONTAINER_FILE = 'container';
/** Made by the container launcher when the runtime says the kernel killed the container for its memory limit (`State.OOMKilled`). */
export const CONTAINER_OOM_FILE = 'container.oom';
/** The job's own commands when launch.sh is the container launcher. */
export const CONTAINER_COMMANDS_FILE = 'commands.sh';
/**
 * The version of the book in peers.json, written just before it (bash reads no JSON): what a later
 * writePeers compares its version with.
 */
export const PEERS_VERSION_FILE = 'peers.version';
/** Exit code recorded for a job whose wrapper died without writing one (SIGKILL). */
export const KILLED_EXIT_CODE = 128 + 9;
/** How long a start or stop waits for a claim taken a moment ago to show its pid. */
export const CLAIM_WAIT_SECONDS = 10;

const procHelpers = `
proc_info() {
  local s
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s=\${s##*) }
  set -f; set -- $s; set +f
  st=$1 pg=$3 sid=$4 t0=\${20}
}
alive() {
  proc_info "$1" || return 1
  [ "$st" != Z ] && [ "$t0" = "$2" ]
}
# The job's live processes: everything carrying the marker, plus the leader's process group and
# session while the leader lives or a marked process is still in its group (a pgid in use is never reused).
members() {
  local f p use_group=0
  local -a marked=()
  if [ -n "$marker" ]; then
    for f in $(grep -lzxF -- "$marker" /proc/[0-9]*/environ 2>/dev/null); do
      p=\${f#/proc/}; p=\${p%%/*}
      [ "$p" = "$$" ] && continue
      proc_info "$p" && [ "$st" != Z ] || continue
      marked+=("$p")
      [ -n "$leader" ] && [ "$pg" = "$leader" ] && use_group=1
    done
  fi
  [ -n "$leader" ] && alive "$leader" "$leader_t0" && use_group=1
  {
    [ "\${#marked[@]}" -gt 0 ] && printf '%s\\n' "\${marked[@]}"
    if [ "$use_group" = 1 ]; then
      for f in /proc/[0-9]*; do
        p=\${f#/proc/}
        [ "$p" = "$$" ] && continue
        proc_info "$p" && [ "$st" != Z ] || continue
        { [ "$pg" = "$leader" ] || [ "$sid" = "$leader" ]; } && printf '%s\\n' "$p"
      done
    fi
  } | sort -un
}
signal_members() {
  local p
  for p in $(members); do
    [ "$p" = "$leader" ] && kill -"$1" -- -"$p" 2>/dev/null
    kill -"$1" "$p" 2>/dev/null
  done
}
# SIGTERM, then SIGKILL after the grace period; the container (if any) is removed before SIGKILL.
stop_members() {
  local grace=$1 i left
  left=$(members)
  if [ -n "$left" ]; then
    signal_members TERM
    for ((i = 0; i < grace * 10; i++)); do
      sleep 0.1
      left=$(members)
      [ -z "$left" ] && break
    done
  fi
  if [ -s ${CONTAINER_FILE} ]; then
    read -r rt cname < ${CONTAINER_FILE}
    timeout 30 "$rt" rm -f "$cname" >/dev/null 2>&1
  fi
  for ((i = 0; i < 100 && \${#left} > 0; i++)); do
    signal_members KILL
    sleep 0.1
    left=$(members)
  done
  if [ -n "$left" ]; then
    echo "result survivors $(echo $left)"
    exit 0
  fi
}
`;

/**
 * A pause of `seconds` without a process: `read -t` on a pipe that never has data (fd 9, opened
 * at the first pause). `sleep` forks, and on a busy host each fork costs milliseconds.
 */
const nap = (seconds: number) => `{ [ -n "$napping" ] || { exec 9<> <(:); napping=1; }; read -t ${seconds} -u 9; }`;

/** Waits up to `seconds` for the start claim to show its pid (or a stop's mark), looking every 5 ms. */
function wait_for_claim(seconds: number): string {
  return `for ((i = 0; i < ${seconds * 200}; i++)); do { [ -s ${L.started}/${L.pid} ] || [ -e ${L.started}/${L.stopped} ]; } && break; ${nap(0.005)}; done`;
}

/** Step 1 of a start: stop here if the job is claimed already; else make its directory (and find the image runtime). */
export function prepareStartScript(jobDir: string, needsRuntime: boolean): string {
  return [
    `d=${quoteShellWord(jobDir)}`,
    `if [ -d "$d/${L.started}" ]; then echo "result claimed"; exit 0; fi`,
    'rt=',
    ...(needsRuntime
      ? [
          'if command -v docker >/dev/null 2>&1 && timeout 20 docker version --format "{{.Server.Version}}" >/dev/null 2>&1; then rt=docker',
          'elif command -v podman >/dev/null 2>&1 && timeout 20 podman version >/dev/null 2>&1; then rt=podman',
          'else echo "result no-runtime"; exit 0; fi',
        ]
      : []),
    // 0700: a run's directories are the SSH user's alone, whatever that user's umask.
    '(umask 077 && mkdir -p "$d") || exit 97',
    'echo "result ready $rt"',
  ].join('\n');
}

/** What the wrapper starts inside: its cgroup (job-cgroup-script.ts) and its walls (job-privileges-script.ts); each absent: nothing, and no line in the log. */
export interface WrapperWalls {
  cgroup?: SshCgroup | null;
  confinement?: Confinement | null;
}

/**
 * Step 3 of a start (after the files are in place): spawns the wrapper in a new session unless
 * the claim exists, then waits for whoever won the claim to record its pid. `setsid -f` rather
 * than `&`, because a background command of a non-interactive bash ignores SIGINT for good; a
 * setsid too old for `-f` (util-linux before 2.32) fails at once and the wrapper starts with `&`.
 */
export function spawnWrapperScript(jobDir: string, instanceId: string, { cgroup = null, confinement = null }: WrapperWalls = {}): string {
  const launch = `${MARKER_NAME}=${quoteShellWord(instanceId)} setsid`;
  // In the job's cgroup before the wrapper runs, then under its walls: all it starts is born in the one, under the other.
  const wrapper = `${cgroup ? '"${cg_join[@]}" ' : ''}${confinement ? privilegesWords(confinement) : ''}bash --noprofile --norc ${L.wrapper} </dev/null >>${L.wrapperLog} 2>&1`;
  return [
    `cd ${quoteShellWord(jobDir)} || exit 97`,
    `if [ ! -d ${L.started} ]; then`,
    ...(cgroup ? cgroupStartLines(cgroup, L.log).map((line) => `  ${line}`) : []),
    ...(confinement ? noPrivilegesLogLines(confinement, L.log).map((line) => `  ${line}`) : []),
    `  ${launch} -f ${wrapper} || { ${launch} ${wrapper} & }`,
    'fi',
    wait_for_claim(CLAIM_WAIT_SECONDS),
    // With inter-node SSH, the job is running once its server listens (its pid file), or has ended.
    `if [ -s ${L.started}/${L.pid} ] && [ -e ${SshLayout.dir}/${SshLayout.run} ]; then`,
    `  for ((i = 0; i < ${CLAIM_WAIT_SECONDS * 200}; i++)); do [ -s ${SshLayout.dir}/${SshLayout.state}/${SshLayout.pidFile} ] || [ -e ${SshLayout.dir}/${SshLayout.state}/${SshLayout.off} ] || [ -s ${L.exitCode} ] && break; ${nap(0.005)}; done`,
    'fi',
    `if [ -s ${L.started}/${L.pid} ]; then read -r pid t < ${L.started}/${L.pid}; echo "result started $pid"; exit 0; fi`,
    `if [ -e ${L.started}/${L.stopped} ]; then echo "result stopped"; exit 0; fi`,
    `echo "result timeout"; tail -c 2000 ${L.wrapperLog} 2>/dev/null`,
  ].join('\n');
}

/** A file for startJobScript(): written from stdin as `<name> <mode> <bytes>\n` followed by its bytes. */
export interface JobFileUpload {
  name: string;
  /** Octal, e.g. 0o600. */
  mode: number;
  content: Buffer;
}

/** stdin of startJobScript(): the files framed one after the other. */
export function frameUploads(files: readonly JobFileUpload[]): Buffer {
  return Buffer.concat(files.flatMap((f) => [Buffer.from(`${f.name} ${f.mode.toString(8)} ${f.content.length}\n`), f.content]));
}

/** Where startJobScript() puts a job's files before its directory is renamed into place (beside it). */
export const STAGE_PREFIX = '.stage.';

/**
 * A whole start in one round trip (one shell, so a heavy login .bashrc is paid once): unless the
 * start is claimed already, writes the files framed on stdin, then spawns the wrapper as
 * spawnWrapperScript() does. Only for jobs without an image (no runtime to detect).
 *
 * The files are read and written by bash builtins into a staging directory beside the job's
 * (`.stage.<job>.<nonce>`, 0700), which is then renamed to the job's directory: a few processes
 * per start (mkdir, chmod per mode other than 0600/0644, mv) instead of several per file, which
 * cost a busy host tens of milliseconds each. Where the job's directory exists already (an earlier
 * start that did not claim the job), each file is renamed over its old one instead, so a wrapper
 * already running keeps what it started with. A NUL byte cannot pass through a bash string: a
 * file holding one fails the start as a short upload.
 */
export function startJobScript(jobDir: string, instanceId: string, nonce: string, walls: WrapperWalls = {}): string {
  return [
    `d=${quoteShellWord(jobDir)}`,
    `stage="\${d%/*}/${STAGE_PREFIX}\${d##*/}.${nonce}"`,
    'if [ ! -d "$d/' + L.started + '" ]; then',
    '  names=() modes=() bodies=() dirs=("$stage")',
    '  bytes() { local LC_ALL=C; n=${#body}; }',
    '  while LC_ALL=C IFS=" " read -r name mode len; do',
    // A name is a file of the job's directory or of a folder in it (`ssh/bin/ssh`), never outside.
    '    case "$name" in ""|.*|*/.*|*//*|*/) break ;; esac',
    '    LC_ALL=C IFS= read -r -N "$len" body',
    '    bytes',
    '    [ "$n" = "$len" ] || { echo "short upload of $name" >&2; exit 96; }',
    '    case "$name" in */*) dirs+=("$stage/${name%/*}") ;; esac',
    '    names+=("$name") modes+=("$mode") bodies+=("$body")',
    '  done',
    '  umask 077',
    '  mkdir -p "${dirs[@]}" || exit 97',
    '  declare -A other=()',
    '  for i in "${!names[@]}"; do',
    '    case ${modes[i]} in 644) umask 022 ;; 600) umask 077 ;; *) umask 077; other[${modes[i]}]=1 ;; esac',
    '    printf %s "${bodies[i]}" > "$stage/${names[i]}" || exit 96',
    '  done',
    '  umask 022',
    '  for m in "${!other[@]}"; do',
    '    files=(); for i in "${!names[@]}"; do [ "${modes[i]}" = "$m" ] && files+=("$stage/${names[i]}"); done',
    '    chmod "$m" "${files[@]}" || exit 96',
    '  done',
    '  if ! mv -T "$stage" "$d" 2>/dev/null; then',
    '    if [ ! -d "$d/' + L.started + '" ]; then',
    '      for n in "${names[@]}"; do',
    '        case "$n" in */*) mkdir -p "$d/${n%/*}" || exit 97 ;; esac',
    '        mv -f "$stage/$n" "$d/$n" || exit 96',
    '      done',
    '    fi',
    '    rm -rf -- "$stage"',
    '  fi',
    'fi',
    spawnWrapperScript(jobDir, instanceId, walls),
  ].join('\n');
}

/**
 * `cgroup`: the job's cgroup name (under one of `cgroupParents`), whose OOM kills an exited job's
 * answer adds (`result exited PID CODE [OOM_KILLS]`); a job in a container counts one when its
 * runtime reported an OOM kill (CONTAINER_OOM_FILE).
 */
export function jobStateScript(jobDir: string, cgroup: string | null = null, cgroupParents: readonly string[] = [CGROUP_PARENT]): string {
  const oom = ' $oom';
  return [
    procHelpers,
    `cd ${quoteShellWord(jobDir)} 2>/dev/null && [ -d ${L.started} ] || { echo "result absent"; exit 0; }`,
    wait_for_claim(2),
    `[ -s ${L.started}/${L.pid} ] || { echo "result absent"; exit 0; }`,
    `read -r leader leader_t0 < ${L.started}/${L.pid}`,
    cgroup ? oomKillsLines(cgroup, cgroupParents) : 'oom=',
    // A job with an image: its container's OOM kill, as its runtime reported it (renderContainerLaunchScript).
    `[ -e ${CONTAINER_OOM_FILE} ] && oom=1`,
    `if [ -s ${L.exitCode} ]; then echo "result exited $leader $(< ${L.exitCode})${oom}"; exit 0; fi`,
    'if alive "$leader" "$leader_t0"; then echo "result running $leader"; exit 0; fi',
    // It may have written its code just after the first look.
    `if [ -s ${L.exitCode} ]; then echo "result exited $leader $(< ${L.exitCode})${oom}"; else echo "result exited $leader ${KILLED_EXIT_CODE}${oom}"; fi`,
  ].join('\n');
}

/** Claims the start (so a late start never runs), else stops the job's processes. */
export function stopJobScript(jobDir: string, instanceId: string, graceSeconds: number): string {
  return [
    procHelpers,
    `marker=${quoteShellWord(`${MARKER_NAME}=${instanceId}`)}`,
    `mkdir -p ${quoteShellWord(jobDir)} && cd ${quoteShellWord(jobDir)} || exit 97`,
    `if mkdir ${L.started} 2>/dev/null; then`,
    `  date -u +%FT%TZ > ${L.started}/${L.stopped}.tmp && mv -f ${L.started}/${L.stopped}.tmp ${L.started}/${L.stopped}`,
    '  echo "result stopped-before-start"; exit 0',
    'fi',
    wait_for_claim(CLAIM_WAIT_SECONDS),
    'leader= leader_t0=',
    `[ -s ${L.started}/${L.pid} ] && read -r leader leader_t0 < ${L.started}/${L.pid}`,
    `if [ -z "$leader" ] && [ -e ${L.started}/${L.stopped} ]; then echo "result already-stopped"; exit 0; fi`,
    `stop_members ${Math.max(0, Math.ceil(graceSeconds))}`,
    `if [ -n "$leader" ] && [ ! -s ${L.exitCode} ]; then echo ${KILLED_EXIT_CODE} > ${L.exitCode}.tmp && mv -f ${L.exitCode}.tmp ${L.exitCode}; fi`,
    'echo "result stopped"',
  ].join('\n');
}

/** How long a released run's logs stay on a host before a later clean-up on that host removes them. */
export const LOG_RETENTION_DAYS = 7;

/**
 * Kills whatever still runs from the run's jobs (no grace: teardown already asked nicely), then
 * removes every file of the run but each job's `log` and `exit_code` (so `troupe logs` still works
 * after the run: env files with secrets, scripts and hostfiles go) and marks the run released.
 * Runs released more than `retentionDays` ago on this host, with nothing newer in them, are removed.
 *
 * `jobDirs`: only these jobs of the run are this host's. Hosts that share a home directory (an NFS
 * home) share the run's directory too: each then touches its own jobs alone, and a path that
 * another host removed meanwhile counts as removed (no error), so no host fails for another's work.
 */
export function cleanupRunScript(
  runDir: string,
  retentionDays = LOG_RETENTION_DAYS,
  jobDirs: readonly string[] | null = null,
  cgroups: readonly string[] = [],
  cgroupParents: readonly string[] = [CGROUP_PARENT],
): string {
  const base = runDir.replace(/\/[^/]+$/, '') || '/';
  const kept = `! -name ${L.log} ! -name ${L.exitCode}`;
  return [
    procHelpers,
    REMOVE_CGROUPS,
    `r=${quoteShellWord(runDir)}`,
    `base=${quoteShellWord(base)}`,
    'if [ -d "$r" ]; then',
    jobDirs === null ? '  jobs=("$r"/*/*/)' : `  jobs=(${jobDirs.map(quoteShellWord).join(' ')})`,
    `  for job in "\${jobs[@]}"; do`,
    killLeftovers('"$job"'),
    '  done | grep "^result survivors" && exit 0',
    ...removeCgroupLines(cgroups, cgroupParents),
    `  for job in "\${jobs[@]}"; do`,
    '    j=${job%/}',
    '    [ -d "$j" ] || continue',
    `    find "$j" -mindepth 1 -maxdepth 1 ${kept} -exec rm -rf -- {} + 2>/dev/null`,
    // What is left is checked, not find's status: an entry gone under it (another host's) is not a failure.
    `    left=$(find "$j" -mindepth 1 -maxdepth 1 ${kept} -print -quit 2>/dev/null)`,
    '    [ -z "$left" ] || { echo "cannot remove $left" >&2; exit 1; }',
    // A start killed while it wrote its files leaves its staging directory (startJobScript).
    `    rm -rf -- "\${j%/*}/${STAGE_PREFIX}\${j##*/}."* 2>/dev/null`,
    '  done',
    ...(jobDirs === null ? [`  rm -rf -- "$r"/*/${STAGE_PREFIX}* 2>/dev/null`] : []),
    '  touch "$r/.released" 2>/dev/null || [ ! -d "$r" ] || exit 1',
    'fi',
    `find "$base" -mindepth 2 -maxdepth 2 -name .released -mmin +${Math.max(0, Math.round(retentionDays * 1440))} 2>/dev/null | while IFS= read -r old; do`,
    '  d=${old%/.released}',
    '  [ -z "$(find "$d" -type f -newer "$old" -print -quit 2>/dev/null)" ] && rm -rf -- "$d" 2>/dev/null',
    'done',
    'echo "result clean"',
  ].join('\n');
}

/** Removes the jobs' cgroups (names, or patterns whose `*` the host matches: REMOVE_CGROUPS) under `parents`, what is left in them killed; survivors end the script. */
function removeCgroupLines(cgroups: readonly string[], parents: readonly string[]): string[] {
  const under = parents.map(quoteShellWord).join(' ');
  return cgroups.map((pattern) => `  remove_cgroups ${quoteShellWord(pattern)} ${under} || exit 0`);
}

/**
 * A subshell that kills whatever still runs of the job in directory `dir` (a shell word): its
 * marked processes and its leader's group, no grace (a stop asked nicely before).
 */
function killLeftovers(dir: string): string {
  return [
    `    ( cd ${dir} 2>/dev/null || exit 0`,
    `      marker= leader= leader_t0=`,
    `      [ -s ${INSTANCE_FILE} ] && marker="${MARKER_NAME}=$(< ${INSTANCE_FILE})"`,
    `      [ -s ${L.started}/${L.pid} ] && read -r leader leader_t0 < ${L.started}/${L.pid}`,
    '      stop_members 0 )',
  ].join('\n');
}

/**
 * One job attempt's clean-up (its machine given back, the rest of the run going on): kills what
 * is left of it, then removes its files but `log`, `exit_code` and the start claim (`started/`:
 * a late start still finds the job claimed), so its inter-node SSH server and keys, env file and
 * scripts go. Idempotent.
 */
export function cleanupJobScript(jobDir: string, cgroup: string | null = null, cgroupParents: readonly string[] = [CGROUP_PARENT]): string {
  return [
    procHelpers,
    REMOVE_CGROUPS,
    `j=${quoteShellWord(jobDir)}`,
    'if [ -d "$j" ]; then',
    killLeftovers('"$j"') + ' | grep "^result survivors" && exit 0',
    ...removeCgroupLines(cgroup ? [cgroup] : [], cgroupParents),
    `  find "$j" -mindepth 1 -maxdepth 1 ! -name ${L.log} ! -name ${L.exitCode} ! -name ${L.started} -exec rm -rf -- {} + || exit 1`,
    'fi',
    'echo "result clean"',
  ].join('\n');
}

/**
 * Replaces the job's peers.json with the book on stdin (a temporary file renamed over it), unless
 * the job's directory is gone or released (no instance id file: before its start, or after a clean-up)
 * or it holds a later version. Writers of one job take turns (flock, where the host has it).
 */
export function writePeersScript(jobDir: string, version: number, nonce: string): string {
  const v = Math.trunc(version);
  return [
    `cd ${quoteShellWord(jobDir)} 2>/dev/null && [ -s ${INSTANCE_FILE} ] || { echo "result gone"; exit 0; }`,
    'exec 9>>.peers.lock || exit 97',
    'if command -v flock >/dev/null 2>&1; then flock -w 30 9 || exit 97; fi',
    `cur=$(cat ${PEERS_VERSION_FILE} 2>/dev/null)`,
    `if [[ "$cur" =~ ^[0-9]+$ ]] && (( cur > ${v} )); then echo "result older $cur"; exit 0; fi`,
    `cat > .${L.peers}.${nonce} && chmod 644 .${L.peers}.${nonce} || exit 96`,
    // The version first: a book whose rename never happened is written again by a retry of the same version.
    `echo ${v} > .${PEERS_VERSION_FILE}.${nonce} && mv -f .${PEERS_VERSION_FILE}.${nonce} ${PEERS_VERSION_FILE} || exit 96`,
    `mv -f .${L.peers}.${nonce} ${L.peers} || exit 96`,
    'echo "result written"',
  ].join('\n');
}

export interface ContainerLaunchInput {
  jobDir: string;
  image: string;
  runtime: 'docker' | 'podman';
  containerName: string;
  /** The job's limits (its instance's: the cgroup path's rule, cgroup-limits.ts jobLimits), set by the runtime on the container. */
  limits: JobLimits;
  /** /dev/shm of the container in bytes (`resources.shm_size`); null: the runtime's default. */
  shmBytes: number | null;
}

/**
 * launch.sh for a job with `image:`: runs commands.sh (the job's own launch script) in the image,
 * with the host's network, the host's GPUs when it has any, the job directory mounted at the
 * same path (so DSTACK_MPI_HOSTFILE holds inside too), and the job's limits set by the runtime
 * (container-limits.ts). The wrapper's SIGTERM reaches the container through the client's signal
 * proxy; `--init` forwards it to the commands.
 *
 * No `--rm`: once the client returns, this script reads the container's `State.OOMKilled` and
 * only then removes it. With `--rm` the state is gone as the container ends, racing the inspect;
 * `--cidfile` plus `docker events` would need a second process listening for the whole run and a
 * daemon's event stream podman lacks without its service. The cost: a launcher killed outright
 * leaves a stopped container behind, which the stop and clean-up scripts remove by the name in
 * CONTAINER_FILE (stop_members) as they did before. The script ignores SIGTERM itself (the
 * wrapper's, sent to the whole group) so that it outlives the container to do this.
 */
export function renderContainerLaunchScript(input: ContainerLaunchInput): string {
  const dir = quoteShellWord(input.jobDir);
  const name = quoteShellWord(input.containerName);
  const rt = input.runtime;
  const gpu =
    input.runtime === 'docker' ? 'gpu=(--gpus all)' : 'gpu=(--device nvidia.com/gpu=all)';
  const limits = containerLimitFlags(input.limits, input.shmBytes).map(quoteShellWord).join(' ');
  return [
    '#!/usr/bin/env bash',
    `# Generated by Troupe: runs ${CONTAINER_COMMANDS_FILE} in image ${JSON.stringify(input.image)} (${input.runtime}).`,
    `dir=${dir}`,
    'gpu=()',
    `if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ${gpu}`,
    'elif [ -e /dev/kfd ]; then gpu=(--device /dev/kfd --device /dev/dri --group-add video); fi',
    `printf '%s %s\\n' ${rt} ${name} > "$dir/${CONTAINER_FILE}"`,
    `rm -f "$dir/${CONTAINER_OOM_FILE}"`,
    'trap : TERM INT HUP',
    `${rt} run --init --name ${name} --network host "\${gpu[@]}" ${limits} \\`,
    `  -e ${MARKER_NAME} -v "$dir:$dir" -w "$dir/${L.workDir}" --entrypoint bash ${quoteShellWord(input.image)} \\`,
    `  --noprofile --norc -c '. "$1/${L.env}" && exec bash "$1/${CONTAINER_COMMANDS_FILE}"' troupe "$dir"`,
    'code=$?',
    // Before the wrapper writes the exit code (it waits for this script): jobStateScript then finds the file.
    `[ "$(timeout 30 ${rt} inspect --format '{{.State.OOMKilled}}' ${name} 2>/dev/null)" = true ] && : > "$dir/${CONTAINER_OOM_FILE}"`,
    `timeout 30 ${rt} rm -f ${name} >/dev/null 2>&1`,
    'exit "$code"',
    '',
  ].join('\n');
}

/** The `result ...` line of a script's output, split into words. */
export function resultOf(stdout: string): string[] | null {
  const line = stdout.split('\n').find((l) => l.startsWith('result '));
  return line ? line.trim().split(/\s+/).slice(1) : null;
}

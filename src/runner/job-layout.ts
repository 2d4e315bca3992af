/**
 * Names of the files in a job's directory on its node. Backends, the wrapper script and tests
 * share them, so a job directory reads the same whichever backend wrote it.
 */
export const JobLayout = {
  /** `export NAME='value'` lines (renderEnvFile). */
  env: 'job.env',
  /** The MPI hostfile (DSTACK_MPI_HOSTFILE). */
  hostfile: 'hostfile',
  /** The job's commands (renderLaunchScript). */
  launchScript: 'launch.sh',
  /** Claims the start, runs launch.sh, records pid and exit code (renderJobWrapper). */
  wrapper: 'wrapper.sh',
  /** Isolated jobs (local fleet as root): sets up the job's namespaces, then runs launch.sh as the run's user (renderIsolatedLaunch). */
  isolatedLaunch: 'isolate.sh',
  /** Default working directory of the commands. */
  workDir: 'work',
  /** An isolated job's /etc/hosts (src/runner/node-hosts.ts), bound over the machine's in its mount namespace. */
  hosts: 'hosts',
  /** An isolated job's /etc/resolv.conf on a node of its own network (no name server: nothing beyond the run is reachable). */
  resolvConf: 'resolv.conf',
  /** stdout and stderr of the commands. */
  log: 'log',
  /** Errors of the wrapper itself (before the commands run). */
  wrapperLog: 'wrapper.log',
  /**
   * The start claim: a directory made with mkdir (atomic). It holds `pid` when a wrapper won it,
   * `stopped` when a stop came first (then the commands never run).
   */
  started: 'started',
  pid: 'pid',
  stopped: 'stopped',
  /** Isolated jobs: `pid starttime` of the job's pid-namespace init, which probes enter (in `started/`). */
  nsInit: 'ns_init',
  /** The run's live address book (TROUPE_PEERS_FILE), replaced atomically on every change. */
  peers: 'peers.json',
  /** Exit code of the commands, written when they end. */
  exitCode: 'exit_code',
} as const;

/**
 * The directory name of one attempt of a job, from the job's own (already safe) path component:
 * attempt 0 (or absent) keeps the job's name, so first machines read as before; attempt k > 0 is
 * `<job>.attempt-<k>`, a sibling with its own files and log (a replaced node's log stays readable).
 */
export function attemptDirectoryName(jobSegment: string, attempt: number | undefined): string {
  return attempt ? `${jobSegment}.attempt-${attempt}` : jobSegment;
}

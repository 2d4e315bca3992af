/** The SSH layer of the SSH fleet backend: verified connections, host detection, the runner over SSH. */
export { connectSsh, closeAllSshSessions, type ConnectOptions } from './connect';
export { SshSession, MAX_SESSION_CHANNELS, type CommandResult, type ExecOptions } from './session';
export { HostKeyTrust, type HostKeyTrustOptions, type HostKeyTrustSource, type VerifiedHostKey } from './host-key-trust';
export { fingerprintOf, normalizeFingerprint } from './host-key';
export { findKnownHostEntries, formatKnownHostsLine, knownHostsName } from './known-hosts';
export { SshTargetSchema, describeTarget, type SshTarget } from './target';
export { DEFAULT_SSH_TIMEOUTS, resolveTimeouts, type SshTimeouts } from './timeouts';
export {
  SshError,
  SshHostKeyUnknownError,
  SshHostKeyChangedError,
  SshHostKeyRevokedError,
  SshKeyFileError,
  SshAuthenticationError,
  SshConnectionRefusedError,
  SshHostUnreachableError,
  SshTimeoutError,
  SshConnectionLostError,
  SshCommandError,
  isHostUnreachable,
} from './errors';
export { detectHost, defaultJobBaseDir, gpuCount, HostFactsSchema, type HostFacts, type HostAddress, type DetectOptions } from './detect';
export { normalizeGpuName, type GpuFacts } from './gpu-tools';
export { pickInternalIp, InternalIpError, type InternalIpConfig } from './internal-ip';
export {
  SshRunner,
  NoContainerRuntimeError,
  JobStopFailedError,
  EXEC_TIMED_OUT_EXIT_CODE,
  type SshRunnerOptions,
  type StartJobOptions,
} from './ssh-runner';

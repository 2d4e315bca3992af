/** The Troupe client SDK: submit runs, read their state and logs, stop them, from your own code. */
export { TroupeClient } from './troupe-client';
export type { ConnectDataConverter, ListOptions, RunSummary, SubmitRequest, TroupeClientOptions } from './troupe-client';
export { troupeDataConverter, failureConverterPath } from '../codec/data-converter';
export { loadCodecKeyring, codecKeyFile, CodecKeyError } from '../codec/codec-keys';
export { RunHandle } from './run-handle';
export { DEFAULT_WORKER_METRICS_URL, workerMetricsUrls } from './run-usage';
export type { RunMetrics, RunMetricsOptions } from './run-usage';
export type { GpuUsage, JobKey, JobSeries, UsagePoint } from '../backends/job-usage';
export type { JobLogChunk, ReadLogOptions, StreamLogsOptions, WatchOptions } from './run-handle';
export {
  InvalidConfigError,
  InvalidRunNameError,
  JobNotFoundError,
  NoBackendError,
  NoWorkerError,
  RunNameInUseError,
  RunNotFoundError,
  RunUnreachableError,
  TroupeClientError,
  isRunUnavailable,
} from './errors';
export type { ConfigLocation, RunUnavailableError, TaskQueueLocation } from './errors';
export { TroupeSearchAttributes } from './search-attributes';
export type { RunMemo } from './run-memo';
export type { LogChunk } from '../backends/backend';
export type { Plan } from '../plan/plan-schema';
export type { RunOptionsInput } from '../contract/messages';
export { isFinished, JOBS_PAGE_MAX } from '../contract/run-state';
export { runJobsQuery, runStateQuery, scaleGroupUpdate, applyServiceUpdate, rolloutControlUpdate } from '../contract/messages';
export type { ApplyServiceResult, RolloutAction, RolloutControlResult, ScaleGroupResult } from '../contract/messages';
export { withAllJobs } from './run-jobs';
export { serviceSummary } from './service-replicas';
export type { ReplicaGroupSummary, ServiceSummary } from './service-replicas';
export type { JobState, JobStatus, RolloutStatus, RunState, RunStatus } from '../contract/run-state';
export type { JobAttempt } from '../contract/run-state-schema';

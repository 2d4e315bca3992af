import { backendNameProblem, defaultBackendFor } from '../backends/backend-names';
import { decodeConfigFile, readConfigBytes } from '../config/config-file';
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  type ConnectionOptions,
  type WorkflowExecutionInfo,
} from '@temporalio/client';
import { ConfigError, loadPlan, PlanSchema, type Plan } from '../plan';
import { sealSecrets } from './seal-plan';
import { RUN_NAME } from '../plan/run-name';
import { DEFAULT_TASK_QUEUE, runNameFromWorkflowId, runWorkflowId } from '../contract/ids';
import { RunOptionsSchema, type RunInput, type RunOptionsInput } from '../contract/message-schemas';
import type { RunState, RunStatus } from '../contract/run-state';
import { RunStatusSchema } from '../contract/run-state-schema';
import { InvalidConfigError, InvalidRunNameError, RunNameInUseError, TroupeClientError } from './errors';
import { RunHandle, rootCauseMessage, type RunContext, type RunWorkflowFn } from './run-handle';
import { readRunMemo, runMemo, runSummaryLine } from './run-memo';
import { serviceSummary, type ServiceSummary } from './service-replicas';
import {
  initialRunSearchAttributes,
  troupeSearchAttributesRegistered,
  TroupeSearchAttributes,
} from './search-attributes';
import { assertWorkersPolling } from './worker-presence';
import type { DataConverter } from '@temporalio/common';
import { troupeDataConverter } from '../codec/data-converter';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';
import { inSpan } from '../tracing/tracing';

export interface TroupeClientOptions {
  /** Task queue the Troupe workers poll. Default `troupe`. */
  taskQueue?: string;
  /** Default: the Temporal client's namespace. */
  namespace?: string;
  /** The service's address, only to name it in error messages. */
  address?: string;
  /** How long a run's state query may take. Default 10 s. */
  queryTimeoutMs?: number;
}

export interface ConnectDataConverter {
  /**
   * Default: troupeDataConverter(), the payload codec with the key file TROUPE_CODEC_KEY_FILE
   * (the workers' key). A client built around your own `Client` must pass that converter to it.
   */
  dataConverter?: DataConverter;
}

export interface SubmitRequest {
  /** The task config as YAML text… */
  yaml?: string;
  /** …or a path to it (also names the file in error messages when `yaml` is given)… */
  file?: string;
  /** …or a plan already made by `loadPlan`. */
  plan?: Plan;
  /** Run name; overrides the config's `name`. */
  runName?: string;
  /** Backend in the workers' registry. Default `ssh` when the run names fleets, else `local`. */
  backend?: string;
  /** Fleets the run may use; overrides the config's `fleets`. */
  fleets?: string[];
  /** Per-run overrides: retry events/duration, runner and address deadlines, … */
  options?: RunOptionsInput;
  /** Where bare `env` KEYs take their values. Default process.env. */
  environ?: Record<string, string | undefined>;
  /** Refuse to start when no worker polls the task queue. Default true. */
  checkWorkers?: boolean;
}

export interface ListOptions {
  /** Finished runs too, not only the active ones. */
  all?: boolean;
  /** At most this many runs, newest first. Default 100. */
  limit?: number;
}

/** One run as `list` sees it. Times are ISO strings, so the summary is plain JSON. */
export interface RunSummary {
  name: string;
  workflowId: string;
  /** Temporal's run id of this execution (a run name may be reused once its run has ended). */
  runId: string;
  /** The workflow is still open in Temporal. */
  open: boolean;
  status: RunStatus;
  backend: string | null;
  /** Each group's size now; `nodes_range`: the bounds `troupe scale` may resize it within (null: fixed). */
  groups: Array<{ name: string; nodes: number; nodes_range?: { min: number; max: number } | null }>;
  fleet: string | null;
  startTime: string;
  closeTime: string | null;
  /** The whole state (per-job rows), or null when it could not be read… */
  state: RunState | null;
  /** …and then why. */
  stateError: string | null;
  /** A service's deployment, endpoints and replicas READY per group (from `state`); null for a task or without a state. */
  service?: ServiceSummary | null;
}

const LIST_CONCURRENCY = 8;

/**
 * Troupe runs through a Temporal client the caller already holds. Submitting checks the config
 * and the workers first, so a mistake is an error here, not a run stuck in SUBMITTED.
 */
export class TroupeClient {
  readonly taskQueue: string;
  readonly namespace: string;
  readonly address: string | null;
  private readonly ctx: RunContext;
  private searchAttributes: Promise<boolean> | null = null;
  private ownedConnection: Connection | null = null;

  constructor(
    readonly temporal: Client,
    options: TroupeClientOptions = {},
  ) {
    this.taskQueue = options.taskQueue ?? DEFAULT_TASK_QUEUE;
    this.namespace = options.namespace ?? temporal.options.namespace;
    this.address = options.address ?? null;
    this.ctx = {
      client: temporal,
      taskQueue: this.taskQueue,
      namespace: this.namespace,
      address: this.address,
      queryTimeoutMs: options.queryTimeoutMs ?? 10_000,
    };
  }

  /** Connects to Temporal and returns a client that owns the connection (close it with `close()`). */
  static async connect(options: ConnectionOptions & TroupeClientOptions & ConnectDataConverter = {}): Promise<TroupeClient> {
    const { taskQueue, namespace, queryTimeoutMs, dataConverter, ...connectionOptions } = options;
    // Before connecting: a bad key file is the user's to fix, not an unreachable service.
    const converter = dataConverter ?? troupeDataConverter();
    const connection = await Connection.connect(connectionOptions);
    // Carries the caller's trace into the run's workflows (a no-op unless tracing is on: startTracing).
    const interceptors = { workflow: [new OpenTelemetryWorkflowClientInterceptor()] };
    const temporal = new Client({ connection, namespace: namespace ?? 'default', dataConverter: converter, interceptors });
    const troupe = new TroupeClient(temporal, {
      address: connectionOptions.address ?? '127.0.0.1:7233',
      ...(taskQueue !== undefined ? { taskQueue } : {}),
      ...(queryTimeoutMs !== undefined ? { queryTimeoutMs } : {}),
    });
    troupe.ownedConnection = connection;
    return troupe;
  }

  /** Closes the connection if `connect` opened it; a caller's own client is left alone. */
  async close(): Promise<void> {
    await this.ownedConnection?.close();
  }

  /**
   * Throws NoWorkerError unless a worker polls the task queue for workflows and activities; with
   * `backend`, NoBackendError when every worker names its backends and none names that one.
   */
  async checkWorkers(purpose = 'start a run', backend?: string): Promise<void> {
    await assertWorkersPolling(this.temporal, this.ctx, purpose, undefined, backend);
  }

  /** Validates the config, checks for a worker, and starts the run. */
  async submit(request: SubmitRequest): Promise<RunHandle> {
    const plan = sealSecrets(await planOf(request));
    if (request.fleets) plan.fleets = request.fleets;
    const backend = request.backend ?? defaultBackendFor(plan);
    const backendProblem = backendNameProblem(backend);
    if (backendProblem) throw new TroupeClientError(`backend: ${backendProblem}`);
    const options = parseRunOptions(request.options ?? {});
    if (request.checkWorkers ?? true) await this.checkWorkers(`start run ${plan.run_name}`, backend);
    const withAttributes = await this.searchAttributesRegistered();
    const input: RunInput = { plan, backend, options, search_attributes: withAttributes };
    const workflowId = runWorkflowId(plan.run_name);
    try {
      // The root of the run's trace when tracing is on (startTracing); the client interceptor carries it on.
      const attributes = { 'troupe.run': plan.run_name, 'troupe.backend': backend, 'troupe.groups': plan.groups.length, 'troupe.nodes': plan.nodes_num };
      await inSpan(`SubmitRun ${plan.run_name}`, attributes, () => this.temporal.workflow.start<RunWorkflowFn>('RunWorkflow', {
        taskQueue: this.taskQueue,
        workflowId,
        args: [input],
        memo: { ...runMemo(plan, backend) },
        staticSummary: runSummaryLine(plan, backend),
        ...(withAttributes
          ? {
              typedSearchAttributes: initialRunSearchAttributes({
                runName: plan.run_name,
                groups: plan.groups.map((g) => g.name),
                fleet: plan.fleets?.[0] ?? backend,
              }),
            }
          : {}),
      }));
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        throw new RunNameInUseError(plan.run_name, workflowId, { cause: err });
      }
      throw err;
    }
    return this.run(plan.run_name);
  }

  /** A handle on the latest run of that name; it is not looked up until used, but must be a run name. */
  run(name: string): RunHandle {
    if (!RUN_NAME.test(name)) throw new InvalidRunNameError(name);
    return new RunHandle(this.ctx, name);
  }

  /** Runs through Temporal visibility, newest first: the active ones, or with `all` the finished ones too. */
  async list(options: ListOptions = {}): Promise<RunSummary[]> {
    const limit = options.limit ?? 100;
    const query = options.all
      ? `WorkflowType = "RunWorkflow" AND ExecutionStatus != "ContinuedAsNew"`
      : `WorkflowType = "RunWorkflow" AND ExecutionStatus = "Running"`;
    const infos: WorkflowExecutionInfo[] = [];
    for await (const info of this.temporal.workflow.list({ query, pageSize: Math.min(limit, 100) })) {
      if (runNameFromWorkflowId(info.workflowId) === null) continue;
      infos.push(info);
      if (infos.length >= limit) break;
    }
    return await mapConcurrently(infos, LIST_CONCURRENCY, (info) => this.summarize(info));
  }

  private async summarize(info: WorkflowExecutionInfo): Promise<RunSummary> {
    const name = runNameFromWorkflowId(info.workflowId) ?? info.workflowId;
    const open = info.status.name === 'RUNNING';
    const handle = new RunHandle(this.ctx, name, info.runId);
    let state: RunState | null = null;
    let stateError: string | null = null;
    try {
      state = open ? await handle.state() : await handle.closedState(info);
    } catch (err) {
      stateError = rootCauseMessage(err);
    }
    const memo = readRunMemo(info.memo);
    return {
      name,
      workflowId: info.workflowId,
      runId: info.runId,
      open,
      status: state?.status ?? statusWithoutState(info),
      backend: state?.backend ?? memo?.backend ?? null,
      groups: state?.groups.map((g) => ({ name: g.name, nodes: g.nodes, nodes_range: g.nodes_range })) ?? memo?.groups ?? [],
      fleet: info.typedSearchAttributes.get(TroupeSearchAttributes.fleet) ?? memo?.fleets?.[0] ?? null,
      startTime: info.startTime.toISOString(),
      closeTime: info.closeTime?.toISOString() ?? null,
      state,
      stateError,
      service: state ? serviceSummary(state) : null,
    };
  }

  private searchAttributesRegistered(): Promise<boolean> {
    this.searchAttributes ??= troupeSearchAttributesRegistered(this.temporal, this.namespace);
    return this.searchAttributes;
  }
}

async function planOf(request: SubmitRequest): Promise<Plan> {
  if (request.plan) {
    const parsed = PlanSchema.safeParse(request.plan);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const path = issue ? issue.path.join('.') : '';
      throw new InvalidConfigError(`<plan>: ${path}: ${issue?.message ?? 'invalid plan'}`, {
        file: '<plan>',
        line: null,
        col: null,
        path,
      });
    }
    return request.runName ? renamePlan(parsed.data, request.runName) : parsed.data;
  }
  const file = request.file ?? '<yaml>';
  let bytes: Buffer | null = null;
  if (request.yaml === undefined) {
    if (request.file === undefined) throw new TroupeClientError('submit needs one of `yaml`, `file` or `plan`');
    try {
      bytes = readConfigBytes(request.file);
    } catch (err) {
      if (err instanceof ConfigError) {
        throw new InvalidConfigError(err.message, { file: err.file, line: err.line, col: err.col, path: err.path }, { cause: err });
      }
      throw new TroupeClientError(`cannot read ${request.file}: ${rootCauseMessage(err)}`, { cause: err });
    }
  }
  try {
    const text = request.yaml ?? decodeConfigFile(bytes ?? new Uint8Array(), file);
    return loadPlan(text, file, {
      environ: request.environ ?? process.env,
      ...(request.runName !== undefined ? { runName: request.runName } : {}),
    });
  } catch (err) {
    if (err instanceof ConfigError) {
      throw new InvalidConfigError(err.message, { file: err.file, line: err.line, col: err.col, path: err.path }, { cause: err });
    }
    throw err;
  }
}

/** The plan under another run name; job names carry the run's name as their prefix. */
function renamePlan(plan: Plan, runName: string): Plan {
  if (!RUN_NAME.test(runName)) {
    throw new InvalidConfigError(`<plan>: (run name): run name "${runName}" must match ${RUN_NAME.source}`, {
      file: '<plan>',
      line: null,
      col: null,
      path: '(run name)',
    });
  }
  const prefix = `${plan.run_name}-`;
  return {
    ...plan,
    run_name: runName,
    jobs: plan.jobs.map((job) =>
      job.job_name.startsWith(prefix) ? { ...job, job_name: `${runName}-${job.job_name.slice(prefix.length)}` } : job,
    ),
  };
}

function parseRunOptions(options: RunOptionsInput): RunInput['options'] {
  const parsed = RunOptionsSchema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const path = issue ? issue.path.join('.') : '';
  throw new InvalidConfigError(`run options: ${path}: ${issue?.message ?? 'invalid'}`, {
    file: '<options>',
    line: null,
    col: null,
    path,
  });
}

/** Troupe status of a run whose state could not be read: its search attribute, else Temporal's status. */
function statusWithoutState(info: WorkflowExecutionInfo): RunStatus {
  const fromAttribute = RunStatusSchema.safeParse(info.typedSearchAttributes.get(TroupeSearchAttributes.runStatus));
  if (fromAttribute.success) return fromAttribute.data;
  switch (info.status.name) {
    case 'RUNNING':
      return 'SUBMITTED';
    case 'COMPLETED':
      return 'DONE';
    case 'FAILED':
    case 'TIMED_OUT':
      return 'FAILED';
    default:
      return 'TERMINATED';
  }
}

async function mapConcurrently<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i] as T);
    }
  });
  await Promise.all(workers);
  return results;
}

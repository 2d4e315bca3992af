/**
 * Errors a caller of the client SDK can act on. Each says what was wrong and what to do; the CLI
 * prints their messages as they are.
 */

export class TroupeClientError extends Error {
  override readonly name: string = 'TroupeClientError';
}

/** Where in a config (or a plan, or run options) the problem is. line/col are 1-based; null when not from a file. */
export interface ConfigLocation {
  file: string;
  line: number | null;
  col: number | null;
  /** Field path, e.g. `groups[1].resources.gpu`. */
  path: string;
}

/** The task config (or plan, or run options) is invalid; nothing was started. */
export class InvalidConfigError extends TroupeClientError {
  override readonly name = 'InvalidConfigError';
  readonly file: string;
  readonly line: number | null;
  readonly col: number | null;
  readonly path: string;
  constructor(message: string, location: ConfigLocation, options?: { cause?: unknown }) {
    super(message, options);
    this.file = location.file;
    this.line = location.line;
    this.col = location.col;
    this.path = location.path;
  }
}

/** A run of that name is still active (its workflow id is taken). */
export class RunNameInUseError extends TroupeClientError {
  override readonly name = 'RunNameInUseError';
  constructor(
    readonly runName: string,
    readonly workflowId: string,
    options?: { cause?: unknown },
  ) {
    super(
      `a run named "${runName}" is still active (workflow ${workflowId}); ` +
        `stop it with \`troupe stop ${runName}\` or choose another name`,
      options,
    );
  }
}

export interface TaskQueueLocation {
  taskQueue: string;
  namespace: string;
  /** The Temporal service's address, when the caller knows it (for the message only). */
  address: string | null;
}

/** No worker polls the task queue: a started run would wait for one forever. */
export class NoWorkerError extends TroupeClientError {
  override readonly name = 'NoWorkerError';
  readonly taskQueue: string;
  readonly namespace: string;
  readonly address: string | null;
  constructor(
    where: TaskQueueLocation,
    /** Which kinds of pollers are missing. */
    readonly missing: ReadonlyArray<'workflow' | 'activity'>,
    /** What could not be done, e.g. "submit the run". */
    purpose: string,
  ) {
    const at = where.address ? ` at ${where.address}` : '';
    super(
      `no Troupe worker polls task queue "${where.taskQueue}" (namespace "${where.namespace}"${at}; ` +
        `missing ${missing.join(' and ')} pollers), so Troupe cannot ${purpose}. ` +
        `Start one with \`troupe worker\` (same address, namespace and task queue).`,
    );
    this.taskQueue = where.taskQueue;
    this.namespace = where.namespace;
    this.address = where.address;
  }
}

/** Workers poll the task queue, but none drives the backend the run asks for (e.g. `local` where workers have SSH fleets only). */
export class NoBackendError extends TroupeClientError {
  override readonly name = 'NoBackendError';
  constructor(
    where: TaskQueueLocation,
    readonly backend: string,
    /** The backends the workers name. */
    readonly offered: readonly string[],
    purpose: string,
  ) {
    super(
      `no Troupe worker on task queue "${where.taskQueue}" drives backend "${backend}" (they drive: ${offered.join(', ') || 'none'}), so Troupe cannot ${purpose}. ` +
        (backend === 'local' ? 'Give the run a fleet (--fleet NAME, or fleets: in the task), or start a worker with the local fleet.' : `Start a worker with --backend ${backend}.`),
    );
  }
}

/**
 * The run did not answer in time although a worker polls its task queue: the worker may be busy,
 * restarting, or gone (the server lists a dead worker's pollers for a few minutes). Transient.
 */
export class RunUnreachableError extends TroupeClientError {
  override readonly name = 'RunUnreachableError';
  constructor(
    readonly runName: string,
    what: string,
    options?: { cause?: unknown },
  ) {
    super(`run ${runName} did not answer: ${what}; is its worker busy, restarting or gone?`, options);
  }
}

/** The run's state or logs cannot be read right now, but may be soon (a worker comes back). */
export type RunUnavailableError = NoWorkerError | RunUnreachableError;

export function isRunUnavailable(err: unknown): err is RunUnavailableError {
  return err instanceof NoWorkerError || err instanceof RunUnreachableError;
}

/** No run of that name exists in the namespace. */
export class RunNotFoundError extends TroupeClientError {
  override readonly name = 'RunNotFoundError';
  constructor(
    readonly runName: string,
    namespace: string,
    options?: { cause?: unknown },
  ) {
    super(`no run named "${runName}" in namespace "${namespace}" (see \`troupe ps -a\`)`, options);
  }
}

/** What was given is not a run name at all (a workflow id such as `run/x/group/y`, a typo). */
export class InvalidRunNameError extends TroupeClientError {
  override readonly name = 'InvalidRunNameError';
  constructor(readonly runName: string) {
    super(
      `${JSON.stringify(runName)} is not a run name: a run name is lowercase letters, digits and -, starting with a letter (^[a-z][a-z0-9-]{1,40}$), as \`troupe ps -a\` lists them`,
    );
  }
}

/** The run has no such job (job numbers are global ranks 0..N-1). */
export class JobNotFoundError extends TroupeClientError {
  override readonly name = 'JobNotFoundError';
  constructor(
    readonly runName: string,
    readonly jobNum: number,
    jobsNum: number,
  ) {
    super(
      jobsNum > 0
        ? `run "${runName}" has no job ${jobNum} (its jobs are 0..${jobsNum - 1})`
        : `run "${runName}" has no jobs known to Troupe (it ended before it recorded any)`,
    );
  }
}

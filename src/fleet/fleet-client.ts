import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
  type WorkflowHandle,
} from '@temporalio/client';
import { ApplicationFailure, TemporalFailure } from '@temporalio/common';
import { NoCapacityError, SubmissionClosedError } from '../backends/backend';
import { Slots } from '../concurrency/slots';
import { FailureType } from '../run-core/failure-table';
import { fleetWorkflowId } from '../contract/ids';
import {
  allocateHostsUpdate,
  applyFleetUpdate,
  closeSubmissionUpdate,
  deleteFleetUpdate,
  fleetStateQuery,
  releaseHostsUpdate,
  releaseJobHostUpdate,
  type AllocateRequest,
  type AllocatedHost,
  type FleetInput,
  type FleetSpec,
  type FleetState,
  type HeldHost,
  type JobHostRelease,
  type ReleaseRequest,
  type SubmissionRef,
} from '../contract/fleet-messages';

export const FLEET_WORKFLOW_TYPE = 'FleetWorkflow';
const FLEET_ID_PREFIX = fleetWorkflowId('');

/** A fleet update or query failed for a reason the caller can show (the fleet said no). */
export class FleetError extends Error {
  override readonly name = 'FleetError';
}

/** No running fleet of that name (never applied, or deleted). */
export class FleetNotFoundError extends FleetError {
  constructor(readonly fleet: string) {
    super(`fleet ${fleet} does not exist: create it with \`troupe fleet apply -f fleet.yml\``);
  }
}

export interface FleetListing {
  name: string;
  /** Null when the state could not be read; then `stateError` says why. */
  state: FleetState | null;
  stateError: string | null;
}

export interface FleetClientOptions {
  /** Task queue of the Troupe workers (fleet workflows run there). */
  taskQueue: string;
  /** How long a state query may take. Default 10 s. */
  queryTimeoutMs?: number;
  /** A fleet this client creates hands over (continues as new) past this many history events (FleetInput); tests and recordings. */
  continueAsNewAfterEvents?: number;
}

function innermost(err: unknown): Error | null {
  let current: unknown = err;
  let last: Error | null = null;
  while (current instanceof Error) {
    last = current;
    current = current instanceof TemporalFailure || current instanceof WorkflowUpdateFailedError ? current.cause : undefined;
  }
  return last;
}

function isNotFound(err: unknown): boolean {
  if (err instanceof WorkflowNotFoundError) return true;
  // Updates to a workflow that has just completed are refused with this message.
  return err instanceof Error && /workflow execution already completed|not found/i.test(err.message);
}

/**
 * Fleets through a Temporal client: one long-lived FleetWorkflow per fleet (id `fleet/<name>`),
 * changed only by Updates. The CLI and the SSH backend both use it.
 */
/**
 * Updates in flight per fleet workflow from this process. Temporal refuses more than 10 at once
 * per workflow (`history.maxInFlightUpdates`, RESOURCE_EXHAUSTED): at 64 hosts the groups of one
 * run taking and giving back hosts together went past it and spent seconds in retries.
 */
const UPDATES_IN_FLIGHT = 6;
const updateSlots = new Map<string, Slots>();

function slotsOf(workflowId: string): Slots {
  let slots = updateSlots.get(workflowId);
  if (!slots) {
    slots = new Slots(UPDATES_IN_FLIGHT);
    updateSlots.set(workflowId, slots);
  }
  return slots;
}

export class FleetClient {
  readonly taskQueue: string;
  private readonly queryTimeoutMs: number;
  private readonly continueAsNewAfterEvents: number | undefined;

  constructor(
    readonly temporal: Client,
    options: FleetClientOptions,
  ) {
    this.taskQueue = options.taskQueue;
    this.queryTimeoutMs = options.queryTimeoutMs ?? 10_000;
    this.continueAsNewAfterEvents = options.continueAsNewAfterEvents;
  }

  private handle(name: string): WorkflowHandle {
    return this.temporal.workflow.getHandle(fleetWorkflowId(name));
  }

  /**
   * Creates the fleet if it does not run yet, applies the spec (every host probed again) and
   * returns the state once every host has answered or been found unreachable.
   */
  async apply(spec: FleetSpec): Promise<FleetState> {
    const input: FleetInput = { spec, ...(this.continueAsNewAfterEvents === undefined ? {} : { continue_as_new_after_events: this.continueAsNewAfterEvents }) };
    const start = new WithStartWorkflowOperation(FLEET_WORKFLOW_TYPE, {
      workflowId: fleetWorkflowId(spec.name),
      taskQueue: this.taskQueue,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    try {
      return await this.temporal.workflow.executeUpdateWithStart(applyFleetUpdate, { args: [spec], startWorkflowOperation: start });
    } catch (err) {
      throw this.refusal(err, `apply fleet ${spec.name}`);
    }
  }

  /** The fleet's state, or null when no fleet of that name runs. */
  async state(name: string): Promise<FleetState | null> {
    const handle = this.handle(name);
    try {
      const description = await handle.describe();
      if (description.status.name !== 'RUNNING') return null;
      return await this.temporal.withDeadline(Date.now() + this.queryTimeoutMs, () => handle.query(fleetStateQuery));
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  /** Names of the running fleets on this task queue, sorted. */
  async names(): Promise<string[]> {
    const queue = this.taskQueue.replaceAll("'", "\\'");
    const names: string[] = [];
    const query = `WorkflowType = '${FLEET_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND TaskQueue = '${queue}'`;
    for await (const info of this.temporal.workflow.list({ query })) {
      if (info.workflowId.startsWith(FLEET_ID_PREFIX)) names.push(info.workflowId.slice(FLEET_ID_PREFIX.length));
    }
    return [...new Set(names)].sort();
  }

  /** Every running fleet with its state. */
  async list(): Promise<FleetListing[]> {
    const names = await this.names();
    return await Promise.all(
      names.map(async (name): Promise<FleetListing> => {
        try {
          const state = await this.state(name);
          return state ? { name, state, stateError: null } : { name, state: null, stateError: 'deleted meanwhile' };
        } catch (err) {
          return { name, state: null, stateError: err instanceof Error ? err.message : String(err) };
        }
      }),
    );
  }

  /** Takes hosts for the request's jobs (idempotent per job); NoCapacityError or SubmissionClosedError when refused. */
  async allocate(name: string, request: AllocateRequest): Promise<AllocatedHost[]> {
    try {
      return await slotsOf(fleetWorkflowId(name)).with(() => this.handle(name).executeUpdate(allocateHostsUpdate, { args: [request] }));
    } catch (err) {
      if (isNotFound(err)) {
        throw new NoCapacityError(`${new FleetNotFoundError(name).message} (run ${request.run_name}, group ${request.group_name})`);
      }
      throw this.refusal(err, `take hosts of fleet ${name}`);
    }
  }

  /** Refuses later allocations for the submission; returns the hosts it holds (null: no such fleet). */
  async closeSubmission(name: string, ref: SubmissionRef): Promise<HeldHost[] | null> {
    try {
      return await slotsOf(fleetWorkflowId(name)).with(() => this.handle(name).executeUpdate(closeSubmissionUpdate, { args: [ref] }));
    } catch (err) {
      if (isNotFound(err)) return null;
      throw this.refusal(err, `close run ${ref.run_id} in fleet ${name}`);
    }
  }

  /** Frees the submission's hosts (null: no such fleet). */
  async release(name: string, request: ReleaseRequest): Promise<number | null> {
    try {
      return await slotsOf(fleetWorkflowId(name)).with(() => this.handle(name).executeUpdate(releaseHostsUpdate, { args: [request] }));
    } catch (err) {
      if (isNotFound(err)) return null;
      throw this.refusal(err, `release hosts of fleet ${name}`);
    }
  }

  /** Frees the host of one job attempt, the rest of its submission untouched (null: no such fleet). */
  async releaseJobHost(name: string, request: JobHostRelease): Promise<number | null> {
    try {
      return await slotsOf(fleetWorkflowId(name)).with(() => this.handle(name).executeUpdate(releaseJobHostUpdate, { args: [request] }));
    } catch (err) {
      if (isNotFound(err)) return null;
      throw this.refusal(err, `release the host of ${request.run_id}/job ${request.job_num} in fleet ${name}`);
    }
  }

  /**
   * Deletes the fleet: refused while runs hold hosts unless `force`; with `force` the fleet waits
   * (a while) for those runs to give their hosts back — stop them first. Resolves once it ended.
   */
  async delete(name: string, { force }: { force: boolean }): Promise<void> {
    const handle = this.handle(name);
    try {
      await handle.executeUpdate(deleteFleetUpdate, { args: [{ force }] });
      await handle.result();
    } catch (err) {
      if (isNotFound(err)) throw new FleetNotFoundError(name);
      throw this.refusal(err, `delete fleet ${name}`);
    }
  }

  /** Maps an update's failure to the backend's errors, or to a FleetError with the fleet's own words. */
  private refusal(err: unknown, what: string): Error {
    if (!(err instanceof WorkflowUpdateFailedError)) return err instanceof Error ? err : new Error(String(err));
    const cause = innermost(err);
    const message = cause?.message ?? err.message;
    if (cause instanceof ApplicationFailure && cause.type === FailureType.NoCapacity) return new NoCapacityError(message);
    if (cause instanceof ApplicationFailure && cause.type === FailureType.SubmissionClosed) return new SubmissionClosedError(message);
    return new FleetError(`cannot ${what}: ${message}`);
  }
}

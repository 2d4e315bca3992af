import type { Client, WorkflowHandle } from '@temporalio/client';
import { optionalTsToMs } from '@temporalio/common/lib/time';

/** What one workflow's history costs, and its events with their times, read back from the server. */

type History = Awaited<ReturnType<WorkflowHandle['fetchHistory']>>;
type HistoryEvent = NonNullable<History['events']>[number];

export interface TimedEvent {
  /** The event type in camelCase, e.g. `activityTaskCompleted`, `workflowExecutionSignaled`. */
  kind: string;
  /** Activity type, signal name or child workflow type, where the event has one. */
  name: string | null;
  timeMs: number;
}

export interface WorkflowCost {
  workflowId: string;
  events: number;
  /** History size in bytes as the server counts it (what its 10 MB warning and 50 MB limit apply to). */
  bytes: number;
  workflowTasks: number;
  activities: number;
  signalsIn: number;
  signalsOut: number;
  /** Workflow tasks that failed or timed out, and the first failure's message. */
  workflowTaskFailures: number;
  firstWorkflowTaskFailure: string | null;
  /** Why the server (or someone) terminated the workflow, if it did. */
  terminatedReason: string | null;
  /** Events per `kind[:name]`. */
  eventCounts: Record<string, number>;
  /** Payload bytes (inputs, results, signal arguments) per `kind[:name]`. */
  payloadBytes: Record<string, number>;
  timeline: TimedEvent[];
}

function attributesOf(event: HistoryEvent): { kind: string; attrs: Record<string, unknown> } {
  for (const [key, value] of Object.entries(event as Record<string, unknown>)) {
    if (key.endsWith('EventAttributes') && value !== null && typeof value === 'object') {
      return { kind: key.slice(0, -'EventAttributes'.length), attrs: value as Record<string, unknown> };
    }
  }
  return { kind: 'unknown', attrs: {} };
}

function field(obj: unknown, ...path: string[]): unknown {
  let current = obj;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[key];
  }
  return current;
}

/** The activity type a local activity's marker records (`core_local_activity`), or null for other markers. */
function localActivityType(attrs: Record<string, unknown>): string | null {
  if (field(attrs, 'markerName') !== 'core_local_activity') return null;
  const payloads = field(attrs, 'details', 'data', 'payloads');
  const data = Array.isArray(payloads) ? field(payloads[0], 'data') : undefined;
  if (!(data instanceof Uint8Array)) return '?';
  try {
    const marker = JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type?: unknown };
    return typeof marker.activity_type === 'string' ? marker.activity_type : '?';
  } catch {
    return '?';
  }
}

/** Bytes of every payload's `data` inside an event's attributes. */
function payloadBytes(value: unknown, depth = 0): number {
  if (depth > 8 || value === null || typeof value !== 'object') return 0;
  if (value instanceof Uint8Array) return 0;
  let total = 0;
  for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
    if (key === 'data' && inner instanceof Uint8Array) total += inner.byteLength;
    else total += payloadBytes(inner, depth + 1);
  }
  return total;
}

/** `runId`: one execution of a workflow that continued as new (absent: its latest). */
export async function workflowCost(client: Client, workflowId: string, runId?: string): Promise<WorkflowCost> {
  const handle = client.workflow.getHandle(workflowId, runId);
  const [history, description] = await Promise.all([handle.fetchHistory(), handle.describe()]);
  const events = history.events ?? [];
  const activityNames = new Map<string, string>();
  const cost: WorkflowCost = {
    workflowId,
    events: events.length,
    bytes: description.historySize ?? 0,
    workflowTasks: 0,
    activities: 0,
    signalsIn: 0,
    signalsOut: 0,
    workflowTaskFailures: 0,
    firstWorkflowTaskFailure: null,
    terminatedReason: null,
    eventCounts: {},
    payloadBytes: {},
    timeline: [],
  };
  for (const event of events) {
    const { kind, attrs } = attributesOf(event);
    let name: string | null = null;
    if (kind === 'activityTaskScheduled') {
      name = String(field(attrs, 'activityType', 'name') ?? '?');
      activityNames.set(String(event.eventId), name);
      cost.activities += 1;
    } else if (kind.startsWith('activityTask')) {
      name = activityNames.get(String(field(attrs, 'scheduledEventId'))) ?? null;
    } else if (kind === 'markerRecorded') {
      // A local activity's result: its type as the name (`markerRecorded:provisionJobs` in the counts).
      name = localActivityType(attrs);
    } else if (kind === 'workflowExecutionSignaled' || kind === 'signalExternalWorkflowExecutionInitiated') {
      name = String(field(attrs, 'signalName') ?? '?');
    } else if (kind === 'startChildWorkflowExecutionInitiated' || kind === 'childWorkflowExecutionStarted') {
      name = String(field(attrs, 'workflowType', 'name') ?? '?');
    }
    if (kind === 'workflowTaskCompleted') cost.workflowTasks += 1;
    if (kind === 'workflowTaskFailed' || kind === 'workflowTaskTimedOut') {
      cost.workflowTaskFailures += 1;
      // A timeout's type says which: 1 start-to-close (the worker was too slow), 2 schedule-to-start (a sticky queue nobody polled in time).
      const why =
        kind === 'workflowTaskTimedOut'
          ? `${kind} (timeout type ${String(field(attrs, 'timeoutType'))})`
          : `${kind} (cause ${String(field(attrs, 'cause'))}): ${String(field(attrs, 'failure', 'message') ?? '')}`;
      cost.firstWorkflowTaskFailure ??= why;
    }
    if (kind === 'workflowExecutionTerminated') cost.terminatedReason = String(field(attrs, 'reason') ?? '');
    if (kind === 'workflowExecutionSignaled') cost.signalsIn += 1;
    if (kind === 'signalExternalWorkflowExecutionInitiated') cost.signalsOut += 1;
    const key = name ? `${kind}:${name}` : kind;
    cost.eventCounts[key] = (cost.eventCounts[key] ?? 0) + 1;
    const bytes = payloadBytes(attrs);
    if (bytes > 0) cost.payloadBytes[key] = (cost.payloadBytes[key] ?? 0) + bytes;
    cost.timeline.push({ kind, name, timeMs: optionalTsToMs(event.eventTime) ?? Number.NaN });
  }
  return cost;
}

/** Time of the last event of `kind` (and `name`), or NaN. */
export function lastEvent(cost: WorkflowCost, kind: string, name: string | null = null): number {
  const times = cost.timeline.filter((e) => e.kind === kind && (name === null || e.name === name)).map((e) => e.timeMs);
  return times.length > 0 ? Math.max(...times) : Number.NaN;
}

export function firstEvent(cost: WorkflowCost, kind: string, name: string | null = null): number {
  const times = cost.timeline.filter((e) => e.kind === kind && (name === null || e.name === name)).map((e) => e.timeMs);
  return times.length > 0 ? Math.min(...times) : Number.NaN;
}

/** Time of the last event of `kind` with one of `names`, over the workflows that have one, or NaN. */
export function lastEventOf(costs: WorkflowCost[], kind: string, ...names: string[]): number {
  const times = costs.flatMap((c) => names.map((name) => lastEvent(c, kind, name))).filter((t) => !Number.isNaN(t));
  return times.length > 0 ? Math.max(...times) : Number.NaN;
}

/** A workflow timer (`sleep` in workflow code): its duration and when it started and fired. */
export interface TimerSpan {
  durationMs: number;
  startedMs: number;
  /** NaN when it has not fired (cancelled, or still pending). */
  firedMs: number;
}

/** Every timer of a workflow's history, in the order they were started. */
export async function timersOf(client: Client, workflowId: string): Promise<TimerSpan[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const timers = new Map<string, TimerSpan>();
  for (const event of history.events ?? []) {
    const started = event.timerStartedEventAttributes;
    if (started) {
      timers.set(String(event.eventId), {
        durationMs: optionalTsToMs(started.startToFireTimeout) ?? Number.NaN,
        startedMs: optionalTsToMs(event.eventTime) ?? Number.NaN,
        firedMs: Number.NaN,
      });
    }
    const fired = event.timerFiredEventAttributes;
    const timer = fired ? timers.get(String(fired.startedEventId)) : undefined;
    if (timer) timer.firedMs = optionalTsToMs(event.eventTime) ?? Number.NaN;
  }
  return [...timers.values()];
}

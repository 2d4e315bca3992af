import type { Client } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { UnencryptedPayloadError } from '../codec/payload-codec';
import { SEAL_CLOCK_SKEW_MS, type RunExecution, type SealFacts, type SealFactsOf } from './seal-binding';

/**
 * Temporal's answers for decideSealOpening (seal-binding.ts), read with the worker's client: when
 * the run's first execution started, which earlier executions of its workflow id carry the
 * submission's nonce in what a client gave them (start input, signals, updates; decoded with the
 * client's own codec), and the namespace's retention. Only what the service records is read:
 * nothing a client names or creates decides.
 */

/** How long to wait for visibility to list the run itself (then the executions before it are listed too). */
const LISTED_WITHIN_MS = 10_000;
const LISTED_POLL_MS = 250;

/** A namespace's retention, read once per process. */
const retentions = new Map<string, Promise<number>>();

function retentionOf(client: Client, namespace: string): Promise<number> {
  let known = retentions.get(namespace);
  if (!known) {
    known = client.workflowService.describeNamespace({ namespace }).then((answer) => {
      const ttl = answer.config?.workflowExecutionRetentionTtl;
      return (Number(ttl?.seconds ?? 0) + (ttl?.nanos ?? 0) / 1e9) * 1000;
    });
    known.catch(() => retentions.delete(namespace));
    retentions.set(namespace, known);
  }
  return known;
}

/** A visibility string literal: the workflow id quoted, its quotes and backslashes escaped. */
function quoted(text: string): string {
  return `"${text.replace(/["\\]/g, (c) => `\\${c}`)}"`;
}

async function startMsOf(client: Client, run: RunExecution): Promise<number> {
  const first = await client.workflow.getHandle(run.workflowId, run.firstRunId).describe();
  return first.startTime.getTime();
}

interface Listed {
  runId: string;
  startMs: number;
  closeMs: number | null;
}

/** The workflow id's executions started up to the run's first execution, once it is among them (then so are those before it). */
async function listedUpTo(client: Client, run: RunExecution, runStartMs: number): Promise<Listed[]> {
  // A millisecond more: the service keeps start times finer than the ISO text.
  const query = `WorkflowId = ${quoted(run.workflowId)} AND StartTime <= "${new Date(runStartMs + 1).toISOString()}"`;
  const deadline = Date.now() + LISTED_WITHIN_MS;
  for (;;) {
    const listed: Listed[] = [];
    for await (const info of client.workflow.list({ query })) {
      listed.push({ runId: info.runId, startMs: info.startTime.getTime(), closeMs: info.closeTime?.getTime() ?? null });
    }
    if (listed.some((e) => e.runId === run.firstRunId)) return listed;
    // Not a SecretKeyError: the activity is retried, the run is not refused for a slow index.
    if (Date.now() > deadline) throw new Error(`Temporal's visibility does not list execution ${run.firstRunId} of ${run.workflowId} after ${LISTED_WITHIN_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, LISTED_POLL_MS));
  }
}

/** What a client gave an execution: its start input, signals' and updates' arguments. */
function clientPayloads(event: temporal.api.history.v1.IHistoryEvent): Payload[] {
  const given = [
    event.workflowExecutionStartedEventAttributes?.input,
    event.workflowExecutionSignaledEventAttributes?.input,
    event.workflowExecutionUpdateAdmittedEventAttributes?.request?.input?.args,
    event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args,
  ];
  return given.flatMap((p) => (p?.payloads ?? []) as Payload[]);
}

/**
 * Whether a payload carries `nonce`: decoded with the client's codecs, or read as it is when it was
 * sent in clear (a client without the codec key can still send a copied value). One that does not
 * decode (another key, altered) counts as carrying it: nothing can be said of it, and refusing is
 * the safe side.
 */
async function payloadCarries(client: Client, payload: Payload, nonce: string): Promise<boolean> {
  const converter = client.options.loadedDataConverter;
  let decoded = [payload];
  try {
    for (const codec of [...converter.payloadCodecs].reverse()) decoded = await codec.decode(decoded);
  } catch (err) {
    if (err instanceof UnencryptedPayloadError) return Buffer.from(payload.data ?? new Uint8Array()).toString('utf8').includes(nonce);
    return true;
  }
  const [plain] = decoded;
  return plain !== undefined && JSON.stringify(converter.payloadConverter.fromPayload(plain)).includes(nonce);
}

/** Whether an execution's history carries `nonce` in what a client gave it. */
async function historyCarries(client: Client, workflowId: string, runId: string, nonce: string): Promise<boolean> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  for (const payload of (history.events ?? []).flatMap(clientPayloads)) if (await payloadCarries(client, payload, nonce)) return true;
  return false;
}

export function temporalSealFacts(client: Client): SealFactsOf {
  return async (run, { nonce, sealedAtMs }): Promise<SealFacts> => {
    const [retentionMs, runStartMs] = await Promise.all([retentionOf(client, client.options.namespace), startMsOf(client, run)]);
    const listed = await listedUpTo(client, run, runStartMs);
    // Its continue-as-new successors start after it: what started before it is another run, and
    // one that closed before the sealing never had the nonce.
    const earlier = listed.filter((e) => e.runId !== run.firstRunId && e.startMs < runStartMs && (e.closeMs ?? Infinity) >= sealedAtMs - SEAL_CLOCK_SKEW_MS);
    const carrying: string[] = [];
    for (const e of earlier) if (await historyCarries(client, run.workflowId, e.runId, nonce)) carrying.push(e.runId);
    return { runStartMs, earlierCarrying: carrying, retentionMs };
  };
}

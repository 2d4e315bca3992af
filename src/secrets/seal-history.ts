import type { Client } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import { SEAL_CLOCK_SKEW_MS, type RunExecution, type SealFacts, type SealFactsOf } from './seal-binding';

/**
 * Temporal's answers for decideSealOpening (seal-binding.ts), read with the worker's client: when
 * the run's first execution started, which earlier executions of its workflow id carry the
 * submission's nonce in their input (decoded with the client's own codec), and the namespace's
 * retention. Only what the service records is read: nothing a client names or creates decides.
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

/** The workflow id's executions started since `sinceMs`, once the run's first execution is among them. */
async function listedSince(client: Client, run: RunExecution, sinceMs: number): Promise<Array<{ runId: string; startMs: number }>> {
  const query = `WorkflowId = ${quoted(run.workflowId)} AND StartTime >= "${new Date(sinceMs).toISOString()}"`;
  const deadline = Date.now() + LISTED_WITHIN_MS;
  for (;;) {
    const listed: Array<{ runId: string; startMs: number }> = [];
    for await (const info of client.workflow.list({ query })) listed.push({ runId: info.runId, startMs: info.startTime.getTime() });
    if (listed.some((e) => e.runId === run.firstRunId)) return listed;
    // Not a SecretKeyError: the activity is retried, the run is not refused for a slow index.
    if (Date.now() > deadline) throw new Error(`Temporal's visibility does not list execution ${run.firstRunId} of ${run.workflowId} after ${LISTED_WITHIN_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, LISTED_POLL_MS));
  }
}

/** Whether an execution's input (its first history event), decoded, carries `nonce`. */
async function inputCarries(client: Client, namespace: string, workflowId: string, runId: string, nonce: string): Promise<boolean> {
  const { history } = await client.workflowService.getWorkflowExecutionHistory({ namespace, execution: { workflowId, runId }, maximumPageSize: 1 });
  let payloads = (history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? []) as Payload[];
  const converter = client.options.loadedDataConverter;
  for (const codec of [...converter.payloadCodecs].reverse()) payloads = await codec.decode(payloads);
  return payloads.some((p) => JSON.stringify(converter.payloadConverter.fromPayload(p)).includes(nonce));
}

export function temporalSealFacts(client: Client, namespace: string): SealFactsOf {
  return async (run, { nonce, sealedAtMs }): Promise<SealFacts> => {
    const [retentionMs, runStartMs] = await Promise.all([retentionOf(client, namespace), startMsOf(client, run)]);
    // From the earlier of the window's start and the run's own: the run is always in the listing.
    const listed = await listedSince(client, run, Math.min(sealedAtMs - SEAL_CLOCK_SKEW_MS, runStartMs));
    // Its continue-as-new successors start after it; what started before it is another run.
    const earlier = listed.filter((e) => e.runId !== run.firstRunId && e.startMs < runStartMs);
    const carrying: string[] = [];
    for (const e of earlier) if (await inputCarries(client, namespace, run.workflowId, e.runId, nonce)) carrying.push(e.runId);
    return { runStartMs, earlierCarrying: carrying, retentionMs };
  };
}

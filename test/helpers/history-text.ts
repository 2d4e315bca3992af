import type { Client } from '@temporalio/client';
import type { PayloadCodec } from '@temporalio/common';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { payloadFromJson } from '../../src/codec/codec-server';

/**
 * A run's histories (the run and every child) as one searchable text: each payload's data shown
 * as UTF-8, after the codec when one is given (what a key holder sees), as stored otherwise.
 */

type Json = unknown;

function isPayloadJson(node: Json): node is { metadata?: Record<string, string>; data: string } {
  return node !== null && typeof node === 'object' && 'metadata' in node && typeof (node as { data?: unknown }).data === 'string';
}

/** Proto-JSON (a history export, `temporal workflow show -o json`) with each payload's data as text. */
export async function showPayloads(node: Json, codec: PayloadCodec | null): Promise<Json> {
  if (Array.isArray(node)) return await Promise.all(node.map((n) => showPayloads(n, codec)));
  if (node === null || typeof node !== 'object') return node;
  if (isPayloadJson(node)) {
    const stored = payloadFromJson(node);
    const [shown] = codec ? await codec.decode([stored]) : [stored];
    const metadata = Object.fromEntries(Object.entries(shown?.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('utf8')]));
    return { metadata, data: Buffer.from(shown?.data ?? []).toString('utf8') };
  }
  const entries = await Promise.all(Object.entries(node).map(async ([k, v]) => [k, await showPayloads(v, codec)] as const));
  return Object.fromEntries(entries);
}

/** Every event of the workflows whose id starts with `workflowIdPrefix`, with how many there are. */
export async function historiesText(client: Client, workflowIdPrefix: string, codec: PayloadCodec | null): Promise<{ workflows: number; text: string }> {
  const texts: string[] = [];
  for await (const info of client.workflow.list({ query: `WorkflowId STARTS_WITH "${workflowIdPrefix}"` })) {
    const history = await client.workflow.getHandle(info.workflowId, info.runId).fetchHistory();
    texts.push(JSON.stringify(await showPayloads(JSON.parse(historyToJSON(history)), codec)));
  }
  return { workflows: texts.length, text: texts.join('\n') };
}

import type { Plan } from './plan-schema';

/** At most this many nodes in one run, a group's range included: a bound on the plan's size and on what one run can take. */
export const MAX_TOTAL_NODES = 4096;

/**
 * What Temporal accepts in one payload: the server refuses a larger workflow input with `Blob data
 * size exceeds limit` (its `limit.blobSize.error`, 2 MiB by default, the dev server's too).
 */
export const TEMPORAL_PAYLOAD_LIMIT_BYTES = 2 * 1024 * 1024;

/**
 * A plan may take this much of the RunWorkflow input: the rest of the input (backend, options),
 * the payload's encoding and metadata, and a codec's overhead need room under the payload limit.
 */
export const MAX_RUN_INPUT_BYTES = 1.5 * 1024 * 1024;

/** An AES-GCM sealed value's length for a value of `bytes` bytes (prefix, iv, tag, base64). */
function sealedLength(bytes: number): number {
  return 'sealed:v1:'.length + 16 + 1 + 4 * Math.ceil((bytes + 16) / 3);
}

/**
 * The serialized size of the plan as RunWorkflow receives it: JSON, with secret env values counted
 * at their sealed length (they are sealed after planning, on submission).
 */
export function runInputBytes(plan: Plan): number {
  let bytes = Buffer.byteLength(JSON.stringify(plan), 'utf8');
  for (const name of plan.secret_env ?? []) {
    const value = plan.env[name];
    if (value === undefined) continue;
    const plain = Buffer.byteLength(JSON.stringify(value), 'utf8');
    bytes += sealedLength(Buffer.byteLength(value, 'utf8')) + 2 - plain;
  }
  return bytes;
}

/** `1.2 MB`, for messages (MB as the server's message and the README say it: 2^20 bytes). */
export function formatMB(bytes: number): string {
  return `${Number((bytes / (1024 * 1024)).toFixed(1))} MB`;
}

import { z } from 'zod';
import type { GatewayServices } from './gateway-services';
import { probeStatus, whyNoAnswer } from './replica-probes';
import { TableProbeSchema } from './routing-table';

/**
 * A rollout's gate A as a gateway sees it (`POST /services/<run>/check`): the synthetic request the
 * worker sends each of a new revision's entry replicas, sent again from this gateway, the way its data
 * plane reaches them (its pool of each replica: straight, or through its SSH tunnel for a row with
 * `via`). Users reach the service through here, so a gate that passes only from the worker proves
 * nothing about their path. The requests go outside the data plane: they count in no figure, metric
 * or in-flight count of the service (those feed gate B, autoscaling and drains).
 */

/** What is sent: a probe's request (the entry group's first probe, or `GET /`), as the table bounds a probe. */
export const CheckRequestSchema = TableProbeSchema.pick({ url: true, method: true, headers: true, body: true, timeout_s: true });
export type CheckRequest = z.infer<typeof CheckRequestSchema>;

export const RevisionCheckSchema = z.strictObject({
  revision: z.int().min(0),
  request: CheckRequestSchema,
});
export type RevisionCheck = z.infer<typeof RevisionCheckSchema>;

/** One entry replica's answer: its status, or why none came (never its body). */
export const ReplicaCheckSchema = z.strictObject({
  url: z.string(),
  status: z.int().nullable(),
  ms: z.number().nonnegative().nullable(),
  error: z.string().nullable(),
});

export const RevisionCheckAnswerSchema = z.strictObject({
  run: z.string(),
  generation: z.int().min(0),
  revision: z.int().min(0),
  replicas: z.array(ReplicaCheckSchema).min(1),
});
export type RevisionCheckAnswer = z.infer<typeof RevisionCheckAnswerSchema>;

/** The check's outcome as the admin API answers it: the replicas' answers, or why it could not be made here (404, 409). */
export type RevisionCheckOutcome = { status: 200; answer: RevisionCheckAnswer } | { status: 404 | 409; error: string };

/** Sends `check.request` to each ready entry replica of `check.revision` in this gateway's table of `run`, all at once. */
export async function checkRevisionHere(services: GatewayServices, run: string, check: RevisionCheck): Promise<RevisionCheckOutcome> {
  const served = services.get(run);
  if (!served) return { status: 404, error: `no service "${run}" on this gateway` };
  const { generation } = served.table;
  const entry = served.entries.find((e) => e.revision === check.revision);
  if (!entry) return { status: 409, error: `revision ${check.revision} not in this gateway's table (generation ${generation})` };
  // Every ready one, its probes after READY passing or not: the gate asks each replica users may be sent to.
  const ready = entry.candidates.filter((c) => c.replica.state === 'ready');
  if (ready.length === 0) return { status: 409, error: `revision ${check.revision} has no ready entry replica in this gateway's table (generation ${generation})` };
  const replicas = await Promise.all(
    ready.map(async ({ replica, origin }) => {
      const started = performance.now();
      try {
        const status = await probeStatus(origin, check.request, undefined, services.pool(origin, replica.via));
        return { url: replica.url, status, ms: Math.round(performance.now() - started), error: null };
      } catch (err) {
        return { url: replica.url, status: null, ms: null, error: whyNoAnswer(err) };
      }
    }),
  );
  return { status: 200, answer: { run, generation, revision: check.revision, replicas } };
}

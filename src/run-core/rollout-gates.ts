import type { RolloutPlan } from '../plan/plan-schema';

/**
 * A canary's gate (Troupe's `rollout.gates`): the new revision's figures on the gateways against the
 * old one's over the same window. It fails when the new revision's error rate is above
 * `gates.error_rate` and above the old one's, or its p95 latency is above `p95_factor` times the old
 * one's. A figure is judged only once it rests on enough requests (MIN_REQUESTS): a canary that saw
 * too few fails nothing, and neither does an idle service. Pure.
 */

/** Requests a revision must have answered in the window before its error rate or p95 is judged. */
export const MIN_REQUESTS = 10;

export interface RevisionFigures {
  revision: number;
  requests: number;
  errors: number;
  p95_ms: number | null;
}

export type GateVerdict = { ok: true; note: string } | { ok: false; why: string };

const percent = (x: number) => `${Math.round(x * 1000) / 10}%`;

export function judgeCanary(gates: RolloutPlan['gates'], figures: readonly RevisionFigures[], old: number, canary: number): GateVerdict {
  const none = { revision: 0, requests: 0, errors: 0, p95_ms: null };
  const was = figures.find((f) => f.revision === old) ?? { ...none, revision: old };
  const now = figures.find((f) => f.revision === canary) ?? { ...none, revision: canary };
  if (now.requests < MIN_REQUESTS) return { ok: true, note: `revision ${canary} answered ${now.requests} request${now.requests === 1 ? '' : 's'}: too few to judge` };
  const rate = now.errors / now.requests;
  const oldRate = was.requests > 0 ? was.errors / was.requests : 0;
  if (rate > gates.error_rate && rate > oldRate) {
    return {
      ok: false,
      why: `error rate ${percent(rate)} (${now.errors} of ${now.requests}) above ${percent(gates.error_rate)} and the old revision's ${percent(oldRate)}`,
    };
  }
  if (was.requests >= MIN_REQUESTS && now.p95_ms !== null && was.p95_ms !== null && was.p95_ms > 0 && now.p95_ms > gates.p95_factor * was.p95_ms) {
    return { ok: false, why: `p95 ${Math.round(now.p95_ms)} ms above ${gates.p95_factor} × the old revision's ${Math.round(was.p95_ms)} ms` };
  }
  const p95 = now.p95_ms === null ? '' : `, p95 ${Math.round(now.p95_ms)} ms`;
  return { ok: true, note: `revision ${canary}: ${now.errors} error${now.errors === 1 ? '' : 's'} of ${now.requests}${p95}` };
}

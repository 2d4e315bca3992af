import { looksSecret } from '../config/secret-names';
import type { Plan } from '../plan/plan-schema';
import { isSealed, loadSecretKey, newSeal, sealEnv } from '../secrets/sealed-env';
import { runWorkflowId } from '../contract/ids';

/**
 * Secret env values leave this process sealed: history, the Web UI and errors never see them. A
 * value that merely looks sealed (it starts with the prefix) is sealed too, so that the worker,
 * which opens every sealed-looking value, hands the job exactly what was written. Values are sealed
 * for this run's workflow id with a fresh nonce and the time now: they open in this run and no other.
 */
export function sealSecrets(plan: Plan): Plan {
  const names = Object.entries(plan.env)
    .filter(([name, value]) => plan.secret_env?.includes(name) || looksSecret(name) || isSealed(value))
    .map(([name]) => name);
  if (names.length === 0) return plan;
  return { ...plan, env: sealEnv(plan.env, names, loadSecretKey({ create: true }), newSeal(runWorkflowId(plan.run_name))), secret_env: names };
}

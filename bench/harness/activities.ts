import type { BackendRegistry } from '../../activities';
import { createJobActivities } from '../../activities/jobs';
import { createProvisioningActivities } from '../../activities/provisioning';
import { createTeardownActivities } from '../../activities/teardown';

/**
 * The worker's activities for the given backends: `createActivities` itself when it loads under
 * plain Node ESM. When it does not (activities/fleet.ts pulls in src/backends/ssh, whose
 * `import { utils } from 'ssh2'` Node cannot resolve from the CommonJS package outside vitest),
 * the run activities alone: the benches use the local and simulated backends, never an SSH fleet.
 */
export async function benchActivities(backends: BackendRegistry): Promise<object> {
  try {
    const { createActivities } = await import('../../activities');
    return createActivities(backends);
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    if (!warned) console.warn(`note: activities/index.ts does not load under Node ESM (${err.message}); using the run activities only`);
    warned = true;
    return { ...createProvisioningActivities(backends), ...createJobActivities(backends), ...createTeardownActivities(backends) };
  }
}

let warned = false;

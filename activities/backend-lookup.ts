import { FailureType } from '../src/run-core/failure-table';
import { activityFailure } from './activity-failure';
import type { Backend } from '../src/backends/backend';
import type { BackendRegistry } from './types';

export function backendFor(backends: BackendRegistry, name: string): Backend {
  const backend = backends[name];
  if (!backend) {
    throw activityFailure(FailureType.UnknownBackend, `this worker has no backend "${name}" (it has: ${Object.keys(backends).join(', ') || 'none'})`);
  }
  return backend;
}

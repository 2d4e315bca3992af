import { ApplicationFailure } from '@temporalio/common';
import type { Backend } from '../src/backends/backend';
import type { BackendRegistry } from './types';

export function backendFor(backends: BackendRegistry, name: string): Backend {
  const backend = backends[name];
  if (!backend) {
    throw ApplicationFailure.nonRetryable(
      `this worker has no backend "${name}" (it has: ${Object.keys(backends).join(', ') || 'none'})`,
      'UnknownBackend',
    );
  }
  return backend;
}

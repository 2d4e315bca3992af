import type { RunState } from '../../client';
import { paint, type Style } from './style';

/**
 * Where a service is called, as `troupe apply` shows it once its routing table is on the gateways:
 * each endpoint, and a `curl` line that works as it is (the token as `$TOKEN`: it is printed once, at
 * submission, never again).
 */
export function serviceEndpointLines(state: RunState, style: Style): string[] {
  const service = state.service;
  if (!service || service.endpoints.length === 0) return [];
  const [first] = service.endpoints;
  const auth = service.auth ? '-H "Authorization: Bearer $TOKEN" ' : '';
  return [
    ...service.endpoints.map((url) => `${paint(style, 'bold', state.run_name)}: endpoint ${url}`),
    `  try: ${paint(style, 'dim', `curl ${auth}${first}`)}`,
  ];
}

/** The service's endpoints changed between two states (or appeared). */
export function endpointsChanged(prev: RunState | null, next: RunState): boolean {
  return JSON.stringify(prev?.service?.endpoints ?? []) !== JSON.stringify(next.service?.endpoints ?? []);
}

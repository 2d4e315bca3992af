import { isGrpcServiceError } from '@temporalio/client';
import { ConfigError } from '../../config/errors';
import { TroupeClientError } from '../../client';
import { CliError, EXIT_REFUSED } from '../command';

/** gRPC status codes of a refusal: the service knows the caller and says no, or cannot tell who calls. */
const REFUSALS: Readonly<Record<number, string>> = { 7: 'PERMISSION_DENIED', 16: 'UNAUTHENTICATED' };

/** The gRPC refusal in an error or its causes (the SDK wraps it: `ServiceError('Failed to list workflows', { cause })`). */
function grpcRefusal(err: unknown): { code: number; details: string } | null {
  let e: unknown = err;
  for (let depth = 0; e instanceof Error && depth < 8; depth++) {
    if (isGrpcServiceError(e) && REFUSALS[e.code] !== undefined) return e;
    e = e.cause;
  }
  return null;
}

/**
 * Errors the user can act on (a bad config, no worker, an unknown run…) become CLI errors: their
 * message alone, exit 1. A call the Temporal service refused (PermissionDenied, Unauthenticated:
 * an authorizer, a missing or wrong credential) becomes its reason, exit 4. Anything else is a bug
 * and keeps its stack trace.
 */
export function cliErrorOf(err: unknown): unknown {
  if (err instanceof CliError) return err;
  const refusal = grpcRefusal(err);
  if (refusal !== null) {
    const reason = refusal.details.trim() || '(the service gave no reason)';
    return new CliError(`the Temporal service refused this client (${REFUSALS[refusal.code]}): ${reason}`, EXIT_REFUSED);
  }
  if (err instanceof TroupeClientError || err instanceof ConfigError) return new CliError(err.message, 1);
  return err;
}

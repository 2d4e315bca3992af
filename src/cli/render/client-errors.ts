import { ConfigError } from '../../config/errors';
import { TroupeClientError } from '../../client';
import { CliError } from '../command';

/**
 * Errors the user can act on (a bad config, no worker, an unknown run…) become CLI errors: their
 * message alone, exit 1. Anything else is a bug and keeps its stack trace.
 */
export function cliErrorOf(err: unknown): unknown {
  if (err instanceof CliError) return err;
  if (err instanceof TroupeClientError || err instanceof ConfigError) return new CliError(err.message, 1);
  return err;
}

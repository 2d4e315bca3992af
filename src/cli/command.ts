import { InvalidRunNameError } from '../client/errors';
import { RUN_NAME } from '../plan/run-name';

/** A CLI command: takes its arguments (after the command name), returns the process exit code. */
export type Command = (args: string[]) => Promise<number>;

/** The exit code of a call the Temporal service refused (gRPC PERMISSION_DENIED or UNAUTHENTICATED). */
export const EXIT_REFUSED = 4;

/**
 * An error the user can act on: printed as its message alone (no stack trace).
 * Exit codes: 1 = the config, the run or the service said no; 2 = bad usage of the CLI;
 * 3 = the config is valid but asks for what Troupe does not do yet (running a service);
 * 4 = the Temporal service refused this client (PermissionDenied, Unauthenticated), with its reason.
 */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: 1 | 2 | 3 | typeof EXIT_REFUSED = 1,
  ) {
    super(message);
  }
}

/** A RUN argument that cannot name a run (a workflow id, a typo) is bad usage: said before any connection. */
export function runNameArgument(name: string): string {
  if (!RUN_NAME.test(name)) throw new CliError(new InvalidRunNameError(name).message, 2);
  return name;
}

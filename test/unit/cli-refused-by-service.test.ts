import { Metadata, Server, ServerCredentials, status, type ServiceDefinition } from '@grpc/grpc-js';
import { ServiceError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliError, EXIT_REFUSED } from '../../src/cli/command';
import { cliErrorOf } from '../../src/cli/render/client-errors';
import { troupeCli } from '../helpers/troupe-cli';

/**
 * A call the Temporal service refuses (its authorizer: PermissionDenied; no or a wrong credential:
 * Unauthenticated) is printed with the service's reason and exit code 4, by every command: the
 * mapping on an SDK error, and `troupe ps` / `troupe stop` against a frontend that refuses.
 */

const REASON = 'troupe: the client certificate\'s subject CN="troupe-client" has no role in this deployment';

/** What grpc-js throws for a refused call, as the SDK receives it. */
function grpcError(code: number, details: string): Error {
  return Object.assign(new Error(`${code} ${status[code]}: ${details}`), { code, details, metadata: new Metadata() });
}

describe('cliErrorOf: a refusal by the service', () => {
  it('gives the reason of a PermissionDenied the SDK wrapped, with exit code 4', () => {
    const mapped = cliErrorOf(new ServiceError('Failed to list workflows', { cause: grpcError(status.PERMISSION_DENIED, REASON) }));
    expect(mapped).toBeInstanceOf(CliError);
    expect(mapped).toMatchObject({ exitCode: EXIT_REFUSED, message: `the Temporal service refused this client (PERMISSION_DENIED): ${REASON}` });
  });

  it('gives an Unauthenticated the same way, unwrapped too', () => {
    expect(cliErrorOf(grpcError(status.UNAUTHENTICATED, 'invalid API key'))).toMatchObject({
      exitCode: EXIT_REFUSED,
      message: 'the Temporal service refused this client (UNAUTHENTICATED): invalid API key',
    });
  });

  it('leaves other gRPC failures alone (a bug or an outage keeps its trace)', () => {
    const unavailable = new ServiceError('Failed to list workflows', { cause: grpcError(status.UNAVAILABLE, 'no frontend') });
    expect(cliErrorOf(unavailable)).toBe(unavailable);
  });
});

/** A frontend that answers every call this test names with PermissionDenied and the reason. */
function refusingFrontend(): ServiceDefinition {
  const bytes = (b: Buffer) => b;
  const method = (name: string) => ({
    path: `/temporal.api.workflowservice.v1.WorkflowService/${name}`,
    requestStream: false,
    responseStream: false,
    requestSerialize: bytes,
    requestDeserialize: bytes,
    responseSerialize: bytes,
    responseDeserialize: bytes,
  });
  return { ListWorkflowExecutions: method('ListWorkflowExecutions'), SignalWorkflowExecution: method('SignalWorkflowExecution'), DescribeWorkflowExecution: method('DescribeWorkflowExecution') };
}

let server: Server;
let address = '';
beforeAll(async () => {
  server = new Server();
  const refuse = (_call: unknown, callback: (err: { code: number; details: string }) => void) => callback({ code: status.PERMISSION_DENIED, details: REASON });
  server.addService(refusingFrontend(), { ListWorkflowExecutions: refuse, SignalWorkflowExecution: refuse, DescribeWorkflowExecution: refuse });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  address = `127.0.0.1:${port}`;
});
afterAll(() => server.forceShutdown());

const troupe = (args: string[]) => troupeCli([...args, '--address', address]);

describe('the CLI against a frontend that refuses this client', () => {
  it('troupe ps and troupe stop print the service\'s reason in one line and exit 4', async () => {
    for (const command of [['ps'], ['stop', 'some-run', '-y']]) {
      const r = await troupe(command);
      expect(r.stderr.trimEnd().split('\n'), command.join(' ')).toEqual([`the Temporal service refused this client (PERMISSION_DENIED): ${REASON}`]);
      expect(r.code).toBe(EXIT_REFUSED);
    }
  }, 90_000);
});

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { NativeConnection, bundleWorkflowCode, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { failureConverterPath } from '../../src/codec/data-converter';
import { startTracing, tracingWorkflowModules, type Tracing } from '../../src/tracing/tracing';
import { createTroupeWorker, quietBundler, workflowsPath } from '../../src/worker/create-worker';
import { makeLocalFleet } from '../helpers/local-fleet';
import { temporalAddress, uniqueTaskQueue } from '../helpers/temporal';

/**
 * Traces of a run, as an OTLP receiver gets them: the SDK's submit, the workflows, every activity
 * and each job's start in one trace, with the group and rank, and no secret in any attribute. The
 * receiver is a small OTLP/HTTP (JSON) endpoint on loopback in this file (no collector here).
 */

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  attributes?: Array<{ key: string; value: { stringValue?: string; intValue?: string | number } }>;
}
interface OtlpBody {
  resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
}

const SECRET = 'tr4ce-s3cret-value';
const fleet = makeLocalFleet('troupe-tracing-');
const bodies: string[] = [];
let receiver: Server;
let tracing: Tracing | null;
let worker: Worker;
let running: Promise<void>;
let connection: NativeConnection;
let troupe: TroupeClient;
const queue = uniqueTaskQueue('tracing');

const spans = (): OtlpSpan[] => bodies.flatMap((b) => (JSON.parse(b) as OtlpBody).resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
const attr = (span: OtlpSpan, key: string): string | number | undefined => {
  const v = span.attributes?.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : undefined);
};

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      if (req.url === '/v1/traces') bodies.push(body);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  tracing = startTracing('troupe-test', { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}` });
  const workflowBundle = await bundleWorkflowCode({ workflowsPath, failureConverterPath, logger: quietBundler, workflowInterceptorModules: tracingWorkflowModules() });
  connection = await NativeConnection.connect({ address: temporalAddress() });
  worker = await createTroupeWorker({ connection, namespace: 'default', taskQueue: queue, backends: { local: fleet.backend }, workflowBundle, tracing });
  running = worker.run();
  troupe = await TroupeClient.connect({ address: temporalAddress(), taskQueue: queue });
}, 120_000);

afterAll(async () => {
  await troupe?.close();
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await connection?.close();
  await tracing?.shutdown();
  receiver?.close();
  fleet.remove();
});

describe('traces over OTLP', () => {
  it('one trace per run: submit, workflows, every activity and each job start, with group and rank', async () => {
    const name = `traced-${queue.slice(-8)}`;
    const yaml = [
      'type: task',
      `name: ${name}`,
      'env:',
      `  API_TOKEN: ${SECRET}`,
      'groups:',
      '  - name: prefill',
      '    commands: ["echo prefill"]',
      '  - name: decode',
      '    nodes: 2',
      '    commands: ["echo decode"]',
      '',
    ].join('\n');
    const run = await troupe.submit({ yaml, options: { stop_grace_s: 1 } });
    expect((await run.wait()).status).toBe('DONE');
    const deadline = Date.now() + 30_000;
    while (!spans().some((s) => s.name === 'RunWorkflow:RunWorkflow') || spans().filter((s) => s.name.startsWith('StartJob ')).length < 3) {
      if (Date.now() > deadline) throw new Error(`spans so far: ${spans().map((s) => s.name).join(', ')}`);
      await tracing?.flush();
      await new Promise((r) => setTimeout(r, 250));
    }

    const submit = spans().find((s) => s.name === `SubmitRun ${name}`);
    expect(submit).toBeDefined();
    const trace = spans().filter((s) => s.traceId === submit?.traceId);
    const names = new Set(trace.map((s) => s.name));
    for (const expected of [
      'StartWorkflow:RunWorkflow',
      'RunWorkflow:RunWorkflow',
      'StartChildWorkflow:NodeGroupWorkflow',
      'RunWorkflow:NodeGroupWorkflow',
      'RunActivity:provisionJobs',
      'RunActivity:runJobs',
      'RunActivity:releaseRun',
      'StartJob prefill/0',
      'StartJob decode/0',
      'StartJob decode/1',
    ]) {
      expect(names, `${expected} in ${[...names].join(', ')}`).toContain(expected);
    }
    const jobStarts = trace.filter((s) => s.name.startsWith('StartJob '));
    expect(jobStarts.map((s) => [attr(s, 'troupe.run'), attr(s, 'troupe.group'), attr(s, 'troupe.rank'), attr(s, 'troupe.job_num')]).sort()).toEqual([
      [name, 'decode', 0, 1],
      [name, 'decode', 1, 2],
      [name, 'prefill', 0, 0],
    ]);
    // Each job's start is inside the activity that started it, and after the run began.
    const byId = new Map(trace.map((s) => [s.spanId, s]));
    for (const start of jobStarts) expect(byId.get(start.parentSpanId ?? '')?.name).toBe('RunActivity:runJobs');
    const at = (n: string) => Math.min(...trace.filter((s) => s.name === n).map((s) => Number(BigInt(s.startTimeUnixNano) / 1_000_000n)));
    expect(at(`SubmitRun ${name}`)).toBeLessThanOrEqual(at('RunWorkflow:RunWorkflow'));
    expect(at('RunWorkflow:RunWorkflow')).toBeLessThanOrEqual(at('RunActivity:provisionJobs'));
    expect(at('RunActivity:provisionJobs')).toBeLessThanOrEqual(at('StartJob prefill/0'));
    // The secret env value is in no span (attributes, names, events) of any trace.
    expect(bodies.join('\n')).not.toContain(SECRET);
  });
});

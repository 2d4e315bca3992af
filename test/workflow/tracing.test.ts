import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection, bundleWorkflowCode, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { failureConverterPath } from '../../src/codec/data-converter';
import { startTracing, tracingWorkflowModules, type Tracing } from '../../src/tracing/tracing';
import { createTroupeWorker, quietBundler, workflowsPath } from '../../src/worker/create-worker';
import { makeLocalFleet } from '../helpers/local-fleet';
import { startOtelCollector, type OtelCollector, type OtlpSpan } from '../helpers/otel-collector';
import { temporalAddress, uniqueTaskQueue } from '../helpers/temporal';

/**
 * Traces of a run, as a real OpenTelemetry Collector receives them (test/otel-collector: its OTLP
 * receiver and file exporter, built by scripts/otel-collector.sh) and writes them out: the SDK's
 * submit as the one root, the workflows, every activity and each job's start in one trace, with the
 * attributes the README lists, and no env value or command anywhere in what the collector exported.
 */

const SECRET = 'tr4ce-s3cret-value';
const COMMANDS = ['echo prefill-tr4ce', 'echo decode-tr4ce'];
const fleet = makeLocalFleet('troupe-tracing-');
const collectorDir = mkdtempSync(join(tmpdir(), 'troupe-otelcol-'));
let collector: OtelCollector;
let tracing: Tracing | null;
let worker: Worker;
let running: Promise<void>;
let connection: NativeConnection;
let troupe: TroupeClient;
const queue = uniqueTaskQueue('tracing');

const spans = (): OtlpSpan[] => collector.spans();
const attr = (span: OtlpSpan | undefined, key: string): string | number | undefined => {
  const v = span?.attributes?.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : undefined);
};

beforeAll(async () => {
  // Builds the collector if scripts/setup.sh --test has not (minutes, once per machine).
  collector = await startOtelCollector(collectorDir);
  tracing = startTracing('troupe-test', { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint });
  const workflowBundle = await bundleWorkflowCode({ workflowsPath, failureConverterPath, logger: quietBundler, workflowInterceptorModules: tracingWorkflowModules() });
  connection = await NativeConnection.connect({ address: temporalAddress() });
  worker = await createTroupeWorker({ connection, namespace: 'default', taskQueue: queue, backends: { local: fleet.backend }, workflowBundle, tracing });
  running = worker.run();
  troupe = await TroupeClient.connect({ address: temporalAddress(), taskQueue: queue });
}, 15 * 60_000);

afterAll(async () => {
  await troupe?.close();
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await connection?.close();
  await tracing?.shutdown();
  await collector?.stop();
  rmSync(collectorDir, { recursive: true, force: true });
  fleet.remove();
});

describe('traces in a real OpenTelemetry Collector', () => {
  it('one root per run: submit, RunWorkflow, each group child, every activity and each job start, with the README attributes and no env or command', async () => {
    const name = `traced-${queue.slice(-8)}`;
    const groups = ['prefill', 'decode'];
    const yaml = [
      'type: task',
      `name: ${name}`,
      'env:',
      `  API_TOKEN: ${SECRET}`,
      'groups:',
      '  - name: prefill',
      `    commands: ["${COMMANDS[0]}"]`,
      '  - name: decode',
      '    nodes: 2',
      `    commands: ["${COMMANDS[1]}"]`,
      '',
    ].join('\n');
    const run = await troupe.submit({ yaml, options: { stop_grace_s: 1 } });
    expect((await run.wait()).status).toBe('DONE');

    const workflowId = (s: OtlpSpan) => attr(s, 'temporalWorkflowId') ?? attr(s, 'workflowId');
    const runWorkflowId = `run/${name}`;
    const groupWorkflowId = (g: string) => `${runWorkflowId}/group/${g}`;
    const count = (n: string) => spans().filter((s) => s.name === n).length;
    // What the run's trace holds once all of it has reached the collector (the run's own span ends last).
    const complete = () =>
      count('RunWorkflow:RunWorkflow') >= 1 &&
      count('RunActivity:releaseRun') >= 1 &&
      count('RunWorkflow:NodeGroupWorkflow') >= groups.length &&
      count('RunActivity:runJobs') >= groups.length &&
      spans().filter((s) => s.name.startsWith('StartJob ')).length >= 3;
    const deadline = Date.now() + 30_000;
    while (!complete()) {
      if (Date.now() > deadline) {
        const names = spans().map((s) => s.name).sort();
        throw new Error(`spans so far: ${[...new Set(names)].map((n) => `${n} ×${count(n)}`).join(', ')}`);
      }
      await tracing?.flush();
      await new Promise((r) => setTimeout(r, 250));
    }

    // One root per run: the submission, and every span of the run hangs from it in its one trace.
    const all = spans();
    const roots = all.filter((s) => !s.parentSpanId && attr(s, 'troupe.run') === name);
    expect(roots.map((s) => s.name)).toEqual([`SubmitRun ${name}`]);
    const root = roots[0] as OtlpSpan;
    expect([attr(root, 'troupe.run'), attr(root, 'troupe.backend'), attr(root, 'troupe.groups'), attr(root, 'troupe.nodes')]).toEqual([name, 'local', 2, 3]);
    const ofRun = all.filter((s) => attr(s, 'troupe.run') === name || String(workflowId(s) ?? '').startsWith(runWorkflowId));
    expect(new Set(ofRun.map((s) => s.traceId))).toEqual(new Set([root.traceId]));
    const trace = all.filter((s) => s.traceId === root.traceId);
    const byId = new Map(trace.map((s) => [s.spanId, s]));
    expect(trace.filter((s) => s !== root && !byId.has(s.parentSpanId ?? '')).map((s) => s.name), 'spans whose parent is not in the trace').toEqual([]);
    const parent = (s: OtlpSpan | undefined) => byId.get(s?.parentSpanId ?? '');
    // A workflow's or an activity's span at least once: a task retried on a busy machine (its end
    // not accepted in time) runs again and is exported again, under the same parent.
    const each = (n: string, wf: string) => {
      const found = trace.filter((s) => s.name === n && workflowId(s) === wf);
      expect(found.length, `${n} of ${wf}`).toBeGreaterThanOrEqual(1);
      return found;
    };

    // RunWorkflow, started by the submission.
    const runSpans = each('RunWorkflow:RunWorkflow', runWorkflowId);
    for (const span of runSpans) {
      expect(parent(span)?.name).toBe('StartWorkflow:RunWorkflow');
      expect(parent(parent(span))).toBe(root);
    }
    // Each group's child workflow, started by RunWorkflow.
    const groupSpans = new Map(groups.map((g) => [g, each('RunWorkflow:NodeGroupWorkflow', groupWorkflowId(g))]));
    for (const [g, spans] of groupSpans) {
      for (const span of spans) {
        expect(parent(span)?.name, g).toBe('StartChildWorkflow:NodeGroupWorkflow');
        expect(runSpans, g).toContain(parent(parent(span)));
      }
    }
    // Each activity: run where its workflow scheduled it, and every scheduled one ran in the trace.
    const activities: Array<[string, string, OtlpSpan[]]> = [
      ['describeBackend', runWorkflowId, runSpans],
      ['releaseRun', runWorkflowId, runSpans],
      ...groups.flatMap((g) => ['provisionJobs', 'waitRunnersReady', 'runJobs'].map((a): [string, string, OtlpSpan[]] => [a, groupWorkflowId(g), groupSpans.get(g) ?? []])),
    ];
    for (const [activity, wf, scheduledBy] of activities) {
      for (const attempt of each(`RunActivity:${activity}`, wf)) {
        expect(parent(attempt)?.name, `${activity} of ${wf}`).toBe(`StartActivity:${activity}`);
        expect(scheduledBy, `${activity} of ${wf}`).toContain(parent(parent(attempt)));
      }
    }
    for (const scheduled of trace.filter((s) => s.name.startsWith('StartActivity:'))) {
      expect(trace.some((s) => s.parentSpanId === scheduled.spanId && s.name === scheduled.name.replace('StartActivity:', 'RunActivity:')), scheduled.name).toBe(true);
    }
    // Each job's start, inside its group's runJobs, with every attribute the README lists.
    const jobStarts = trace.filter((s) => s.name.startsWith('StartJob '));
    const keys = ['troupe.run', 'troupe.group', 'troupe.rank', 'troupe.job_num', 'troupe.attempt', 'troupe.backend'];
    expect(jobStarts.map((s) => [s.name, ...keys.map((k) => attr(s, k))]).sort()).toEqual([
      ['StartJob decode/0', name, 'decode', 0, 1, 0, 'local'],
      ['StartJob decode/1', name, 'decode', 1, 2, 0, 'local'],
      ['StartJob prefill/0', name, 'prefill', 0, 0, 0, 'local'],
    ]);
    for (const start of jobStarts) {
      expect(String(attr(start, 'troupe.host') ?? ''), `${start.name}: troupe.host`).not.toBe('');
      const batch = parent(start);
      expect([batch?.name, batch && workflowId(batch)], start.name).toEqual(['RunActivity:runJobs', groupWorkflowId(String(attr(start, 'troupe.group')))]);
    }
    const at = (s: OtlpSpan) => BigInt(s.startTimeUnixNano);
    const runStart = runSpans.map(at).reduce((a, b) => (a < b ? a : b));
    expect(at(root) <= runStart).toBe(true);
    for (const start of jobStarts) expect(runStart <= at(start), start.name).toBe(true);
    expect(new Set(collector.services())).toEqual(new Set(['troupe-test']));
    // No env value and no command anywhere in what the collector wrote out (names, attributes, events).
    const exported = collector.exported();
    for (const never of [SECRET, ...COMMANDS]) expect(exported).not.toContain(never);
  });
});

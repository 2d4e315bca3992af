import { execFile } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from './free-port';
import { startReadyProcess } from './ready-process';

/** One span as the collector's file exporter writes it (OTLP JSON). */
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  attributes?: Array<{ key: string; value: { stringValue?: string; intValue?: string | number } }>;
}
interface OtlpLine {
  resourceSpans: Array<{ resource?: { attributes?: OtlpSpan['attributes'] }; scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
}

export interface OtelCollector {
  /** Where OTLP/HTTP goes: OTEL_EXPORTER_OTLP_ENDPOINT's value. */
  endpoint: string;
  /** What the file exporter has written so far, as it wrote it (OTLP JSON, one batch a line). */
  exported(): string;
  spans(): OtlpSpan[];
  /** The `service.name` of every resource that sent spans. */
  services(): string[];
  stop(): Promise<void>;
}

const repo = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The collector binary (test/otel-collector), built by scripts/otel-collector.sh — which
 * `scripts/setup.sh --test` has run; on a machine where it has not, this builds it (minutes).
 */
export async function otelCollectorBinary(): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', [join(repo, 'scripts', 'otel-collector.sh')], { timeout: 14 * 60_000 });
  return stdout.trim();
}

/**
 * A real OpenTelemetry Collector on a free loopback port: OTLP/HTTP in, the file exporter out
 * (`dir`/spans.jsonl), its config in `dir`, its own telemetry off (no metrics port of its own);
 * resolved once it says it is ready.
 */
export async function startOtelCollector(dir: string): Promise<OtelCollector> {
  const binary = await otelCollectorBinary();
  const port = await freePort();
  const out = join(dir, 'spans.jsonl');
  const config = join(dir, 'otelcol.yaml');
  writeFileSync(
    config,
    [
      'receivers:',
      '  otlp:',
      '    protocols:',
      '      http:',
      `        endpoint: 127.0.0.1:${port}`,
      'exporters:',
      '  file:',
      `    path: ${JSON.stringify(out)}`,
      '    flush_interval: 100ms',
      'service:',
      '  telemetry:',
      '    metrics:',
      '      level: none',
      '  pipelines:',
      '    traces:',
      '      receivers: [otlp]',
      '      exporters: [file]',
      '',
    ].join('\n'),
  );
  const server = await startReadyProcess('the collector', binary, ['--config', config], /Everything is ready/);
  // Whole lines only: the exporter may be writing the last one.
  const lines = (): OtlpLine[] => {
    const text = existsSync(out) ? readFileSync(out, 'utf8') : '';
    return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean).map((l) => JSON.parse(l) as OtlpLine);
  };
  return {
    endpoint: `http://127.0.0.1:${port}`,
    exported: () => (existsSync(out) ? readFileSync(out, 'utf8') : ''),
    spans: () => lines().flatMap((l) => l.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans))),
    services: () =>
      lines().flatMap((l) => l.resourceSpans.map((r) => r.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue ?? '')),
    stop: () => server.stop(),
  };
}

import { createRequire } from 'node:module';
import { SpanStatusCode, trace, type Attributes, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';

/**
 * OpenTelemetry traces, on when OTEL_EXPORTER_OTLP_ENDPOINT (or …_TRACES_ENDPOINT) is set:
 * spans go over OTLP/HTTP (JSON) to that endpoint. One trace per run: the client's submit span is
 * its root, Temporal's interceptors carry it through the workflows and activities, and each job's
 * start is a span with the run, group and rank. Attributes hold names, numbers and hosts only:
 * never an env value, a command or output. Without the variable nothing is registered and the
 * tracer Troupe's code asks for is OpenTelemetry's no-op one.
 */

export interface Tracing {
  resource: Resource;
  spanProcessor: SpanProcessor;
  /** Sends what is buffered (a CLI before it exits, a test before it looks). */
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

/** The tracer Troupe's own spans come from (no-op until a provider is registered). */
export function troupeTracer(): Tracer {
  return trace.getTracer('troupe');
}

export function tracingWanted(env: Record<string, string | undefined> = process.env): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Registers a global tracer provider exporting over OTLP, when the environment asks for it. */
export function startTracing(service: string, env: Record<string, string | undefined> = process.env): Tracing | null {
  if (!tracingWanted(env)) return null;
  const resource = new Resource({ 'service.name': env.OTEL_SERVICE_NAME || service });
  // The variables' meaning as OpenTelemetry defines it (the exporter reads headers and timeouts itself).
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.replace(/\/+$/, '');
  const url = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || `${base}/v1/traces`;
  const spanProcessor = new BatchSpanProcessor(new OTLPTraceExporter({ url }), { scheduledDelayMillis: 1_000 });
  const provider = new BasicTracerProvider({ resource, spanProcessors: [spanProcessor] });
  provider.register({ contextManager: new AsyncLocalStorageContextManager() });
  return {
    resource,
    spanProcessor,
    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
}

const require = createRequire(import.meta.url);

/** The workflow interceptors of @temporalio/interceptors-opentelemetry, for the workflow bundle. */
export function tracingWorkflowModules(): string[] {
  return [require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors')];
}

/** Runs `body` in a span of Troupe's tracer (a child of the active one); a throw marks it failed by its error's name alone. */
export async function inSpan<T>(name: string, attributes: Attributes, body: () => Promise<T>): Promise<T> {
  return await troupeTracer().startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await body();
    } catch (err) {
      // The name only: an error's message may quote what a job printed.
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.name : 'error' });
      throw err;
    } finally {
      span.end();
    }
  });
}

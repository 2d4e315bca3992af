import { DefaultLogger, Runtime, makeTelemetryFilterString } from '@temporalio/worker';

// Workers in tests log errors only: activity failures are what many tests provoke on purpose, and
// they are asserted on, not read. Runtime.install must run before any connection.
Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR', other: 'ERROR' }) } },
});

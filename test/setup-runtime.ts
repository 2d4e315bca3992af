import { DefaultLogger, Runtime } from '@temporalio/worker';

// Workers in tests log warnings and errors only; Runtime.install must run before any connection.
Runtime.install({ logger: new DefaultLogger('WARN') });

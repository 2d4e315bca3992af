#!/usr/bin/env node
// A data-plane worker of `troupe gateway --workers N`, forked by node:cluster; through tsx's loader as bin/troupe.js.
import { register } from 'tsx/esm/api';

register();
const { runGatewayWorker } = await import('../src/gateway/gateway-worker.ts');
await runGatewayWorker();

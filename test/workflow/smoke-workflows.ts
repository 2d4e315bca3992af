import { proxyActivities } from '@temporalio/workflow';

const { greet } = proxyActivities<{ greet(name: string): Promise<string> }>({ startToCloseTimeout: '10s' });

/** Proves the harness: a workflow that calls one activity on a real worker. */
export async function harnessSmoke(name: string): Promise<string> {
  return await greet(name);
}

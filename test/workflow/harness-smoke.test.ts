import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startWorker, testClient, uniqueTaskQueue } from '../helpers/temporal';

describe('test harness', () => {
  it('runs a workflow and an activity on a real worker against the dev server', async () => {
    const taskQueue = uniqueTaskQueue('smoke');
    const { stop } = await startWorker({
      taskQueue,
      workflowsPath: fileURLToPath(new URL('./smoke-workflows.ts', import.meta.url)),
      activities: { greet: async (name: string) => `hello ${name} from pid ${process.pid}` },
    });
    const { client, close } = await testClient();
    try {
      const result = await client.workflow.execute('harnessSmoke', {
        taskQueue,
        workflowId: `smoke-${taskQueue}`,
        args: ['troupe'],
      });
      expect(result).toBe(`hello troupe from pid ${process.pid}`);
    } finally {
      await stop();
      await close();
    }
  });
});

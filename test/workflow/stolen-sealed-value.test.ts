import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { loadPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { RunOptionsSchema, type RunInput } from '../../src/contract/message-schemas';
import { makeLocalFleet, makeSharedDir } from '../helpers/local-fleet';
import { useLocalTroupe } from '../helpers/local-troupe';
import { temporalAddress } from '../helpers/temporal';

/**
 * An attacker with a Temporal client of their own (a job in loopback mode can be one) reads a
 * victim's run input the way the Web UI decodes it and copies its sealed token into a plan it
 * starts straight on Temporal: the worker must not open it for the thief's job — neither in a
 * run of another name, nor in a later run that reuses the victim's workflow id once it closed.
 */

const fleet = makeLocalFleet('troupe-stolen-seal-');
const shared = makeSharedDir('troupe-stolen-seal-shared-');
const keyDir = mkdtempSync(join(tmpdir(), 'troupe-stolen-seal-key-'));
const saved = { key: process.env.TROUPE_SECRET_KEY_FILE, bindings: process.env.TROUPE_SEAL_BINDINGS_DIR };
const env = useLocalTroupe(fleet, {
  setup: () => {
    process.env.TROUPE_SECRET_KEY_FILE = join(keyDir, 'secret.key');
    process.env.TROUPE_SEAL_BINDINGS_DIR = join(keyDir, 'bindings');
  },
  cleanup: () => {
    shared.remove();
    rmSync(keyDir, { recursive: true, force: true });
    for (const [name, value] of [['TROUPE_SECRET_KEY_FILE', saved.key], ['TROUPE_SEAL_BINDINGS_DIR', saved.bindings]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  },
});

/** The run's input as a reader with the codec key sees it (what the Web UI shows through the codec server). */
async function inputOf(workflowId: string): Promise<RunInput> {
  const history = await env.client.workflow.getHandle(workflowId).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  return await decodedPayload<RunInput>(payload as Payload);
}

async function decodedPayload<T>(payload: Payload): Promise<T> {
  const [plain] = await new EncryptionCodec(loadCodecKeyring({ create: false })).decode([payload]);
  return defaultPayloadConverter.fromPayload(plain as Payload);
}

function taskYaml(name: string, file: string): string {
  return ['type: task', `name: ${name}`, 'env:', '  - HF_TOKEN', 'commands:', `  - printf %s "$HF_TOKEN" > ${shared.dir}/${file}`, ''].join('\n');
}

describe('a sealed value copied out of its run', () => {
  it('does not open in a thief run of another name, nor in a later run reusing the victim id', async () => {
    const tag = env.worker.taskQueue.slice(-8);
    const token = `hf_${randomBytes(18).toString('hex')}`;
    const victimName = `victim-${tag}`;
    const victim = await env.troupe.submit({ yaml: taskYaml(victimName, 'victim'), environ: { HF_TOKEN: token }, options: { stop_grace_s: 1 } });
    expect((await victim.wait()).status).toBe('DONE');
    expect(shared.lines('victim')).toEqual([token]);

    const stolenInput = await inputOf(victim.workflowId);
    const stolen = stolenInput.plan.env.HF_TOKEN ?? '';
    expect(stolen).toMatch(/^sealed:v3:/);

    // 1. Another run name: the thief's own plan with the victim's sealed value in it.
    const thiefName = `thief-${tag}`;
    const thiefPlan = loadPlan(taskYaml(thiefName, 'thief'), 'thief.yaml', { environ: { HF_TOKEN: 'placeholder' } });
    const thiefInput: RunInput = { ...stolenInput, plan: { ...thiefPlan, env: { HF_TOKEN: stolen }, secret_env: ['HF_TOKEN'] } };
    await env.client.workflow.start('RunWorkflow', { taskQueue: env.worker.taskQueue, workflowId: runWorkflowId(thiefName), args: [thiefInput] });
    const thief = await env.troupe.run(thiefName).wait();
    expect(thief.status).toBe('FAILED');
    expect(JSON.stringify(thief)).toMatch(/does not open for run run\/thief-/);
    expect(existsSync(join(shared.dir, 'thief'))).toBe(false);

    // 2. The victim's own workflow id, reused once the victim has closed, with its input copied whole.
    rmSync(join(shared.dir, 'victim'));
    await env.client.workflow.start('RunWorkflow', { taskQueue: env.worker.taskQueue, workflowId: victim.workflowId, args: [stolenInput] });
    const again = await env.troupe.run(victimName).wait();
    expect(again.status).toBe('FAILED');
    expect(JSON.stringify(again)).toMatch(/belongs to an earlier run of run\/victim-/);
    expect(existsSync(join(shared.dir, 'victim'))).toBe(false);
    expect(JSON.stringify(again)).not.toContain(token);
  });

  it('a run started in clear, by a client without the codec key, is refused by the worker and starts nothing', async () => {
    const tag = env.worker.taskQueue.slice(-8);
    const name = `clear-${tag}`;
    const plan = loadPlan(taskYaml(name, 'clear'), 'clear.yaml', { environ: { HF_TOKEN: 'plain' } });
    const input: RunInput = { plan, backend: 'local', options: RunOptionsSchema.parse({}), search_attributes: false };
    const connection = await Connection.connect({ address: temporalAddress() });
    try {
      const plainClient = new Client({ connection });
      const handle = await plainClient.workflow.start('RunWorkflow', { taskQueue: env.worker.taskQueue, workflowId: runWorkflowId(name), args: [input] });
      let failure = '';
      for (let i = 0; i < 100 && failure === ''; i++) {
        const history = await handle.fetchHistory();
        const failed = history.events?.find((e) => e.workflowTaskFailedEventAttributes);
        const attributes = failed?.workflowTaskFailedEventAttributes?.failure?.encodedAttributes;
        if (attributes) failure = (await decodedPayload<{ message: string }>(attributes as Payload)).message;
        if (failure === '') await new Promise((r) => setTimeout(r, 200));
      }
      expect(failure).toMatch(/refused an unencrypted payload \(encoding "json\/plain"\)/);
      await handle.terminate('test over');
    } finally {
      await connection.close();
    }
    expect(existsSync(join(shared.dir, 'clear'))).toBe(false);
  });
});

import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import type { RunInput } from '../../src/contract/message-schemas';
import { temporalAddress } from '../helpers/temporal';
import { kill9, startWorkerProcess, useWorkerProcesses } from '../helpers/worker-process-control';

/**
 * Issue 37, part 5: the binding of a sealed value to its run is shared by every worker of a
 * namespace. Two worker processes with one secret key but a binding directory each stand for two
 * machines: a value copied from a closed run into a later run of its workflow id is refused by
 * the machine that never saw it, and a run's own value opens there.
 */

const env = useWorkerProcesses('seal-machines');
const keyDir = mkdtempSync(join(tmpdir(), 'troupe-seal-machines-key-'));
const machine2State = mkdtempSync(join(tmpdir(), 'troupe-seal-machines-2-'));
const saved = process.env.TROUPE_SECRET_KEY_FILE;
let troupe: TroupeClient;

beforeAll(() => {
  // Read by the submitting side here and inherited by both workers: one key, as the README asks.
  process.env.TROUPE_SECRET_KEY_FILE = join(keyDir, 'secret.key');
  troupe = new TroupeClient(env.client, { taskQueue: env.taskQueue, address: temporalAddress() });
});
afterAll(() => {
  rmSync(keyDir, { recursive: true, force: true });
  rmSync(machine2State, { recursive: true, force: true });
  if (saved === undefined) delete process.env.TROUPE_SECRET_KEY_FILE;
  else process.env.TROUPE_SECRET_KEY_FILE = saved;
});

/** A worker on a machine of its own: its own local fleet and its own (empty) binding record. */
async function machine(stateDir: string, bindings: string): Promise<ChildProcess> {
  const child = await startWorkerProcess({ taskQueue: env.taskQueue, localStateDir: stateDir, env: { TROUPE_SEAL_BINDINGS_DIR: join(keyDir, bindings) } });
  env.workers.push(child);
  return child;
}

async function inputOf(workflowId: string): Promise<RunInput> {
  const history = await env.client.workflow.getHandle(workflowId).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  const [plain] = await new EncryptionCodec(loadCodecKeyring({ create: false })).decode([payload as Payload]);
  return defaultPayloadConverter.fromPayload(plain as Payload);
}

function taskYaml(name: string, file: string): string {
  return ['type: task', `name: ${name}`, 'env:', '  - HF_TOKEN', 'commands:', `  - printf %s "$HF_TOKEN" > ${env.shared.dir}/${file}`, ''].join('\n');
}

describe('workers on two machines', () => {
  const victimName = `victim-${env.taskQueue.slice(-8)}`;
  const token = `hf_${randomBytes(18).toString('hex')}`;

  it('the machine that never saw a value refuses it in a later run reusing the closed victim id', async () => {
    const worker1 = await machine(env.fleet.stateDir, 'bindings-1');
    const victim = await troupe.submit({ yaml: taskYaml(victimName, 'victim'), environ: { HF_TOKEN: token }, options: { stop_grace_s: 1 } });
    expect((await victim.wait()).status).toBe('DONE');
    expect(env.shared.lines('victim')).toEqual([token]);
    await kill9(worker1);

    await machine(machine2State, 'bindings-2');
    const stolenInput = await inputOf(victim.workflowId);
    rmSync(join(env.shared.dir, 'victim'));
    await env.client.workflow.start('RunWorkflow', { taskQueue: env.taskQueue, workflowId: victim.workflowId, args: [stolenInput] });
    const again = await troupe.run(victimName).wait();
    expect(again.status).toBe('FAILED');
    expect(JSON.stringify(again)).toMatch(/env HF_TOKEN: this sealed value belongs to an earlier run of run\/victim-[^ ]+ \(execution /);
    expect(JSON.stringify(again)).not.toContain(token);
    expect(existsSync(join(env.shared.dir, 'victim'))).toBe(false);
  });

  it('a run submitted again under that id opens its own value on the second machine (the earlier runs carry other seals)', async () => {
    const resubmitted = await troupe.submit({ yaml: taskYaml(victimName, 'again'), environ: { HF_TOKEN: token }, options: { stop_grace_s: 1 } });
    expect((await resubmitted.wait()).status).toBe('DONE');
    expect(env.shared.lines('again')).toEqual([token]);
  });
});

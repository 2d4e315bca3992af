import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { historiesText } from '../helpers/history-text';
import { makeLocalFleet, makeSharedDir } from '../helpers/local-fleet';
import { useLocalTroupe } from '../helpers/local-troupe';

/**
 * Secret env values (`- HF_TOKEN` from the shell, names like *_API_KEY) reach the node and nothing
 * else: not the workflow history of the run or of its groups, not its state, not its messages.
 */

const fleet = makeLocalFleet('troupe-secrets-');
const shared = makeSharedDir('troupe-secrets-shared-');
const keyDir = mkdtempSync(join(tmpdir(), 'troupe-secret-key-'));
const previousKeyFile = process.env.TROUPE_SECRET_KEY_FILE;
const env = useLocalTroupe(fleet, {
  setup: () => {
    process.env.TROUPE_SECRET_KEY_FILE = join(keyDir, 'secret.key');
  },
  cleanup: () => {
    shared.remove();
    rmSync(keyDir, { recursive: true, force: true });
    if (previousKeyFile === undefined) delete process.env.TROUPE_SECRET_KEY_FILE;
    else process.env.TROUPE_SECRET_KEY_FILE = previousKeyFile;
  },
});

/** Every event of the run and of its group children, payloads decrypted (what a key holder sees), as one text. */
async function fullHistory(runWorkflowId: string): Promise<string> {
  const { workflows, text } = await historiesText(env.client, runWorkflowId, new EncryptionCodec(loadCodecKeyring({ create: false }), { unencrypted: 'pass' }));
  expect(workflows).toBeGreaterThanOrEqual(3);
  return text;
}

describe('secrets', () => {
  it('reach the node but never the history, the state or the messages', async () => {
    const token = `hf_${randomBytes(18).toString('hex')}`;
    const apiKey = `key-${randomBytes(18).toString('hex')}`;
    const marked = `canary-${randomBytes(18).toString('hex')}`;
    const yaml = [
      'type: task',
      `name: secrets-${env.worker.taskQueue.slice(-8)}`,
      'env:',
      '  - HF_TOKEN',
      `  - SERVICE_API_KEY=${apiKey}`,
      '  - MODEL_ID=plain-value',
      `  - DB_ENDPOINT=${marked}`,
      'secret_env: [DB_ENDPOINT]',
      'groups:',
      '  - name: a',
      '    commands:',
      `      - printf %s "$HF_TOKEN" > ${shared.dir}/token-$DSTACK_NODE_RANK`,
      `      - printf %s "$SERVICE_API_KEY" > ${shared.dir}/key-$DSTACK_NODE_RANK`,
      `      - printf %s "$DB_ENDPOINT" > ${shared.dir}/marked-$DSTACK_NODE_RANK`,
      '  - name: b',
      '    commands:',
      `      - printf %s "$HF_TOKEN" > ${shared.dir}/token-$DSTACK_NODE_RANK`,
      '      - exit 7',
      '',
    ].join('\n');
    const handle = await env.troupe.submit({ yaml, environ: { HF_TOKEN: token }, options: { stop_grace_s: 1 } });
    const state = await handle.wait();
    expect(state.status).toBe('FAILED');
    expect(shared.lines('token-0')).toEqual([token]);
    expect(shared.lines('key-0')).toEqual([apiKey]);
    expect(shared.lines('marked-0')).toEqual([marked]);
    expect(shared.lines('token-1')).toEqual([token]);

    const history = await fullHistory(handle.workflowId);
    expect(history).toContain('plain-value');
    expect(history).toContain('sealed:v3:');
    expect(history).not.toContain(token);
    expect(history).not.toContain(apiKey);
    expect(history).not.toContain(marked);
    const stateText = JSON.stringify(await handle.state());
    expect(stateText).not.toContain(token);
    expect(stateText).not.toContain(apiKey);
    expect(state.message ?? '').not.toContain(token);
  });

  it('a plain value that happens to start with the sealed prefix reaches the job byte for byte', async () => {
    const literal = 'sealed:v1:not-a-secret';
    const yaml = [
      'type: task',
      `name: literal-${env.worker.taskQueue.slice(-8)}`,
      'env:',
      `  - NOTE=${literal}`,
      'commands:',
      `  - printf %s "$NOTE" > ${shared.dir}/note-$DSTACK_NODE_RANK`,
      '',
    ].join('\n');
    const state = await (await env.troupe.submit({ yaml, options: { stop_grace_s: 1 } })).wait();
    expect(state.status).toBe('DONE');
    expect(shared.lines('note-0')).toEqual([literal]);
  });
});

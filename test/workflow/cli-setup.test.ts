import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Client } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { searchAttributes } from '../../src/devserver/dev-server';
import { temporalAddress, testClient } from '../helpers/temporal';

/**
 * `troupe setup` as a user runs it (the real CLI in a child process) against the dev server: a
 * no-op on the default namespace (the dev server registered the attributes), registration in a
 * fresh namespace, idempotence, and a refusal that names an attribute of the wrong type.
 */

const cli = fileURLToPath(new URL('../../bin/troupe.js', import.meta.url));
/** IndexedValueType numbers of the Temporal API. */
const KEYWORD = 2;
const TEXT = 1;
const KEYWORD_LIST = 7;
const expectedTypes = Object.fromEntries(
  Object.entries(searchAttributes).map(([name, type]) => [name, type === 'KeywordList' ? KEYWORD_LIST : KEYWORD]),
);

let client: Client;
let closeClient: () => Promise<void>;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
});
afterAll(async () => {
  await closeClient?.();
});

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function troupeSetup(args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, 'setup', ...args], {
      env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TEMPORAL_NAMESPACE: '', NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function customAttributes(namespace: string): Promise<Record<string, number>> {
  const response = await client.connection.operatorService.listSearchAttributes({ namespace });
  return Object.fromEntries(Object.entries(response.customAttributes ?? {}).map(([name, type]) => [name, Number(type)]));
}

/** A new namespace, usable once the frontend knows it. */
async function freshNamespace(prefix: string): Promise<string> {
  const namespace = `${prefix}-${randomUUID().slice(0, 8)}`;
  await client.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('1 day') });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await client.connection.operatorService.listSearchAttributes({ namespace });
      return namespace;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** The service's reason for refusing (the SDK wraps it), or null if it did not refuse. */
async function refusal(call: Promise<unknown>): Promise<string | null> {
  try {
    await call;
    return null;
  } catch (err) {
    return err instanceof Error ? `${err.message}: ${err.cause instanceof Error ? err.cause.message : ''}` : String(err);
  }
}

function stateColumn(stdout: string): Record<string, string> {
  const rows = stdout.split('\n').map((line) => line.trim().split(/\s{2,}/));
  return Object.fromEntries(rows.filter(([name]) => name !== undefined && name in searchAttributes).map(([name, , state]) => [name, state]));
}

describe('troupe setup', () => {
  it('is a no-op on the default namespace, where the dev server registered the attributes', async () => {
    const before = await customAttributes('default');
    const result = await troupeSetup([]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`namespace "default" at ${temporalAddress()}`);
    expect(stateColumn(result.stdout)).toEqual(Object.fromEntries(Object.keys(searchAttributes).map((n) => [n, 'already registered'])));
    expect(await customAttributes('default')).toEqual(before);
  });

  it('registers the attributes in a fresh namespace (TEMPORAL_NAMESPACE), then leaves them as they are', async () => {
    const namespace = await freshNamespace('troupe-setup');
    const scoped = new Client({ connection: client.connection, namespace, dataConverter: client.options.dataConverter });
    expect(await refusal(scoped.workflow.count('TroupeRunStatus="RUNNING"'))).toMatch(/TroupeRunStatus/);

    const first = await troupeSetup([], { TEMPORAL_NAMESPACE: namespace });
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(stateColumn(first.stdout)).toEqual(Object.fromEntries(Object.keys(searchAttributes).map((n) => [n, 'registered'])));
    expect(await customAttributes(namespace)).toMatchObject(expectedTypes);
    // The UI's filter now works in that namespace.
    expect((await scoped.workflow.count('TroupeRunStatus="RUNNING" AND TroupeGroups="prefill"')).count).toBe(0);

    const again = await troupeSetup(['--namespace', namespace], { TEMPORAL_NAMESPACE: 'default-is-not-used' });
    expect(again.code).toBe(0);
    expect(stateColumn(again.stdout)).toEqual(Object.fromEntries(Object.keys(searchAttributes).map((n) => [n, 'already registered'])));
  });

  it('refuses an attribute registered with another type, names it, and changes nothing', async () => {
    const namespace = await freshNamespace('troupe-setup-conflict');
    await client.connection.operatorService.addSearchAttributes({ namespace, searchAttributes: { TroupeRunStatus: TEXT } });
    const result = await troupeSetup(['--namespace', namespace]);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(`search attribute TroupeRunStatus is registered as Text in namespace "${namespace}", but Troupe needs Keyword`);
    expect(result.stderr).not.toMatch(/TroupeRunName|TroupeFleet|TroupeGroups/);
    const after = await customAttributes(namespace);
    expect(after.TroupeRunStatus).toBe(TEXT);
    for (const name of ['TroupeRunName', 'TroupeFleet', 'TroupeGroups']) expect(after[name]).toBeUndefined();
  });

  it('names a namespace that does not exist', async () => {
    const result = await troupeSetup(['--namespace', 'no-such-namespace']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('namespace "no-such-namespace" was not found');
  });
});

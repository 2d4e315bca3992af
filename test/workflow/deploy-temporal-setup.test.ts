import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { defaultDevServerOptions, projectRoot, searchAttributes } from '../../src/devserver/dev-server';
import { temporalAddress, testClient } from '../helpers/temporal';

/**
 * deploy/temporal-setup.sh, the compose stack's one-shot set-up, run for real: with the Temporal
 * CLI of this project and the environment docker-compose.yml gives it, against the test dev server,
 * on fresh namespaces. It must leave Troupe's search attributes registered with their types.
 */

const script = join(projectRoot, 'deploy', 'temporal-setup.sh');
const temporalBin = defaultDevServerOptions().temporalBin;

/**
 * The set-up service's environment as docker-compose.yml declares it, without its TLS files: they
 * live on the compose stack's certificate volume, and the test dev server speaks plain gRPC (the
 * mTLS frontend is run for real by test/deploy/production-deployment.test.ts).
 */
function composeSetupEnv(): Record<string, string> {
  const doc = parse(readFileSync(join(projectRoot, 'docker-compose.yml'), 'utf8')) as {
    services: Record<string, { environment?: Record<string, string> }>;
  };
  const env = doc.services['temporal-setup']?.environment;
  if (env === undefined) throw new Error('docker-compose.yml: temporal-setup has no environment');
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith('TEMPORAL_TLS_')));
}

/** Runs the script with `sh` (dash here: POSIX only, as in the admin-tools image). */
function runSetup(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn('sh', [script], {
      env: { PATH: `${dirname(temporalBin)}:${process.env.PATH ?? ''}`, HOME: process.env.HOME ?? '/tmp', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.once('exit', (code) => resolve({ code, output }));
  });
}

const created: string[] = [];
afterAll(async () => {
  // Namespaces of this test only; the dev server is in memory and goes with the test run anyway.
  for (const namespace of created) {
    await new Promise((r) =>
      spawn(temporalBin, ['operator', 'namespace', 'delete', '--address', temporalAddress(), '--namespace', namespace, '--yes'], {
        stdio: 'ignore',
      }).once('exit', r),
    );
  }
});

function freshNamespace(): string {
  const namespace = `deploy-setup-${randomUUID().slice(0, 8)}`;
  created.push(namespace);
  return namespace;
}

/** IndexedValueType numbers of the Temporal API, by the CLI's type names. */
const indexedValueType: Record<string, number> = { Text: 1, Keyword: 2, Int: 3, Double: 4, Bool: 5, Datetime: 6, KeywordList: 7 };

async function customAttributes(namespace: string): Promise<Record<string, number>> {
  const { client, close } = await testClient();
  try {
    const response = await client.connection.operatorService.listSearchAttributes({ namespace });
    return response.customAttributes;
  } finally {
    await close();
  }
}

describe('deploy/temporal-setup.sh', () => {
  it("creates the namespace and registers the dev server's search attributes, and can run again", async () => {
    const namespace = freshNamespace();
    const env = { ...composeSetupEnv(), TEMPORAL_ADDRESS: temporalAddress(), TEMPORAL_NAMESPACE: namespace, TROUPE_SETUP_WAIT_SECONDS: '30' };

    const first = await runSetup(env);
    expect(first.code, first.output).toBe(0);
    expect(first.output).toContain(`namespace ${namespace} created`);
    const registered = await customAttributes(namespace);
    for (const [name, type] of Object.entries(searchAttributes)) {
      expect(registered[name], `${name} in ${JSON.stringify(registered)}`).toBe(indexedValueType[type]);
    }

    const again = await runSetup(env);
    expect(again.code, again.output).toBe(0);
    expect(again.output).toContain(`namespace ${namespace} exists`);
    expect(again.output.match(/already registered/g)).toHaveLength(Object.keys(searchAttributes).length);
  });

  it('fails, naming the attribute, when one exists with another type', async () => {
    const namespace = freshNamespace();
    const base = { TEMPORAL_ADDRESS: temporalAddress(), TEMPORAL_NAMESPACE: namespace };
    expect((await runSetup({ ...base, TROUPE_SEARCH_ATTRIBUTES: 'TroupeRunName=Text' })).code).toBe(0);

    const r = await runSetup({ ...base, TROUPE_SEARCH_ATTRIBUTES: composeSetupEnv().TROUPE_SEARCH_ATTRIBUTES ?? '' });
    expect(r.code).toBe(1);
    expect(r.output).toContain(`could not register TroupeRunName as Keyword in namespace ${namespace}`);
  });

  it('refuses a malformed attribute list before it touches the service', async () => {
    const r = await runSetup({ TEMPORAL_ADDRESS: temporalAddress(), TROUPE_SEARCH_ATTRIBUTES: 'TroupeRunName=Keyword TroupeRunName' });
    expect(r.code).toBe(2);
    expect(r.output).toContain('bad entry "TroupeRunName"');
  });

  it('gives up with a message when no service answers', async () => {
    const r = await runSetup({ TEMPORAL_ADDRESS: '127.0.0.1:1', TROUPE_SEARCH_ATTRIBUTES: 'X=Keyword', TROUPE_SETUP_WAIT_SECONDS: '2' });
    expect(r.code).toBe(1);
    expect(r.output).toContain('gave up after 2s waiting for a healthy service at 127.0.0.1:1');
  });
});

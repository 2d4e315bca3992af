import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, troupeCli, watchJobFiles, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * The seed's PD-disaggregation sample across three SSH hosts, as a user runs it: `troupe fleet
 * apply` on examples/pd-disagg-ssh-fleet.yml (addresses and key of the test hosts), then `troupe
 * apply` on examples/pd-disagg-ssh.yml. The router starts once prefill and decode answer /health
 * (they "load" for 2 s and refuse requests until then), and its one request must succeed.
 */

const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
const taskFile = fileURLToPath(new URL('../../examples/pd-disagg-ssh.yml', import.meta.url));
const fleetFile = fileURLToPath(new URL('../../examples/pd-disagg-ssh-fleet.yml', import.meta.url));

let env: SshFleetEnv;
/** Fleets made here, deleted at the end even when a test failed half-way. */
const fleetsMade: string[] = [];
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'cpu' }, { name: 'l40s-a', gpus: L40S }, { name: 'l40s-b', gpus: L40S }]);
  // No known_hosts knows the test hosts: their keys are pinned at first contact.
  process.env.TROUPE_KNOWN_HOSTS = join(env.dir, 'known_hosts-empty');
});

afterAll(async () => {
  for (const name of fleetsMade) await env?.fleets.delete(name, { force: true }).catch(() => undefined);
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
});

/** The example fleet with the test hosts' addresses, user and key in place of the placeholders. */
function exampleFleet(name: string): string {
  const fleet = parse(readFileSync(fleetFile, 'utf8')) as { name: string; placement: string; ssh_config: Record<string, unknown> };
  expect(fleet.placement).toBe('cluster');
  const ours = parse(fleetYaml(env, name, ['cpu', 'l40s-a', 'l40s-b'])) as { ssh_config: Record<string, unknown> };
  const file = join(env.dir, `${name}.yml`);
  writeFileSync(file, stringify({ ...fleet, name, ssh_config: { ...fleet.ssh_config, ...ours.ssh_config } }));
  return file;
}

describe('the PD sample on an SSH fleet of three hosts', () => {
  it('places router, prefill and decode on their hosts, wires them, and starts the router on readiness', async () => {
    const fleet = `pd-ssh-${env.taskQueue.slice(-8)}`;
    fleetsMade.push(fleet);
    const run = `pd-ssh-run-${env.taskQueue.slice(-8)}`;
    const [cpu, a, b] = ['cpu', 'l40s-a', 'l40s-b'].map((n) => env.hosts.host(n));
    if (!cpu || !a || !b) throw new Error('hosts missing');

    // troupe fleet apply: every host probed, keys pinned and shown.
    const applied = await troupeCli(env, ['fleet', 'apply', '-f', exampleFleet(fleet)]);
    expect(applied.stderr).not.toMatch(/Error|error:/);
    expect(applied.code).toBe(0);
    for (const host of [cpu, a, b]) {
      const row = applied.stdout.split('\n').find((line) => line.includes(`root@${host.address} `));
      expect(row, `row of ${host.address} in\n${applied.stdout}`).toBeDefined();
      expect(row).toContain(`${host.hostKeyFingerprint} (PINNED at first contact)`);
      expect(row).toMatch(/\bidle$/);
      expect(row).toContain(host === cpu ? '  -  ' : '1×L40S (45GB)');
    }
    expect(applied.stdout).toContain('3 host key(s) were PINNED at first contact');
    expect(applied.stdout).toContain(`root@${a.address}: ${a.hostKeyFingerprint} — on the host: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`);

    // troupe apply: the plan with the placement preview, then the run, followed to its end.
    const watcher = watchJobFiles(env, ['cpu', 'l40s-a', 'l40s-b']);
    const started = Date.now();
    const result = await troupeCli(env, ['apply', '-f', taskFile, '--fleet', fleet, '--name', run, '-y']);
    const applyMs = Date.now() - started;
    watcher.stop();
    expect(result.code, `${result.stderr}\n${result.stdout}`).toBe(0);
    expect(result.stderr).toContain(`Placement on fleet ${fleet}`);
    expect(result.stderr).toMatch(new RegExp(`0\\s+router/0\\s+root@${cpu.address.replaceAll('.', '\\.')}\\s`));
    // Either L40S host may take either group; both are on the run's own /24.
    const l40s = `(?:${['l40s-a', 'l40s-b'].map((h) => env.hosts.host(h).address.replaceAll('.', '\\.')).join('|')})`;
    expect(result.stderr).toMatch(new RegExp(`1\\s+prefill/0\\s+root@${l40s}\\s+${l40s}\\s+1×L40S`));
    expect(result.stderr).toMatch(new RegExp(`2\\s+decode/0\\s+root@${l40s}\\s+${l40s}\\s+1×L40S`));

    const state = await env.troupe.run(run).state();
    expect(state.status).toBe('DONE');
    expect(state.termination_reason).toBe('ALL_JOBS_DONE');
    const [router, prefill, decode] = state.jobs;
    if (!router || !prefill || !decode) throw new Error('jobs missing');
    expect(router.instance?.internal_ip).toBe(cpu.address);
    expect(new Set([prefill.instance?.internal_ip, decode.instance?.internal_ip])).toEqual(new Set([a.address, b.address]));
    expect(router.exit_code).toBe(0);
    // Readiness: the router started only after both workers answered /health.
    expect(prefill.ready_at).not.toBeNull();
    expect(decode.ready_at).not.toBeNull();
    const routerStart = Date.parse(router.running_at ?? '');
    expect(routerStart).toBeGreaterThanOrEqual(Date.parse(prefill.ready_at ?? ''));
    expect(routerStart).toBeGreaterThanOrEqual(Date.parse(decode.ready_at ?? ''));
    // …which is at least the 2 s the workers take to load after they start.
    expect(routerStart - Date.parse(prefill.running_at ?? '')).toBeGreaterThanOrEqual(2_000);

    // Each node's environment and MPI hostfile, exactly.
    const ips = [cpu.address, prefill.instance?.internal_ip ?? '', decode.instance?.internal_ip ?? ''];
    const hostfile = `${ips[0]}\n${ips[1]} slots=1\n${ips[2]} slots=1\n`;
    const files = [router, prefill, decode].map((job) => {
      const seen = watcher.seen.get(job.job_name);
      if (!seen) throw new Error(`the files of ${job.job_name} were never seen (seen: ${[...watcher.seen.keys()].join(', ')})`);
      return seen;
    });
    files.forEach((seen, rank) => {
      const job = state.jobs[rank];
      expect(seen.hostfile).toBe(hostfile);
      const dstack = Object.fromEntries(Object.entries(seen.env).filter(([k]) => k.startsWith('DSTACK_')));
      expect(dstack).toEqual({
        DSTACK_RUN_NAME: run,
        DSTACK_RUN_ID: state.run_uid,
        DSTACK_NODE_RANK: String(rank),
        DSTACK_NODES_NUM: '3',
        DSTACK_MASTER_NODE_IP: cpu.address,
        DSTACK_NODES_IPS: ips.join('\n'),
        DSTACK_GPUS_PER_NODE: rank === 0 ? '0' : '1',
        DSTACK_GPUS_NUM: '2',
        DSTACK_MPI_HOSTFILE: join(seen.dir, 'hostfile'),
        DSTACK_NODE_GROUP_NAME: job?.group_name,
        DSTACK_NODE_GROUP_INDEX: String(rank),
        DSTACK_NODE_GROUP_NODE_RANK: '0',
        DSTACK_NODE_GROUP_NODES_NUM: '1',
      });
      expect(seen.env.MODEL_ID).toBe('meta-llama/Llama-3.2-3B-Instruct');
    });
    // The router's log, followed by `troupe apply`: the wiring through both workers.
    expect(result.stdout).toContain(`prefill=${ips[1]}`);
    expect(result.stdout).toContain(`decode=${ips[2]}`);
    expect(result.stdout).toContain('router: prefill prefill/0 -> decode decode/0: Hello, world');

    const runMs = Date.parse(state.finished_at ?? '') - Date.parse(state.submitted_at);
    console.log(`PD sample over SSH: run ${runMs} ms from submission to DONE; \`troupe apply\` ${applyMs} ms; \`troupe fleet apply\` ${applied.ms} ms`);

    await expectAllClean(env, fleet);

    // troupe fleet show / list / delete.
    const shown = await troupeCli(env, ['fleet', 'show', fleet]);
    expect(shown.code).toBe(0);
    expect(shown.stdout.split('\n').filter((l) => /\bidle\s+-$/.test(l))).toHaveLength(3);
    const listed = await troupeCli(env, ['fleet', 'list']);
    expect(listed.stdout).toMatch(new RegExp(`${fleet}\\s+cluster\\s+3\\s+3\\s+0\\s+2`));
    const deleted = await troupeCli(env, ['fleet', 'delete', fleet, '-y']);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(await env.fleets.state(fleet)).toBeNull();
  });

  it('refuses to delete a fleet while a run holds its hosts, unless forced (which stops the run)', async () => {
    const fleet = `pd-hold-${env.taskQueue.slice(-8)}`;
    fleetsMade.push(fleet);
    await applyFleetYaml(env, fleetYaml(env, fleet, ['cpu']));
    const handle = await env.troupe.submit({
      yaml: ['type: task', 'name: holder', 'commands: [sleep 300]', 'resources: {cpu: 1.., disk: 1GB..}', ''].join('\n'),
      fleets: [fleet],
      runName: `hold-${env.taskQueue.slice(-8)}`,
      checkWorkers: false,
    });
    const deadline = Date.now() + 30_000;
    while ((await handle.state()).status !== 'RUNNING' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));

    const refused = await troupeCli(env, ['fleet', 'delete', fleet, '-y']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`fleet ${fleet} has hosts held by run(s) ${handle.name}`);
    expect(await env.fleets.state(fleet)).not.toBeNull();

    const forced = await troupeCli(env, ['fleet', 'delete', fleet, '--force', '-y']);
    expect(forced.code, forced.stderr).toBe(0);
    const final = await handle.wait();
    expect(final.status).toBe('TERMINATED');
    expect(await env.fleets.state(fleet)).toBeNull();
    await expectAllClean(env, null);
  });
});

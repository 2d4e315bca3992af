import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { Plan } from '../../src/plan/plan-schema';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { useLocalTroupe } from '../helpers/local-troupe';

/** `stop_criteria: {group-done: GROUP}` (Troupe's extension) with real processes, the group last in the list. */

const fleet = makeLocalFleet();
const shared = makeSharedDir();
const env = useLocalTroupe(fleet, { cleanup: () => shared.remove() });

const start = (plan: Plan) => env.startRun(plan);

describe('stop_criteria group-done', () => {
  it('ends the run DONE once every node of the named (last) group is done; the others are stopped', async () => {
    const plan = makePlan(
      'group-done',
      [
        { name: 'head', nodes: 1, commands: ['sleep 300'] },
        { name: 'workers', nodes: 1, commands: ['sleep 300'] },
        // Node 0 is done at once, node 1 only once the test lets it: the run waits for both.
        { name: 'driver', nodes: 2, commands: [`if [ "$DSTACK_NODE_GROUP_NODE_RANK" = 1 ]; then until [ -e ${shared.dir}/go ]; do sleep 0.1; done; fi`] },
      ],
      { stop_criteria: 'group-done', stop_group: 2 },
    );
    const handle = await start(plan);
    const deadline = Date.now() + 60_000;
    let state: RunState = await handle.query(runStateQuery);
    while (!state.jobs.some((j) => j.group_name === 'driver' && j.exit_code === 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      state = await handle.query(runStateQuery);
    }
    expect(state.jobs.filter((j) => j.exit_code === 0).map((j) => `${j.group_name}/${j.group_job_index}`)).toEqual(['driver/0']);
    // One node of the group done is not the group done.
    await new Promise((r) => setTimeout(r, 1000));
    expect((await handle.query(runStateQuery)).status).toBe('RUNNING');
    writeFileSync(`${shared.dir}/go`, '');
    const end = (await handle.result()) as RunState;
    expect(end.status).toBe('DONE');
    expect(end.jobs.map((j) => [j.group_name, j.status])).toEqual([
      ['head', 'TERMINATED'],
      ['workers', 'TERMINATED'],
      ['driver', 'DONE'],
      ['driver', 'DONE'],
    ]);
  });
});

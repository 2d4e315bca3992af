import { describe, expect, it } from 'vitest';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { renderJobFiles } from '../../src/runner/job-files';
import { job, runView } from './runner-fixtures';

const routerCommands = [
  'echo "prefill=${{ groups[1].nodes[0].IP_ADDRESS }}"\necho "decode=${{groups[2].nodes[1].IP_ADDRESS}}"',
  'echo literal $${{ groups[9].nodes[9].IP_ADDRESS }}',
];
const ips = ['10.213.0.2', '10.213.0.3', '10.213.0.4', '10.213.0.5'];
const addresses = [['10.213.0.2'], ['10.213.0.3'], ['10.213.0.4', '10.213.0.5']];

describe('renderJobFiles', () => {
  it('interpolates the group\'s commands with the address book and writes env and hostfile', () => {
    const files = renderJobFiles({
      run: runView({ env: { MODEL_ID: 'm' }, working_dir: 'app', image: 'lmsysorg/sglang:latest' }),
      runUid: 'uid-7',
      job: job(0, 0, 'router', 0, routerCommands),
      cluster: buildClusterInfo(ips, [0, 1, 1, 1], 0),
      addresses,
      jobDirectory: '/state/runs/uid-7/0/pd-disagg-0-0/',
    });
    expect(files.script).toContain('echo "prefill=10.213.0.3"\necho "decode=10.213.0.5"');
    expect(files.script).toContain('echo literal ${{ groups[9].nodes[9].IP_ADDRESS }}');
    expect(files.script).toContain("cd -- 'app'");
    expect(files.hostfile).toBe('10.213.0.2\n10.213.0.3 slots=1\n10.213.0.4 slots=1\n10.213.0.5 slots=1\n');
    expect(files.env).toMatchObject({
      DSTACK_RUN_ID: 'uid-7',
      DSTACK_NODE_RANK: '0',
      DSTACK_GPUS_PER_NODE: '0',
      DSTACK_GPUS_NUM: '3',
      DSTACK_MPI_HOSTFILE: '/state/runs/uid-7/0/pd-disagg-0-0/hostfile',
      DSTACK_NODE_GROUP_NAME: 'router',
      DSTACK_NODE_GROUP_NODES_NUM: '1',
      MODEL_ID: 'm',
    });
  });

  it('counts the nodes of the job\'s own group', () => {
    const files = renderJobFiles({
      run: runView(),
      runUid: 'u',
      job: job(3, 2, 'decode', 1, ['true']),
      cluster: buildClusterInfo(ips, [0, 1, 1, 1], 3),
      addresses,
      jobDirectory: '/j',
    });
    expect(files.env.DSTACK_NODE_GROUP_NODES_NUM).toBe('2');
    expect(files.env.DSTACK_NODE_GROUP_NODE_RANK).toBe('1');
    expect(files.env.DSTACK_GPUS_PER_NODE).toBe('1');
  });

  it('names the job and command when an address is missing, never an empty string', () => {
    const render = () =>
      renderJobFiles({
        run: runView(),
        runUid: 'u',
        job: job(0, 0, 'router', 0, ['true', 'curl ${{ groups[2].nodes[2].IP_ADDRESS }}']),
        cluster: buildClusterInfo(ips, [], 0),
        addresses,
        jobDirectory: '/j',
      });
    expect(render).toThrow('pd-disagg-0-0: commands[1] of group router: no address for groups[2].nodes[2]');
  });
});

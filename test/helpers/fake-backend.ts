import type { Backend } from '../../src/backends/backend';

const notUsed = (): never => {
  throw new Error('not used by this test');
};

/** A backend for activity tests: the given methods, every other one throws if called. */
export function fakeBackend(parts: Partial<Backend>): Backend {
  return {
    kind: 'fake',
    groupProvisioning: false,
    provision: notUsed,
    room: notUsed,
    jobDirectory: notUsed,
    runnerReady: notUsed,
    startJob: notUsed,
    jobState: notUsed,
    stopJob: notUsed,
    releaseRun: notUsed,
    readLog: notUsed,
    releaseJob: notUsed,
    writePeers: notUsed,
    exec: notUsed,
    ...parts,
  };
}

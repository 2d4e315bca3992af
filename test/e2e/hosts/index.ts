export { createTestHosts } from './test-hosts';
export type { JobProcess, TestHost, TestHostSpec, TestHosts, TestNetwork } from './test-hosts';
export { jobDirOfTestHost, testHostsFleetYaml } from './fleet-of-hosts';

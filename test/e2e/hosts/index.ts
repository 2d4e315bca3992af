export { createTestHosts, BRIDGE, BRIDGE_ADDRESS } from './test-hosts';
export type { JobProcess, TestHost, TestHostSpec, TestHosts } from './test-hosts';

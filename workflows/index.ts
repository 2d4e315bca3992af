/** Every workflow a Troupe worker runs (the bundle's entry point). */
export { RunWorkflow } from './run/run-workflow';
export { NodeGroupWorkflow } from './node-group/node-group-workflow';
export { ReadJobLogWorkflow } from './run/read-log-workflow';
export { FleetWorkflow } from './fleet/fleet-workflow';

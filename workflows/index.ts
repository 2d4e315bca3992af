/** Every workflow a Troupe worker runs (the bundle's entry point). */
export { RunWorkflow } from './run-workflow';
export { NodeGroupWorkflow } from './node-group-workflow';
export { ReadJobLogWorkflow } from './read-log-workflow';
export { FleetWorkflow } from './fleet-workflow';

export { loadPlan, type LoadPlanOptions } from './load-plan';
export { MAX_TOTAL_NODES } from './input-size';
export { planToJson, PlanJsonSchema, resourcesToJson, type PlanJson } from './plan-json';
export { loadFleetConfig, type LoadFleetOptions } from '../config/fleet-config';
export type { FleetConfig, SshHost } from '../config/fleet-schema';
export { ConfigError } from '../config/errors';
export * from './plan-schema';
export { loadServicePlan, serviceSource } from './load-service-plan';
export * from './service-plan-schema';

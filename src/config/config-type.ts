import { describeValue, type ConfigSource } from './yaml-source';

/** The config kinds Troupe reads; dstack's others (dev-environment, gateway…) are refused. */
export type ConfigType = 'task' | 'service' | 'fleet';

const readBy: Record<ConfigType, string> = {
  task: '`troupe plan` and `troupe apply` take a task config',
  service: 'a service plan takes a service config',
  fleet: 'a fleet file takes a fleet config',
};

/** Refuses a config whose `type:` is not `expected`, saying what the file is and what was wanted. */
export function checkConfigType(source: ConfigSource, expected: ConfigType): void {
  const type = source.data.type;
  if (type === expected) return;
  if (type === undefined) {
    throw source.error(['type'], `missing \`type\`: add \`type: ${expected}\``);
  }
  if (type === 'service' && expected === 'task') {
    throw source.error(['type'], 'this is a service config: `troupe plan` checks services, but Troupe does not run them yet; expected `type: task`');
  }
  if (type === 'task' || type === 'service' || type === 'fleet') {
    throw source.error(['type'], `this is a ${type} config; ${readBy[expected]} (\`type: ${expected}\`)`);
  }
  if (typeof type === 'string' && ['dev-environment', 'gateway', 'volume', 'preset'].includes(type)) {
    throw source.error(['type'], `Troupe does not support dstack's \`type: ${type}\`; expected \`type: ${expected}\``);
  }
  throw source.error(['type'], `expected \`type: ${expected}\`, got ${describeValue(type)}`);
}

import { describeValue, type ConfigSource } from './yaml-source';

/** The config kinds Troupe reads; dstack's others (service, dev-environment, gateway…) are refused. */
export type ConfigType = 'task' | 'fleet';

const readBy: Record<ConfigType, string> = {
  task: '`troupe plan` and `troupe apply` take a task config',
  fleet: 'a fleet file takes a fleet config',
};

/** Refuses a config whose `type:` is not `expected`, saying what the file is and what was wanted. */
export function checkConfigType(source: ConfigSource, expected: ConfigType): void {
  const type = source.data.type;
  if (type === expected) return;
  if (type === undefined) {
    throw source.error(['type'], `missing \`type\`: add \`type: ${expected}\``);
  }
  if (type === 'task' || type === 'fleet') {
    throw source.error(['type'], `this is a ${type} config; ${readBy[expected]} (\`type: ${expected}\`)`);
  }
  if (typeof type === 'string' && ['service', 'dev-environment', 'gateway', 'volume', 'preset'].includes(type)) {
    throw source.error(['type'], `Troupe does not support dstack's \`type: ${type}\`; expected \`type: ${expected}\``);
  }
  throw source.error(['type'], `expected \`type: ${expected}\`, got ${describeValue(type)}`);
}

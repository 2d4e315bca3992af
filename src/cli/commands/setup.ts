import { parseArgs } from 'node:util';
import { isGrpcServiceError, type Client } from '@temporalio/client';
import { searchAttributes } from '../../devserver/dev-server';
import { CliError, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings, type ConnectionSettings } from '../connection';
import { renderTable } from '../render/table';
import { styleFor } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe setup [--address HOST:PORT] [--namespace NAME]',
  [
    "Registers Troupe's search attributes in a namespace of a Temporal service, so the Web UI can",
    'filter runs (TroupeRunStatus="RUNNING"). Safe to run again: what is registered already is left',
    'as it is. The embedded dev server registers them itself.',
  ].join('\n'),
  [['-h, --help', 'this help'], ...connectionHelp.filter(([flags]) => !/task-queue|ui-address/.test(flags))],
);

/** IndexedValueType numbers of the Temporal API, by the names the dev server's flags use. */
const indexedValueTypes: Record<string, number> = {
  Text: 1,
  Keyword: 2,
  Int: 3,
  Double: 4,
  Bool: 5,
  Datetime: 6,
  KeywordList: 7,
};

const typeName = (type: number): string =>
  Object.entries(indexedValueTypes).find(([, n]) => n === type)?.[0] ?? `type ${type}`;

type Outcome = 'registered' | 'already registered';

/** gRPC status codes met here. */
const NOT_FOUND = 5;
const ALREADY_EXISTS = 6;
const PERMISSION_DENIED = 7;
const UNIMPLEMENTED = 12;

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new CliError(`setup takes no arguments\n\n${help}`, 2);
  const settings = connectionSettings(values);
  const troupe = await connectClient(settings);
  try {
    const outcomes = await registerSearchAttributes(troupe.temporal, settings);
    const style = styleFor(process.stdout);
    const rows = Object.entries(searchAttributes).map(([name, type]) => [name, type, outcomes.get(name) ?? '']);
    process.stdout.write(
      [
        `Search attributes in namespace "${settings.namespace}" at ${settings.address}:`,
        ...renderTable(['NAME', 'TYPE', 'STATE'], rows, style),
        '',
      ].join('\n'),
    );
    return 0;
  } finally {
    await troupe.close();
  }
};

/**
 * Adds the attributes the namespace lacks, in one call. A name registered with another type is
 * an error: nothing is added then, since Temporal cannot change an attribute's type in place.
 */
async function registerSearchAttributes(client: Client, settings: ConnectionSettings): Promise<Map<string, Outcome>> {
  const { namespace } = settings;
  const wanted = Object.entries(searchAttributes).map(([name, type]) => {
    const value = indexedValueTypes[type];
    if (value === undefined) throw new Error(`unknown search attribute type ${type} for ${name}`);
    return { name, type, value };
  });
  const registered = await listRegistered(client, settings);
  const conflicts = wanted.filter(({ name, value }) => registered.has(name) && registered.get(name) !== value);
  if (conflicts.length > 0) {
    throw new CliError(
      conflicts
        .map(
          ({ name, type }) =>
            `search attribute ${name} is registered as ${typeName(registered.get(name) ?? 0)} in namespace "${namespace}", ` +
            `but Troupe needs ${type}`,
        )
        .concat(
          'Nothing was changed. Remove it (`temporal operator search-attribute remove --name NAME`) or use another namespace.',
        )
        .join('\n'),
    );
  }
  const missing = wanted.filter(({ name }) => !registered.has(name));
  const outcomes = new Map<string, Outcome>(
    wanted.map(({ name }) => [name, missing.some((m) => m.name === name) ? 'registered' : 'already registered']),
  );
  if (missing.length === 0) return outcomes;
  try {
    await client.connection.operatorService.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(missing.map(({ name, value }) => [name, value])),
    });
  } catch (err) {
    // Another `troupe setup` may have added them meanwhile: the check below decides.
    if (!(isGrpcServiceError(err) && err.code === ALREADY_EXISTS)) throw serviceError(err, settings, 'add search attributes');
  }
  const after = await listRegistered(client, settings);
  const absent = missing.filter(({ name, value }) => after.get(name) !== value);
  if (absent.length > 0) {
    throw new CliError(
      `the service accepted the request, but ${absent.map((a) => a.name).join(', ')} ` +
        `${absent.length === 1 ? 'is' : 'are'} not registered in namespace "${namespace}" as asked; run \`troupe setup\` again`,
    );
  }
  return outcomes;
}

/** Custom search attributes of the namespace, by name (system attributes cannot be redefined either). */
async function listRegistered(client: Client, settings: ConnectionSettings): Promise<Map<string, number>> {
  try {
    const response = await client.connection.operatorService.listSearchAttributes({ namespace: settings.namespace });
    return new Map([...Object.entries(response.systemAttributes ?? {}), ...Object.entries(response.customAttributes ?? {})]);
  } catch (err) {
    throw serviceError(err, settings, 'list search attributes');
  }
}

function serviceError(err: unknown, settings: ConnectionSettings, what: string): CliError {
  const message = err instanceof Error ? err.message : String(err);
  if (isGrpcServiceError(err)) {
    if (err.code === NOT_FOUND) {
      return new CliError(
        `namespace "${settings.namespace}" was not found at ${settings.address}: create it first ` +
          `(\`temporal operator namespace create --namespace ${settings.namespace}\`) or pick another with --namespace`,
      );
    }
    if (err.code === PERMISSION_DENIED || err.code === UNIMPLEMENTED) {
      const list = Object.entries(searchAttributes).map(([name, type]) => `${name}=${type}`).join(', ');
      return new CliError(
        `the service at ${settings.address} does not let this client ${what} (${message}).\n` +
          `Register them with the service's own tools (on Temporal Cloud, its CLI or web console): ${list}`,
      );
    }
  }
  return new CliError(`could not ${what} in namespace "${settings.namespace}" at ${settings.address}: ${message}`);
}

import { parseArgs } from 'node:util';
import { startGateway } from '../../gateway/gateway';
import { parseListenAddress } from '../../metrics/metrics-server';
import { CliError, type Command } from '../command';
import { GATEWAY_TOKEN_ENV, readGatewayAdminToken } from '../gateway-admin';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  listen: { type: 'string' },
  admin: { type: 'string' },
  domain: { type: 'string' },
  state: { type: 'string' },
  'admin-token-file': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const help = renderUsage(
  'troupe gateway --listen HOST:PORT --admin HOST:PORT [--domain DOMAIN] [--state FILE] [--admin-token-file FILE]',
  [
    "Serves every service of a namespace on one address: /services/<run>/… and, with --domain, Host",
    '<run>.<domain>. Each service\'s routing table (replicas, auth, rate limits) is pushed to the admin API',
    '(PUT /services/<run>); the gateway never asks Temporal anything while it serves.',
  ].join('\n'),
  [
    ['--listen HOST:PORT', 'where requests arrive'],
    ['--admin HOST:PORT', 'the admin API and /metrics (keep it off the public network)'],
    ['--domain DOMAIN', 'also route Host <run>.<DOMAIN>'],
    ['--state FILE', 'keep the tables here across restarts (written atomically, mode 0600)'],
    ['--admin-token-file FILE', `the admin API's bearer token (or env ${GATEWAY_TOKEN_ENV}); at least 16 characters`],
    ['-h, --help', 'this help'],
  ],
);

function address(flag: string, value: string | undefined): { host: string; port: number } {
  if (value === undefined) throw new CliError(`troupe gateway needs ${flag} HOST:PORT\n\n${help}`, 2);
  try {
    return parseListenAddress(value);
  } catch {
    throw new CliError(`${flag} wants HOST:PORT such as 127.0.0.1:8080, not ${JSON.stringify(value)}`, 2);
  }
}

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const listen = address('--listen', values.listen);
  const admin = address('--admin', values.admin);
  const token = readGatewayAdminToken('--admin-token-file', values['admin-token-file']);
  if (values.domain !== undefined && !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/i.test(values.domain)) {
    throw new CliError(`--domain wants a DNS name such as svc.example.com, not ${JSON.stringify(values.domain)}`, 2);
  }
  const gateway = await startGateway({ listen, admin, adminToken: token, domain: values.domain, stateFile: values.state });
  const served = gateway.services.tables().length;
  process.stderr.write(
    `Gateway on ${gateway.url} (services under /services/<run>/${values.domain !== undefined ? ` and <run>.${values.domain}` : ''}); admin API on ${gateway.adminUrl}; ${served} service(s) from ${values.state ?? 'nowhere (no --state)'}. Ctrl-C stops it.\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await gateway.close();
  return 0;
};

import { parseArgs } from 'node:util';
import { startGateway } from '../../gateway/gateway';
import { startGatewayCluster } from '../../gateway/gateway-cluster';
import { isHttpOrigin } from '../../gateway/routing-table';
import { parseListenAddress } from '../../metrics/metrics-server';
import { CliError, type Command } from '../command';
import { GATEWAY_TOKEN_ENV, readGatewayAdminToken } from '../gateway-admin';
import { parseOrUsage, renderUsage } from '../render/usage';
import { expandHome, loadIdentityFile } from '../../backends/ssh/identity-file';
import { resolve as resolvePath } from 'node:path';

const options = {
  listen: { type: 'string' },
  admin: { type: 'string' },
  domain: { type: 'string' },
  'public-url': { type: 'string' },
  state: { type: 'string' },
  'admin-token-file': { type: 'string' },
  workers: { type: 'string' },
  'ssh-identity': { type: 'string' },
  'ssh-known-hosts': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const help = renderUsage(
  'troupe gateway --listen HOST:PORT --admin HOST:PORT [--public-url URL] [--domain DOMAIN] [--state FILE] [--admin-token-file FILE] [--workers N] [--ssh-identity FILE [--ssh-known-hosts FILE]]',
  [
    "Serves every service of a namespace on one address: /services/<run>/… and, with --domain, Host",
    '<run>.<domain>. Each service\'s routing table (replicas, auth, rate limits) is pushed to the admin API',
    '(PUT /services/<run>); the gateway never asks Temporal anything while it serves.',
  ].join('\n'),
  [
    ['--listen HOST:PORT', 'where requests arrive'],
    ['--admin HOST:PORT', 'the admin API and /metrics (keep it off the public network)'],
    ['--public-url URL', 'where users are told the services are (GET /info, the endpoints a run prints), an http(s) origin such as https://gw.example.com; default: the --listen address, 0.0.0.0 and :: shown as 127.0.0.1'],
    ['--domain DOMAIN', 'also route Host <run>.<DOMAIN>'],
    ['--state FILE', 'keep the tables here across restarts (written atomically, mode 0600)'],
    ['--admin-token-file FILE', `the admin API's bearer token (or env ${GATEWAY_TOKEN_ENV}); at least 16 characters`],
    ['--workers N', 'serve the data plane from N processes (default 1): one event loop uses one core; the tables, rate limits, in-flight counts and metrics stay one'],
    ['--ssh-identity FILE', "a private key (unencrypted, mode 0600) the jump hosts of SSH fleets authorize: the gateway reaches a replica on a host behind a proxy_jump through an SSH tunnel of its own over that jump host (restrict the key there with permitopen=\"HOST:PORT\" of the replicas); without it such a replica's requests get 502"],
    ['--ssh-known-hosts FILE', "the jump hosts' keys (OpenSSH known_hosts); default: the key each fleet verified for its jump host, which the run puts in the routing table"],
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
  const publicUrl = values['public-url'];
  if (publicUrl !== undefined && !isHttpOrigin(publicUrl)) {
    throw new CliError(`--public-url wants an http(s) origin with no path, such as https://gw.example.com or http://10.0.0.5:8080, not ${JSON.stringify(publicUrl)}`, 2);
  }
  const workers = values.workers === undefined ? 1 : Number(values.workers);
  if (!Number.isInteger(workers) || workers < 1 || workers > 64) throw new CliError(`--workers wants a whole number from 1 to 64, not ${JSON.stringify(values.workers)}`, 2);
  if (values['ssh-known-hosts'] !== undefined && values['ssh-identity'] === undefined) {
    throw new CliError('--ssh-known-hosts checks the jump hosts of --ssh-identity FILE, and none is given', 2);
  }
  const path = (file: string) => resolvePath(expandHome(file));
  const tunnels = values['ssh-identity'] === undefined ? undefined : { identityFile: path(values['ssh-identity']), knownHostsFile: values['ssh-known-hosts'] === undefined ? undefined : path(values['ssh-known-hosts']) };
  if (tunnels) await loadIdentityFile(tunnels.identityFile, '--ssh-identity').catch((err: Error) => {
    throw new CliError(err.message, 2);
  });
  const gatewayOptions = {
    listen,
    admin,
    adminToken: token,
    domain: values.domain,
    stateFile: values.state,
    publicUrl: publicUrl === undefined ? undefined : new URL(publicUrl).origin,
    tunnels,
  };
  const gateway = workers > 1 ? await startGatewayCluster(gatewayOptions, workers) : await startGateway(gatewayOptions);
  const served = gateway.services.tables().length;
  process.stderr.write(
    `Gateway on ${gateway.url}, shown to users as ${gateway.publicUrl} (services under /services/<run>/${values.domain !== undefined ? ` and <run>.${values.domain}` : ''}); admin API on ${gateway.adminUrl}; ${served} service(s) from ${values.state ?? 'nowhere (no --state)'}${workers > 1 ? `; ${workers} data-plane processes` : ''}${tunnels ? `; replicas behind a jump host through SSH with ${tunnels.identityFile}` : ''}. Ctrl-C stops it.\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await gateway.close();
  return 0;
};

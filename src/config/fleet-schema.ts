import { z } from 'zod';
import { closedObject, ruleIssue } from './closed-object';
import { parseEnv } from './env';
import { isIpAddress, isPrivateIp, parseNetwork } from './ip-address';
import { parsed, scalar, textSchema, toInt } from './scalars';
import { hostnameSchema, userNameSchema } from './references';

/**
 * `type: fleet` in dstack's format, for the fleets Troupe has: existing hosts reached over SSH
 * (`ssh_config`). Cloud fleets (`nodes`, `backends`…) are refused.
 */

const UNSUPPORTED_FLEET_FIELDS: Readonly<Record<string, string | true>> = {
  nodes: 'Troupe fleets are existing hosts listed in `ssh_config`',
  reservation: true,
  resources: 'a host offers what it has',
  backends: 'Troupe fleets are existing hosts listed in `ssh_config`',
  regions: true,
  availability_zones: true,
  instance_types: true,
  spot_policy: true,
  retry: true,
  max_price: true,
  idle_duration: true,
  tags: true,
  backend_options: true,
};
/** dstack fills `ssh_key` from `identity_file` itself; a key written in the file is not read. */
const SSH_KEY_FIELD = { ssh_key: 'give `identity_file`, the path of the private key' };

const portSchema = scalar('an SSH port 1..65535', (value) => {
  const n = toInt(value);
  return n !== undefined && n >= 1 && n <= 65535 ? n : undefined;
});

const blocksSchema = scalar('a number of blocks >= 1, or auto', (value): number | 'auto' | undefined =>
  value === 'auto' ? 'auto' : (() => {
    const n = toInt(value);
    return n !== undefined && n >= 1 ? n : undefined;
  })(),
);

const privateIpSchema = textSchema.superRefine((ip, ctx) => {
  if (!isIpAddress(ip)) ctx.addIssue({ code: 'custom', message: `"${ip}" is not an IP address` });
  else if (!isPrivateIp(ip)) ctx.addIssue({ code: 'custom', message: `"${ip}" is not a private address: internal_ip must be private` });
});

const networkSchema = textSchema.superRefine((network, ctx) => {
  const parsedNetwork = parseNetwork(network);
  if (!parsedNetwork) ctx.addIssue({ code: 'custom', message: `"${network}" is not a network: write <ip>/<prefix>, e.g. 10.0.0.0/24` });
  else if (!parsedNetwork.private) ctx.addIssue({ code: 'custom', message: `"${network}" is a public network: the cluster network must be private` });
});

const ProxyJumpInputSchema = closedObject(
  { hostname: hostnameSchema, port: portSchema.nullish(), user: userNameSchema, identity_file: textSchema },
  { what: '`proxy_jump`', unsupported: SSH_KEY_FIELD },
);

const SshHostInputSchema = closedObject(
  {
    hostname: hostnameSchema,
    port: portSchema.nullish(),
    user: userNameSchema.nullish(),
    identity_file: textSchema.nullish(),
    proxy_jump: ProxyJumpInputSchema.nullish(),
    internal_ip: privateIpSchema.nullish(),
    blocks: blocksSchema.nullish(),
  },
  { what: 'a host', unsupported: SSH_KEY_FIELD },
);

/** A host is a hostname, or a mapping with its own settings. */
const hostEntrySchema = z.preprocess((host) => (typeof host === 'string' ? { hostname: host } : host), SshHostInputSchema);

const SshConfigInputSchema = closedObject(
  {
    user: userNameSchema.nullish(),
    port: portSchema.nullish(),
    identity_file: textSchema.nullish(),
    proxy_jump: ProxyJumpInputSchema.nullish(),
    hosts: z.array(hostEntrySchema),
    network: networkSchema.nullish(),
  },
  { what: '`ssh_config`', unsupported: SSH_KEY_FIELD },
);

export const FleetConfigInputSchema = closedObject(
  {
    type: z.literal('fleet'),
    name: textSchema.nullish(),
    placement: z.enum(['any', 'cluster']).nullish(),
    blocks: blocksSchema.optional(),
    env: parsed(parseEnv).optional(),
    ssh_config: SshConfigInputSchema.nullish(),
  },
  { what: 'the fleet', unsupported: UNSUPPORTED_FLEET_FIELDS },
).superRefine((fleet, ctx) => {
  const ssh = fleet.ssh_config;
  if (!ssh) {
    ctx.addIssue(ruleIssue(['ssh_config'], 'a Troupe fleet needs `ssh_config` with the `hosts` to use'));
    return;
  }
  if (ssh.hosts.length === 0) {
    ctx.addIssue(ruleIssue(['ssh_config', 'hosts'], '`hosts` is empty: list at least one host'));
  }
  const seen = new Map<string, number>();
  ssh.hosts.forEach((host, index) => {
    const at = ['ssh_config', 'hosts', index];
    if (!(host.user ?? ssh.user)) {
      ctx.addIssue(ruleIssue(at, `no SSH user for host ${host.hostname}: set \`user\` in ssh_config or on the host`));
    }
    if (!(host.identity_file ?? ssh.identity_file)) {
      ctx.addIssue(ruleIssue(at, `no SSH key for host ${host.hostname}: set \`identity_file\` in ssh_config or on the host`));
    }
    const address = `${host.hostname}:${host.port ?? ssh.port ?? 22}`;
    const earlier = seen.get(address);
    if (earlier !== undefined) ctx.addIssue(ruleIssue(at, `host ${address} is listed twice (also hosts[${earlier}])`));
    else seen.set(address, index);
  });
  const withInternalIp = ssh.hosts.filter((h) => h.internal_ip);
  if (withInternalIp.length > 0 && withInternalIp.length !== ssh.hosts.length) {
    const missing = ssh.hosts.findIndex((h) => !h.internal_ip);
    ctx.addIssue(ruleIssue(['ssh_config', 'hosts', missing], '`internal_ip` must be given for all hosts or for none'));
  }
  if (withInternalIp.length > 0 && ssh.network) {
    ctx.addIssue(ruleIssue(['ssh_config', 'network'], '`internal_ip` and `network` are mutually exclusive: keep one'));
  }
});

export const ProxyJumpSchema = z.object({
  hostname: z.string(),
  port: z.number().int(),
  user: z.string(),
  identity_file: z.string(),
});
export type ProxyJump = z.infer<typeof ProxyJumpSchema>;

/** One host with its connection settings resolved (host fields over `ssh_config`'s, port 22). */
export const SshHostSchema = z.object({
  hostname: z.string(),
  port: z.number().int(),
  user: z.string(),
  identity_file: z.string(),
  proxy_jump: ProxyJumpSchema.nullable(),
  internal_ip: z.string().nullable(),
  blocks: z.union([z.number().int().positive(), z.literal('auto')]),
});
export type SshHost = z.infer<typeof SshHostSchema>;

/** A fleet config as Troupe uses it: defaults applied, env resolved, every host resolved. */
export const FleetConfigSchema = z.object({
  name: z.string().nullable(),
  placement: z.enum(['any', 'cluster']),
  /** The network whose addresses hosts use between themselves (`<ip>/<prefix>`), if given. */
  network: z.string().nullable(),
  env: z.record(z.string(), z.string()),
  hosts: z.array(SshHostSchema).min(1),
});
export type FleetConfig = z.infer<typeof FleetConfigSchema>;

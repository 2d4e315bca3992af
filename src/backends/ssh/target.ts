import { z } from 'zod';

/** How to reach one host over SSH. Field names follow the fleet YAML (`ssh_config`). */
export interface SshTarget {
  hostname: string;
  port: number;
  user: string;
  /** Private key file; `~/` is expanded. Refused when group or others can read it. */
  identity_file: string;
  /** Reach this host through that one (its `forwardOut`), like OpenSSH's ProxyJump. */
  proxy_jump?: SshTarget;
  /** Fingerprints the host key must match, as `ssh-keygen -l` prints them (`SHA256:...`). */
  host_key_fingerprints?: string[];
}

export const SshTargetSchema: z.ZodType<SshTarget> = z.lazy(() =>
  z.object({
    hostname: z.string().min(1),
    port: z.number().int().min(1).max(65535),
    user: z.string().min(1),
    identity_file: z.string().min(1),
    proxy_jump: SshTargetSchema.optional(),
    host_key_fingerprints: z.array(z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}=?$/, 'expected SHA256:<43 base64 characters>')).optional(),
  }),
);

/** `user@host:port`, with the jump chain, for messages. */
export function describeTarget(target: SshTarget): string {
  const self = `${target.user}@${formatHostPort(target.hostname, target.port)}`;
  return target.proxy_jump ? `${self} (via ${describeTarget(target.proxy_jump)})` : self;
}

export function formatHostPort(hostname: string, port: number): string {
  const host = hostname.includes(':') ? `[${hostname}]` : hostname;
  return `${host}:${port}`;
}

import { readFileSync } from 'node:fs';
import type { GatewayAdmin } from '../gateway/admin-client';
import { isHttpOrigin } from '../gateway/routing-table';
import { CliError } from './command';

/**
 * The gateway's admin token and admin URLs as the CLI reads them: one reader for `troupe gateway`
 * (which serves with the token) and `troupe worker` (which pushes with it), so both take the same
 * file and the same variable alike.
 */

export const GATEWAY_TOKEN_ENV = 'TROUPE_GATEWAY_ADMIN_TOKEN';
export const GATEWAYS_ENV = 'TROUPE_GATEWAYS';
const MIN_TOKEN_CHARS = 16;

/** The admin token from `flag`'s file when given, else from TROUPE_GATEWAY_ADMIN_TOKEN; at least 16 characters. */
export function readGatewayAdminToken(flag: string, file: string | undefined): string {
  let token: string;
  if (file !== undefined) {
    try {
      token = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new CliError(`cannot read ${flag} ${file}: ${err instanceof Error ? err.message : String(err)}`, 2);
    }
  } else {
    token = (process.env[GATEWAY_TOKEN_ENV] ?? '').trim();
    if (token === '') throw new CliError(`the gateway's admin API needs a token: ${flag} FILE or env ${GATEWAY_TOKEN_ENV}`, 2);
  }
  if (token.length < MIN_TOKEN_CHARS) throw new CliError(`the admin token (${file !== undefined ? `${flag} ${file}` : GATEWAY_TOKEN_ENV}) must be at least ${MIN_TOKEN_CHARS} characters`, 2);
  return token;
}

function adminOrigin(value: string): string {
  const text = value.trim();
  if (!isHttpOrigin(text)) throw new CliError(`--gateway / ${GATEWAYS_ENV} wants a gateway's admin URL such as http://127.0.0.1:8081, not ${JSON.stringify(value)}`, 2);
  return new URL(text).origin;
}

/**
 * The gateways a worker pushes services' tables to: `--gateway` (repeatable), else TROUPE_GATEWAYS
 * (comma-separated), with the admin token of `--gateway-token-file` or TROUPE_GATEWAY_ADMIN_TOKEN.
 * None given: none, and no token is asked for.
 */
export function workerGateways(flags: string[] | undefined, tokenFile: string | undefined): GatewayAdmin[] {
  const given = flags && flags.length > 0 ? flags : (process.env[GATEWAYS_ENV] ?? '').split(',').filter((s) => s.trim() !== '');
  if (given.length === 0) {
    if (tokenFile !== undefined) throw new CliError(`--gateway-token-file is for the gateways of --gateway ADMIN_URL (or env ${GATEWAYS_ENV}), and none is given`, 2);
    return [];
  }
  const urls = [...new Set(given.map(adminOrigin))];
  const token = readGatewayAdminToken('--gateway-token-file', tokenFile);
  return urls.map((url) => ({ url, token }));
}

import { parsed, REQUIRED, ScalarError, toText } from './scalars';
import { describeValue } from './yaml-source';

/**
 * Values that reach a command line or a remote host by name — an image, a fleet, an SSH host and
 * user — follow their grammar: what does not (`--privileged`, `$(id)`, `-oProxyCommand=…`, a
 * newline, `../../x`) is refused at plan time instead of being passed on.
 */

const domain = String.raw`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?`;
const component = String.raw`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`;
const tag = String.raw`(?::[\w][\w.-]{0,127})?`;
const digest = String.raw`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?`;
/** The OCI/Docker image reference grammar: `[registry[:port]/]name[/name…][:tag][@digest]`. */
const IMAGE_REFERENCE = new RegExp(`^${domain}${component}(?:/${component})*${tag}${digest}$`);
const IMAGE_MAX = 512;

const FLEET_NAME = /^[a-z][a-z0-9-]{1,40}$/;
/** A DNS name, an IPv4 or an IPv6 address (with a zone): never a leading `-`, no spaces. */
export const HOSTNAME = /^[A-Za-z0-9_[:][A-Za-z0-9_.:%[\]-]{0,252}$/;
/** POSIX-portable user names (as useradd takes them). */
export const USER_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$/;

function grammar(what: string, pattern: RegExp, hint: string, max?: number) {
  return (value: unknown): string => {
    const text = toText(value);
    if (value === undefined) throw new ScalarError(REQUIRED);
    if (text === undefined) throw new ScalarError(`expected ${what}, got ${describeValue(value)}`);
    if (max !== undefined && text.length > max) throw new ScalarError(`${what} is ${text.length} characters long; at most ${max}`);
    if (!pattern.test(text)) throw new ScalarError(`${JSON.stringify(text)} is not ${what}: ${hint}`);
    return text;
  };
}

export const parseImageReference = grammar(
  'an image reference',
  IMAGE_REFERENCE,
  'write [registry/]name[:tag][@digest], e.g. lmsysorg/sglang:latest',
  IMAGE_MAX,
);
export const imageSchema = parsed(parseImageReference);
export const fleetNameSchema = parsed(grammar('a fleet name', FLEET_NAME, 'lowercase letters, digits and -, starting with a letter (^[a-z][a-z0-9-]{1,40}$)'));
export const hostnameSchema = parsed(
  grammar('a host name or address', HOSTNAME, 'a DNS name or an IP address, not starting with - and without spaces'),
);
export const userNameSchema = parsed(grammar('a user name', USER_NAME, 'letters, digits, _ . -, not starting with - (at most 32)'));

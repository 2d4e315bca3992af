import { parseArgs } from 'node:util';
import { codecKeyFile, loadCodecKeyring } from '../../codec/codec-keys';
import { DEFAULT_CODEC_PORT, startCodecServer } from '../../codec/codec-server';
import { codecTokenFile, loadCodecToken } from '../../codec/codec-token';
import { EncryptionCodec } from '../../codec/payload-codec';
import { CliError, type Command } from '../command';
import { parseOrUsage, renderUsage } from '../render/usage';

/** The embedded dev server's Web UI, by both names a browser may use for it. */
const DEFAULT_CORS_ORIGINS = ['http://127.0.0.1:8233', 'http://localhost:8233'];

const options = {
  port: { type: 'string' },
  host: { type: 'string' },
  'cors-origin': { type: 'string', multiple: true },
  'allowed-host': { type: 'string', multiple: true },
  namespace: { type: 'string', multiple: true },
  'trust-origin': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const help = renderUsage(
  'troupe codec-server [--port N] [--cors-origin URL]...',
  [
    "Serves Temporal's remote codec endpoint (POST /encode, POST /decode) with this machine's codec",
    'keys, so the Web UI (and `temporal workflow show --codec-endpoint URL`) show decoded payloads',
    'to the Web UI. Every encode and decode needs a credential: Authorization: Bearer <token> from the',
    'token file, or the cookie a browser gets by signing in once at /login with that token (the Web UI',
    'with TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true sends it). It answers only loopback Host names (and',
    '--allowed-host), only the --cors-origin origins, only JSON bodies.',
  ].join('\n'),
  [
    ['--port N', `port (default ${DEFAULT_CODEC_PORT})`],
    ['--host ADDR', 'address to bind (default 127.0.0.1)'],
    ['--cors-origin URL', `Web UI origin allowed to call it (repeatable; default ${DEFAULT_CORS_ORIGINS.join(' and ')})`],
    ['--allowed-host NAME', 'a Host name it answers besides localhost, 127.0.0.1 and ::1 (repeatable)'],
    ['--trust-origin', 'admit the --cors-origin origins without a credential: only for a Web UI that cannot send one (the embedded dev server\'s); any local process can forge an Origin'],
    ['--namespace NAME', 'serve only these namespaces (repeatable; default all), by the X-Namespace header'],
    ['', `keys: TROUPE_CODEC_KEY_FILE (default ${codecKeyFile()})`],
    ['', `token: TROUPE_CODEC_TOKEN or TROUPE_CODEC_TOKEN_FILE (default ${codecTokenFile()}, made on first use)`],
    ['-h, --help', 'this help'],
  ],
);

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const port = values.port === undefined ? DEFAULT_CODEC_PORT : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a port number (got "${values.port}")`, 2);
  const corsOrigins = values['cors-origin'] ?? DEFAULT_CORS_ORIGINS;
  const allowedHosts = values['allowed-host'] ?? [];
  for (const host of allowedHosts) {
    if (!/^[A-Za-z0-9.-]+$|^[0-9a-fA-F:]+$/.test(host)) throw new CliError(`--allowed-host must be a host name or address without port (got ${JSON.stringify(host)})`, 2);
  }
  for (const origin of corsOrigins) {
    if (!/^https?:\/\/[^/\s]+$/.test(origin)) throw new CliError(`--cors-origin must be an origin like http://127.0.0.1:8233, without a path (got "${origin}")`, 2);
  }
  // Never creates a key: a new key here could decode nothing the workers wrote.
  const keyring = loadCodecKeyring({ create: false });
  const token = loadCodecToken({ create: true });
  const { server, url } = await startCodecServer({
    codec: new EncryptionCodec(keyring, { unencrypted: 'pass' }),
    corsOrigins,
    allowedHosts,
    token,
    trustOrigin: values['trust-origin'] === true,
    namespaces: values.namespace ?? [],
    host: values.host ?? '127.0.0.1',
    port,
  });
  const tokenSource = process.env.TROUPE_CODEC_TOKEN ? 'TROUPE_CODEC_TOKEN' : codecTokenFile();
  const browsers = values['trust-origin']
    ? `${corsOrigins.join(', ')} admitted by Origin alone (--trust-origin)`
    : `CORS for ${corsOrigins.join(', ')}, whose browser signs in once at ${url}/login with the token`;
  process.stderr.write(`Codec server on ${url} (codec key ${keyring.current.id}, ${keyring.byId.size} key(s)); ${browsers}; callers send the token in ${tokenSource}. Ctrl-C stops it.\n`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
};

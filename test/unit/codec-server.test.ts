import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecKeyId, keyringOf, loadCodecKeyring, CodecKeyError } from '../../src/codec/codec-keys';
import { payloadFromJson, payloadToJson, SESSION_COOKIE, sessionValue, startCodecServer } from '../../src/codec/codec-server';
import { ENCRYPTED_ENCODING, EncryptionCodec, KEY_ID_METADATA } from '../../src/codec/payload-codec';

const UI_ORIGIN = 'http://127.0.0.1:18233';
const oldKey = randomBytes(32);
const newKey = randomBytes(32);
const servers: Server[] = [];
const TOKEN = randomBytes(24).toString('hex');

async function serve(keys: Buffer[], namespaces: string[] = [], trustOrigin = false): Promise<string> {
  const codec = new EncryptionCodec(keyringOf(keys), { unencrypted: 'pass' });
  const { server, url } = await startCodecServer({ codec, corsOrigins: [UI_ORIGIN], namespaces, host: '127.0.0.1', port: 0, token: TOKEN, trustOrigin });
  servers.push(server);
  return url;
}

async function post(url: string, payloads: Payload[], headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', Authorization: `Bearer ${TOKEN}`, ...headers },
    body: JSON.stringify({ payloads: payloads.map(payloadToJson) }),
  });
  const body = (await res.json()) as { payloads?: Parameters<typeof payloadFromJson>[0][]; message?: string };
  return { status: res.status, payloads: (body.payloads ?? []).map(payloadFromJson), message: body.message ?? null, headers: res.headers };
}

const text = (p: Payload | undefined): string => Buffer.from(p?.data ?? []).toString('utf8');
const meta = (p: Payload | undefined, key: string): string => Buffer.from(p?.metadata?.[key] ?? []).toString('utf8');

afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});

describe('payload codec', () => {
  it('encrypts the whole payload, names its key, and restores it byte for byte', async () => {
    const codec = new EncryptionCodec(keyringOf([newKey]));
    const original = defaultPayloadConverter.toPayload({ log: 'canary-abc' });
    const [encoded] = await codec.encode([original]);
    expect(meta(encoded, 'encoding')).toBe(ENCRYPTED_ENCODING);
    expect(meta(encoded, KEY_ID_METADATA)).toBe(codecKeyId(newKey));
    expect(Buffer.from(encoded?.data ?? []).includes('canary-abc')).toBe(false);
    expect(Object.keys(encoded?.metadata ?? {}).sort()).toEqual(['encoding', KEY_ID_METADATA]);
    const [decoded] = await codec.decode([encoded as Payload]);
    expect(defaultPayloadConverter.fromPayload(decoded as Payload)).toEqual({ log: 'canary-abc' });
  });

  it('refuses an unencrypted payload in decode (a client without the key wrote it)', async () => {
    const clear = defaultPayloadConverter.toPayload('written in clear');
    await expect(new EncryptionCodec(keyringOf([newKey])).decode([clear])).rejects.toThrow(/refused an unencrypted payload \(encoding "json\/plain"\)/);
  });

  it('passes an unencrypted payload through only where asked to (the codec server, which only shows it)', async () => {
    const clear = defaultPayloadConverter.toPayload('written in clear');
    const [decoded] = await new EncryptionCodec(keyringOf([newKey]), { unencrypted: 'pass' }).decode([clear]);
    expect(decoded).toBe(clear);
  });

  it('refuses a payload whose key id was altered', async () => {
    const codec = new EncryptionCodec(keyringOf([newKey, oldKey]));
    const [encoded] = await codec.encode([defaultPayloadConverter.toPayload('x')]);
    const relabelled = { ...encoded, metadata: { ...encoded?.metadata, [KEY_ID_METADATA]: Buffer.from(codecKeyId(oldKey)) } };
    await expect(codec.decode([relabelled])).rejects.toThrow(/does not open with that key/);
  });
});

describe('codec key file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-codec-keys-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('makes a key file (mode 600) on first use and reads the same key after', () => {
    const file = join(dir, 'made', 'codec.keys');
    const made = loadCodecKeyring({ create: true, file });
    expect(loadCodecKeyring({ create: false, file }).current.id).toBe(made.current.id);
  });

  it('takes the first line as the current key and keeps the others for decoding', () => {
    const file = join(dir, 'rotated.keys');
    writeFileSync(file, `# rotated\n${newKey.toString('base64')}\n${oldKey.toString('base64')}\n`, { mode: 0o600 });
    const ring = loadCodecKeyring({ create: false, file });
    expect(ring.current.id).toBe(codecKeyId(newKey));
    expect([...ring.byId.keys()].sort()).toEqual([codecKeyId(newKey), codecKeyId(oldKey)].sort());
  });

  it('refuses a key file others can read, and a malformed key with its line', () => {
    const loose = join(dir, 'loose.keys');
    writeFileSync(loose, `${newKey.toString('base64')}\n`, { mode: 0o644 });
    expect(() => loadCodecKeyring({ create: false, file: loose })).toThrow(/readable by group or others \(mode 644\)/);
    const bad = join(dir, 'bad.keys');
    writeFileSync(bad, `${newKey.toString('base64')}\nnot-a-key\n`, { mode: 0o600 });
    expect(() => loadCodecKeyring({ create: false, file: bad })).toThrow(CodecKeyError);
    expect(() => loadCodecKeyring({ create: false, file: bad })).toThrow(/bad\.keys:2: a codec key must be 32 bytes/);
  });
});

describe('troupe codec server (HTTP)', () => {
  let before: string;
  let after: string;
  let stranger: string;

  beforeAll(async () => {
    before = await serve([oldKey]);
    after = await serve([newKey, oldKey]);
    stranger = await serve([randomBytes(32)]);
  });

  it('round-trips payloads through POST /encode and POST /decode', async () => {
    const original = defaultPayloadConverter.toPayload({ tail: 'printed by a job' });
    const encoded = await post(`${after}/encode`, [original]);
    expect(encoded.status).toBe(200);
    expect(meta(encoded.payloads[0], 'encoding')).toBe(ENCRYPTED_ENCODING);
    expect(text(encoded.payloads[0])).not.toContain('printed by a job');
    const decoded = await post(`${after}/decode`, encoded.payloads);
    expect(decoded.status).toBe(200);
    expect(defaultPayloadConverter.fromPayload(decoded.payloads[0] as Payload)).toEqual({ tail: 'printed by a job' });
  });

  it('decodes after rotation what the old key encrypted, and encodes with the new key', async () => {
    const old = await post(`${before}/encode`, [defaultPayloadConverter.toPayload('sealed long ago')]);
    expect(meta(old.payloads[0], KEY_ID_METADATA)).toBe(codecKeyId(oldKey));
    const decoded = await post(`${after}/decode`, old.payloads);
    expect(defaultPayloadConverter.fromPayload(decoded.payloads[0] as Payload)).toBe('sealed long ago');
    const fresh = await post(`${after}/encode`, [defaultPayloadConverter.toPayload('new')]);
    expect(meta(fresh.payloads[0], KEY_ID_METADATA)).toBe(codecKeyId(newKey));
  });

  it('answers an unknown key id with an error naming it', async () => {
    const encoded = await post(`${after}/encode`, [defaultPayloadConverter.toPayload('x')]);
    const refused = await post(`${stranger}/decode`, encoded.payloads);
    expect(refused.status).toBe(400);
    expect(refused.message).toContain(`codec key "${codecKeyId(newKey)}"`);
    expect(refused.message).toMatch(/not in this side's key file/);
  });

  it('serves the namespace path form and honours X-Namespace against its namespace list', async () => {
    const only = await serve([newKey], ['prod']);
    const original = defaultPayloadConverter.toPayload('ns');
    expect((await post(`${only}/prod/encode`, [original], { 'X-Namespace': 'prod' })).status).toBe(200);
    const other = await post(`${only}/encode`, [original], { 'X-Namespace': 'default' });
    expect(other.status).toBe(403);
    expect(other.message).toContain('namespace "default"');
  });

  it('answers the Web UI origin preflight, and no other origin', async () => {
    const preflight = await fetch(`${after}/decode`, {
      method: 'OPTIONS',
      headers: { Origin: UI_ORIGIN, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(UI_ORIGIN);
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('x-namespace');
    expect(preflight.headers.get('access-control-allow-credentials')).toBe('true');
    const foreign = await fetch(`${after}/decode`, { method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' } });
    expect(foreign.status).toBe(403);
    expect(foreign.headers.get('access-control-allow-origin')).toBeNull();
    const none = await fetch(`${after}/decode`, { method: 'OPTIONS', headers: { 'Access-Control-Request-Method': 'POST' } });
    expect(none.status).toBe(403);
  });

  it('refuses other methods, paths and bodies with one clear line', async () => {
    const auth = { Authorization: `Bearer ${TOKEN}` };
    expect((await fetch(`${after}/decode`, { headers: auth })).status).toBe(405);
    expect((await fetch(`${after}/nothing/here/at/all`, { method: 'POST', headers: auth })).status).toBe(404);
    const bad = await fetch(`${after}/decode`, { method: 'POST', body: '{"payload":1}', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${TOKEN}` } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/the body must be JSON/);
  });
});

/** A raw HTTP request (fetch will not send a Host of our choosing). */
function raw(url: string, opts: { method: string; headers: Record<string, string>; body?: string }): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method, headers: opts.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), headers: res.headers }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

describe('troupe codec server: who may call (DNS rebinding, pages the operator visits)', () => {
  let url: string;
  let encrypted: string;
  beforeAll(async () => {
    url = await serve([newKey]);
    const [payload] = await new EncryptionCodec(keyringOf([newKey])).encode([defaultPayloadConverter.toPayload('decoded history')]);
    encrypted = JSON.stringify({ payloads: [payloadToJson(payload as Payload)] });
  });
  const port = () => new URL(url).port;

  const DECODED = Buffer.from(JSON.stringify('decoded history')).toString('base64');

  it('answers a token holder on a loopback Host', async () => {
    const withToken = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${TOKEN}` }, body: encrypted });
    expect(withToken.status).toBe(200);
    expect(withToken.body).toContain(DECODED);
  });

  it("refuses a local process that forges the Web UI's Origin without a credential: decode and encode (issue 37)", async () => {
    const headers = { 'Content-Type': 'application/json', Origin: UI_ORIGIN, Host: `localhost:${port()}` };
    const decode = await raw(`${url}/decode`, { method: 'POST', headers, body: encrypted });
    expect(decode.status).toBe(401);
    expect(decode.body).toMatch(/a credential is required/);
    expect(decode.body).not.toContain(DECODED);
    const forged = JSON.stringify({ payloads: [payloadToJson(defaultPayloadConverter.toPayload({ forged: true }))] });
    const encode = await raw(`${url}/encode`, { method: 'POST', headers, body: forged });
    expect(encode.status).toBe(401);
    expect(encode.body).not.toContain(ENCRYPTED_ENCODING);
    // A forged or stale session cookie is no credential either.
    const cookie = await raw(`${url}/decode`, { method: 'POST', headers: { ...headers, Cookie: `${SESSION_COOKIE}=${sessionValue(`${TOKEN}x`)}` }, body: encrypted });
    expect(cookie.status).toBe(401);
  });

  it("the Web UI's real path: the browser signs in once at /login, then its preflighted requests carry the cookie and are answered", async () => {
    const form = await raw(`${url}/login`, { method: 'GET', headers: {} });
    expect(form.status).toBe(200);
    expect(form.body).toContain('<form method="post" action="/login">');
    expect(form.body).not.toContain(TOKEN);
    expect(form.headers['x-frame-options']).toBe('DENY');
    const formHeaders = { 'Content-Type': 'application/x-www-form-urlencoded', Origin: url };
    const wrong = await raw(`${url}/login`, { method: 'POST', headers: formHeaders, body: new URLSearchParams({ token: `${TOKEN}x` }).toString() });
    expect(wrong.status).toBe(401);
    expect(wrong.headers['set-cookie']).toBeUndefined();
    // Another site's page cannot sign the browser in (nor out) either.
    const elsewhere = await raw(`${url}/login`, { method: 'POST', headers: { ...formHeaders, Origin: 'http://evil.example' }, body: new URLSearchParams({ token: TOKEN }).toString() });
    expect(elsewhere.status).toBe(403);
    const signedIn = await raw(`${url}/login`, { method: 'POST', headers: formHeaders, body: new URLSearchParams({ token: TOKEN }).toString() });
    expect(signedIn.status).toBe(200);
    const setCookie = String((signedIn.headers['set-cookie'] as string[] | undefined)?.[0]);
    expect(setCookie).toMatch(new RegExp(`^${SESSION_COOKIE}=[^;]+; HttpOnly; SameSite=Strict; Path=/; Max-Age=\\d+$`));
    expect(setCookie).not.toContain(TOKEN);
    const cookie = setCookie.split(';')[0] as string;
    // What the Web UI's fetch (credentials: include) sends after its preflight.
    const decode = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: UI_ORIGIN, 'X-Namespace': 'default', Cookie: cookie }, body: encrypted });
    expect(decode.status).toBe(200);
    expect(decode.body).toContain(DECODED);
    expect(decode.headers['access-control-allow-origin']).toBe(UI_ORIGIN);
    expect(decode.headers['access-control-allow-credentials']).toBe('true');
    // The cookie is no pass for another origin.
    const foreign = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example', Cookie: cookie }, body: encrypted });
    expect(foreign.status).toBe(403);
  });

  it('with --trust-origin (the embedded dev server, whose Web UI sends no credential) admits the configured origin alone, and no other', async () => {
    const trusting = await serve([newKey], [], true);
    const fromUi = await raw(`${trusting}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: UI_ORIGIN }, body: encrypted });
    expect(fromUi.status).toBe(200);
    expect(fromUi.body).toContain(DECODED);
    const foreign = await raw(`${trusting}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example' }, body: encrypted });
    expect(foreign.status).toBe(403);
    const none = await raw(`${trusting}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: encrypted });
    expect(none.status).toBe(401);
  });

  it('refuses a foreign Host (a rebound name), even with the token', async () => {
    const rebound = await raw(`${url}/decode`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${TOKEN}`, Host: `rebind.attacker.example:${port()}` },
      body: encrypted,
    });
    expect(rebound.status).toBe(421);
    expect(rebound.body).toContain('rebind.attacker.example');
    expect(rebound.body).not.toContain('ZGVjb2RlZCBoaXN0b3J5');
  });

  it('refuses a text/plain body (a request a browser sends without preflight)', async () => {
    // Even from a signed-in browser: the cookie would ride along on a form's simple request.
    const plain = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'text/plain', Origin: UI_ORIGIN, Cookie: `${SESSION_COOKIE}=${sessionValue(TOKEN)}` }, body: encrypted });
    expect(plain.status).toBe(415);
    expect(plain.body).toMatch(/must be application\/json/);
  });

  it('refuses a caller with no credential, a wrong token, and a foreign origin', async () => {
    const none = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: encrypted });
    expect(none.status).toBe(401);
    expect(none.body).toMatch(/a credential is required: Authorization: Bearer <token>/);
    const wrong = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${TOKEN.slice(1)}x` }, body: encrypted });
    expect(wrong.status).toBe(401);
    const foreign = await raw(`${url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example' }, body: encrypted });
    expect(foreign.status).toBe(403);
    expect(foreign.body).toContain('evil.example');
  });
});

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecKeyId, keyringOf, loadCodecKeyring, CodecKeyError } from '../../src/codec/codec-keys';
import { payloadFromJson, payloadToJson, startCodecServer } from '../../src/codec/codec-server';
import { ENCRYPTED_ENCODING, EncryptionCodec, KEY_ID_METADATA } from '../../src/codec/payload-codec';

const UI_ORIGIN = 'http://127.0.0.1:18233';
const oldKey = randomBytes(32);
const newKey = randomBytes(32);
const servers: Server[] = [];

async function serve(keys: Buffer[], namespaces: string[] = []): Promise<string> {
  const { server, url } = await startCodecServer({ codec: new EncryptionCodec(keyringOf(keys)), corsOrigins: [UI_ORIGIN], namespaces, host: '127.0.0.1', port: 0 });
  servers.push(server);
  return url;
}

async function post(url: string, payloads: Payload[], headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', ...headers },
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

  it('passes unencrypted payloads through decode (histories written before the codec)', async () => {
    const clear = defaultPayloadConverter.toPayload('written in clear');
    const [decoded] = await new EncryptionCodec(keyringOf([newKey])).decode([clear]);
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
    const foreign = await fetch(`${after}/decode`, { method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' } });
    expect(foreign.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('refuses other methods, paths and bodies with one clear line', async () => {
    expect((await fetch(`${after}/decode`)).status).toBe(405);
    expect((await fetch(`${after}/nothing/here/at/all`, { method: 'POST' })).status).toBe(404);
    const bad = await fetch(`${after}/decode`, { method: 'POST', body: '{"payload":1}' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/the body must be JSON/);
  });
});

import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyringOf } from '../../src/codec/codec-keys';
import { payloadToJson, startCodecServer } from '../../src/codec/codec-server';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { launchChromium } from '../helpers/browser';

/**
 * The Web UI's path to the codec server in a real browser (headless Chromium): a page of the UI's
 * origin that fetches /decode with credentials included, as the Temporal UI does with
 * TEMPORAL_CODEC_INCLUDE_CREDENTIALS, is refused until the browser signed in at /login with the
 * token, and answered after (CORS with credentials, the SameSite=Strict cookie sent same-site).
 */

const token = randomBytes(24).toString('base64url');
const key = randomBytes(32);
let page: Server;
let uiOrigin = '';
let codec: Server;
let codecUrl = '';
let browser: Browser | undefined;
let body = '';

beforeAll(async () => {
  page = createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end('<!doctype html><title>ui</title>');
  });
  await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
  uiOrigin = `http://127.0.0.1:${(page.address() as AddressInfo).port}`;
  ({ server: codec, url: codecUrl } = await startCodecServer({
    codec: new EncryptionCodec(keyringOf([key]), { unencrypted: 'pass' }),
    corsOrigins: [uiOrigin],
    namespaces: [],
    token,
    host: '127.0.0.1',
    port: 0,
  }));
  const [sealed] = await new EncryptionCodec(keyringOf([key])).encode([defaultPayloadConverter.toPayload('shown in the browser')]);
  body = JSON.stringify({ payloads: [payloadToJson(sealed as Payload)] });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => codec?.close(resolve));
  await new Promise((resolve) => page?.close(resolve));
});

describe('the codec server from a browser', () => {
  it('refuses the UI origin before the browser signs in at /login, and answers it after', async () => {
    const context = await (browser as Browser).newContext();
    const tab = await context.newPage();
    const decode = () =>
      tab.evaluate(
        async ([url, payloads]) => {
          const res = await fetch(`${url}/decode`, { method: 'POST', credentials: 'include', headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default' }, body: payloads });
          return { status: res.status, text: await res.text() };
        },
        [codecUrl, body] as const,
      );
    await tab.goto(uiOrigin);
    // Refused, and readable by the UI (CORS headers on the refusal too): it says where to sign in.
    const before = await decode();
    expect(before.status).toBe(401);
    expect(before.text).toMatch(/a browser signed in at \/login/);

    await tab.goto(`${codecUrl}/login`);
    await tab.fill('input[name="token"]', token);
    await tab.click('button');
    await tab.waitForSelector('text=Signed in');

    await tab.goto(uiOrigin);
    const after = await decode();
    expect(after.status).toBe(200);
    expect(after.text).toContain(Buffer.from(JSON.stringify('shown in the browser')).toString('base64'));
    await context.close();
  }, 120_000);
});

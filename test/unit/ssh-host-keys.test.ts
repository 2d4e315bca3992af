import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  fingerprintOf,
  findKnownHostEntries,
  formatKnownHostsLine,
  HostKeyTrust,
  knownHostsName,
  normalizeFingerprint,
  SshHostKeyChangedError,
  SshHostKeyUnknownError,
  type SshTarget,
} from '../../src/backends/ssh';
import { SshHostKeyRevokedError } from '../../src/backends/ssh/errors';
import { keyAlgorithmOf } from '../../src/backends/ssh/host-key';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Public keys made with ssh-keygen; their fingerprints as `ssh-keygen -l` printed them.
const ED_A = 'AAAAC3NzaC1lZDI1NTE5AAAAIPTahDhkQEUg+P+dsnqFMUXks2wBMfUR4d679XfHKMlA';
const ED_A_FP = 'SHA256:/+9Y7wSxYTmABgHwlAmkUl6sZwqS5v5yfuYywS9DRxY';
const ED_B = 'AAAAC3NzaC1lZDI1NTE5AAAAICn98ywtH18148jsFEirc1pFriyLIjPU1UUDH1G/lWAK';
const RSA_C =
  'AAAAB3NzaC1yc2EAAAADAQABAAABAQCSThjoN/PuZr0Cv06XNwDleZnFqlSWbV+PZTNPiDAPUqjkHVcKaAm2O3FbT2qmUTSuf7jkHtSuMLRB/QOYvK2XNAWhNfZxV7k6Z4VwiCIXoq3jeYQY57I8qPYGZwmMyvfirMmpWtFDFy0/PI+wS5ifjhwp1ca8Mnicoqpt9aMh6BD5J8X+KpIjLsbpN8bIyfSBxhRWR9fEn08Xs/pXgE+jpXpvc04GUx7RX/jUGP6zFtAmfU1Z8mhbm/GSdo3h3Eb/Da65t3sTi31HUjQsRivQyxd38D1aGD6HESjICE7xAOa/1yPYeFWTDfHTm1kx8XuK22JU08LmIgOYoovk2nSB';
const RSA_C_FP = 'SHA256:abO2EQd5ffHfYzkHvZLmkeJtth0g3Lt/5K/Ik1/pnbk';
// `ssh-keygen -H` of "[10.0.0.5]:2222 ssh-ed25519 ED_A".
const HASHED_A = '|1|CWqoK2WgSBqYUDLfO5+Qj9oelUE=|ECpxkSxzfaV8bRKxR+BFFn0mfjE=';

const blob = (b64: string) => Buffer.from(b64, 'base64');
const target = (hostname: string, port = 22, extra: Partial<SshTarget> = {}): SshTarget => ({
  hostname,
  port,
  user: 'root',
  identity_file: '/dev/null',
  ...extra,
});

describe('host key fingerprints', () => {
  it('match what ssh-keygen prints, for ed25519 and rsa', () => {
    expect(fingerprintOf(blob(ED_A))).toBe(ED_A_FP);
    expect(fingerprintOf(blob(RSA_C))).toBe(RSA_C_FP);
    expect(keyAlgorithmOf(blob(ED_A))).toBe('ssh-ed25519');
    expect(keyAlgorithmOf(blob(RSA_C))).toBe('ssh-rsa');
  });

  it('normalize with or without prefix and padding', () => {
    expect(normalizeFingerprint(`${ED_A_FP.slice(7)}=`)).toBe(ED_A_FP);
    expect(normalizeFingerprint(` ${ED_A_FP} `)).toBe(ED_A_FP);
  });
});

describe('known_hosts', () => {
  const file = [
    '# comment',
    '',
    `10.0.0.1,web.example ssh-ed25519 ${ED_A}`,
    `*.internal,!bad.internal ssh-ed25519 ${ED_B} wildcard entry`,
    `${HASHED_A} ssh-ed25519 ${ED_A}`,
    `@cert-authority *.example ssh-ed25519 ${ED_B}`,
    `@revoked 10.0.0.9 ssh-rsa ${RSA_C}`,
    `[10.0.0.7]:2200 ssh-rsa ${RSA_C}`,
    'garbage line',
  ].join('\n');

  it('matches plain names, lists, wildcards and negations', () => {
    expect(findKnownHostEntries(file, 'kh', '10.0.0.1', 22).map((e) => e.source)).toEqual(['kh:3']);
    expect(findKnownHostEntries(file, 'kh', 'WEB.example', 22)).toHaveLength(1);
    expect(findKnownHostEntries(file, 'kh', 'a.internal', 22).map((e) => e.keyBlob.toString('base64'))).toEqual([ED_B]);
    expect(findKnownHostEntries(file, 'kh', 'bad.internal', 22)).toEqual([]);
    // Port 22 entries never vouch for another port, and the other way round.
    expect(findKnownHostEntries(file, 'kh', '10.0.0.1', 2222)).toEqual([]);
    expect(findKnownHostEntries(file, 'kh', '10.0.0.7', 22)).toEqual([]);
    expect(findKnownHostEntries(file, 'kh', '10.0.0.7', 2200).map((e) => e.keyType)).toEqual(['ssh-rsa']);
  });

  it('matches hashed entries (HMAC-SHA1 of [host]:port) and nothing else with them', () => {
    expect(findKnownHostEntries(file, 'kh', '10.0.0.5', 2222).map((e) => e.source)).toEqual(['kh:5']);
    expect(findKnownHostEntries(file, 'kh', '10.0.0.5', 22)).toEqual([]);
    const salt = Buffer.from('0123456789abcdef0123');
    const hash = createHmac('sha1', salt).update('host.example').digest('base64');
    expect(findKnownHostEntries(`|1|${salt.toString('base64')}|${hash} ssh-ed25519 ${ED_B}`, 'f', 'host.example', 22)).toHaveLength(1);
  });

  it('skips @cert-authority lines and keeps @revoked ones apart', () => {
    expect(findKnownHostEntries(file, 'kh', 'x.example', 22)).toEqual([]);
    expect(findKnownHostEntries(file, 'kh', '10.0.0.9', 22)).toMatchObject([{ marker: 'revoked', keyType: 'ssh-rsa' }]);
  });

  it('formats the line a caller records for a pinned key', () => {
    expect(knownHostsName('10.0.0.1', 22)).toBe('10.0.0.1');
    expect(knownHostsName('10.0.0.1', 2222)).toBe('[10.0.0.1]:2222');
    expect(formatKnownHostsLine('10.0.0.1', 2222, 'ssh-ed25519', blob(ED_A))).toBe(`[10.0.0.1]:2222 ssh-ed25519 ${ED_A}`);
  });
});

describe('HostKeyTrust', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-kh-'));
  const kh = join(dir, 'known_hosts');
  writeFileSync(kh, `10.0.0.1 ssh-ed25519 ${ED_A}\n@revoked 10.0.0.2 ssh-ed25519 ${ED_B}\n10.0.0.3 ssh-rsa ${RSA_C}\n`);

  it('trusts a key from known_hosts and refuses another one as changed, naming both', async () => {
    const trust = new HostKeyTrust({ knownHostsFiles: [kh], allowPinning: true });
    const t = target('10.0.0.1');
    const exp = await trust.expectationFor(t);
    expect(trust.verify(exp, blob(ED_A))).toMatchObject({ trustedBy: 'known_hosts', fingerprint: ED_A_FP, algorithm: 'ssh-ed25519' });
    const err = (() => {
      try {
        trust.verify(exp, blob(ED_B));
      } catch (e) {
        return e;
      }
    })() as SshHostKeyChangedError;
    expect(err).toBeInstanceOf(SshHostKeyChangedError);
    expect(err.message).toContain('HOST KEY CHANGED for root@10.0.0.1:22');
    expect(err.message).toContain(`expected ${ED_A_FP} (from ${kh}:1)`);
    expect(err.message).toContain(`presented ssh-ed25519 ${fingerprintOf(blob(ED_B))}`);
    expect(trust.pinnedKeys()).toEqual([]);
  });

  it('offers the known key type first, so a host with several keys presents the known one', async () => {
    const trust = new HostKeyTrust({ knownHostsFiles: [kh] });
    expect((await trust.expectationFor(target('10.0.0.3'))).preferredAlgorithms).toEqual(['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa']);
    expect((await trust.expectationFor(target('10.0.0.4'))).preferredAlgorithms).toEqual([]);
  });

  it('refuses a revoked key even when pinning is allowed', async () => {
    const trust = new HostKeyTrust({ knownHostsFiles: [kh], allowPinning: true });
    expect(() => trust.verify({ ...emptyExpectation(target('10.0.0.2')), revoked: [{ marker: 'revoked', keyType: 'ssh-ed25519', keyBlob: blob(ED_B), source: 'kh:2' }] }, blob(ED_B))).toThrow(
      SshHostKeyRevokedError,
    );
  });

  it('trusts configured fingerprints', async () => {
    const trust = new HostKeyTrust({ knownHostsFiles: [join(dir, 'missing')] });
    const exp = await trust.expectationFor(target('h', 22, { host_key_fingerprints: [RSA_C_FP, `${ED_A_FP.slice(7)}`] }));
    expect(trust.verify(exp, blob(ED_A)).trustedBy).toBe('fingerprint');
    expect(() => trust.verify(exp, blob(ED_B))).toThrow(/expected SHA256:abO2\S+ or SHA256:\/\+9Y\S+ \(from host_key_fingerprints\)/);
  });

  it('pins an unknown host only when allowed, then holds to the pinned key', async () => {
    expect(() => new HostKeyTrust().verify(emptyExpectation(target('new')), blob(ED_A))).toThrow(SshHostKeyUnknownError);
    const trust = new HostKeyTrust({ allowPinning: true });
    const pinned = trust.verify(await trust.expectationFor(target('new', 2022)), blob(ED_A));
    expect(pinned).toMatchObject({ trustedBy: 'pinned', fingerprint: ED_A_FP, knownHostsLine: `[new]:2022 ssh-ed25519 ${ED_A}` });
    const again = await trust.expectationFor(target('new', 2022));
    expect(trust.verify(again, blob(ED_A)).trustedBy).toBe('pinned');
    expect(() => trust.verify(again, blob(ED_B))).toThrow(/from the key pinned at first contact/);
    expect(trust.pinnedKeys()).toHaveLength(1);
  });
});

function emptyExpectation(t: SshTarget) {
  return { target: t, knownKeys: [], revoked: [], fingerprints: [], pinnedFingerprint: null, preferredAlgorithms: [] };
}

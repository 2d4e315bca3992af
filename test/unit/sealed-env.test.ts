import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bindSealNonces, decideBinding } from '../../src/secrets/seal-binding';
import { isSealed, newSealNonce, openEnv, openValue, sealedEntries, sealEnv, sealValue, SecretKeyError } from '../../src/secrets/sealed-env';

const key = randomBytes(32);
const victim = { runWorkflowId: 'run/victim', nonce: newSealNonce() };

describe('sealed env values are bound to their run', () => {
  it('open for the run they were sealed for, under their own name', () => {
    const sealed = sealValue('HF_TOKEN', 'hf_secret', key, victim);
    expect(sealed.startsWith('sealed:v2:')).toBe(true);
    expect(sealed).not.toContain('hf_secret');
    expect(openValue('HF_TOKEN', sealed, key, 'run/victim')).toBe('hf_secret');
  });

  it('do not open in another run, under another name, or with another key', () => {
    const sealed = sealValue('HF_TOKEN', 'hf_secret', key, victim);
    expect(() => openValue('HF_TOKEN', sealed, key, 'run/thief')).toThrow(/does not open for run run\/thief/);
    expect(() => openValue('OTHER', sealed, key, 'run/victim')).toThrow(SecretKeyError);
    expect(() => openValue('HF_TOKEN', sealed, randomBytes(32), 'run/victim')).toThrow(SecretKeyError);
  });

  it('do not open with their nonce swapped for another (the nonce is authenticated)', () => {
    const sealed = sealValue('HF_TOKEN', 'hf_secret', key, victim);
    const swapped = sealed.replace(victim.nonce, newSealNonce());
    expect(() => openValue('HF_TOKEN', swapped, key, 'run/victim')).toThrow(SecretKeyError);
  });

  it('refuse the unbound v1 format with what to do', () => {
    expect(isSealed('sealed:v1:abc:def')).toBe(true);
    expect(() => openValue('X', 'sealed:v1:abc:def', key, 'run/victim')).toThrow(/no longer opens.*submit the run again/);
  });

  it('seal and open a whole env; the entries carry the submission nonce', () => {
    const env = sealEnv({ A_KEY: 'a', PLAIN: 'p' }, ['A_KEY'], key, victim);
    expect(sealedEntries(env)).toEqual([{ name: 'A_KEY', nonce: victim.nonce }]);
    expect(openEnv(env, () => key, 'run/victim')).toEqual({ A_KEY: 'a', PLAIN: 'p' });
    expect(() => openEnv(env, () => key, 'run/thief')).toThrow(SecretKeyError);
  });
});

describe('a seal nonce is bound to the first execution that used it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-seal-bindings-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const first = { workflowId: 'run/victim', firstRunId: 'r-1' };

  it('decides: bind when unknown, the same run again, another execution refused', () => {
    expect(decideBinding(null, first)).toBe('bind');
    expect(decideBinding(first, { ...first })).toBe('same-run');
    expect(decideBinding(first, { workflowId: 'run/victim', firstRunId: 'r-2' })).toBe('other-run');
    expect(decideBinding(first, { workflowId: 'run/thief', firstRunId: 'r-1' })).toBe('other-run');
  });

  it('records the first use (files 0600 in a 0700 directory), takes the same run again, refuses a later run of the same id', () => {
    const entries = [{ name: 'HF_TOKEN', nonce: newSealNonce() }];
    bindSealNonces(entries, first, dir);
    bindSealNonces(entries, first, dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const [file] = readdirSync(dir);
    expect(statSync(join(dir, file ?? '')).mode & 0o777).toBe(0o600);
    expect(() => bindSealNonces(entries, { workflowId: 'run/victim', firstRunId: 'r-2' }, dir)).toThrow(
      /env HF_TOKEN: this sealed value belongs to an earlier run of run\/victim/,
    );
  });
});

import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bindSealNonces, decideBinding, decideSealOpening, OPEN_WINDOW_MS, SEAL_CLOCK_SKEW_MS, type SealFacts } from '../../src/secrets/seal-binding';
import { isSealed, newSeal, newSealNonce, openEnv, openValue, sealedEntries, sealEnv, sealValue, SecretKeyError } from '../../src/secrets/sealed-env';

const key = randomBytes(32);
const victim = newSeal('run/victim');

describe('sealed env values are bound to their run', () => {
  it('open for the run they were sealed for, under their own name', () => {
    const sealed = sealValue('HF_TOKEN', 'hf_secret', key, victim);
    expect(sealed.startsWith(`sealed:v3:${victim.sealedAtMs}:${victim.nonce}:`)).toBe(true);
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

  it('do not open with their seal time changed (the time is authenticated)', () => {
    const sealed = sealValue('HF_TOKEN', 'hf_secret', key, victim);
    const moved = sealed.replace(`:${victim.sealedAtMs}:`, `:${victim.sealedAtMs + 3_600_000}:`);
    expect(sealedEntries({ HF_TOKEN: moved })).toEqual([{ name: 'HF_TOKEN', nonce: victim.nonce, sealedAtMs: victim.sealedAtMs + 3_600_000 }]);
    expect(() => openValue('HF_TOKEN', moved, key, 'run/victim')).toThrow(SecretKeyError);
  });

  it('refuse the formats without a seal time (v1, v2) with what to do', () => {
    expect(isSealed('sealed:v1:abc:def')).toBe(true);
    expect(() => openValue('X', 'sealed:v1:abc:def', key, 'run/victim')).toThrow(/no longer opens.*without a seal time.*submit the run again/);
    const v2 = `sealed:v2:${victim.nonce}:aXY=:${Buffer.alloc(20).toString('base64')}`;
    expect(() => sealedEntries({ HF_TOKEN: v2 })).toThrow(/env HF_TOKEN: sealed in a format this worker no longer opens \(sealed:v2:…, without a seal time\)/);
  });

  it('seal and open a whole env; the entries carry the submission nonce', () => {
    const env = sealEnv({ A_KEY: 'a', PLAIN: 'p' }, ['A_KEY'], key, victim);
    expect(sealedEntries(env)).toEqual([{ name: 'A_KEY', nonce: victim.nonce, sealedAtMs: victim.sealedAtMs }]);
    expect(openEnv(env, () => key, 'run/victim')).toEqual({ A_KEY: 'a', PLAIN: 'p' });
    expect(() => openEnv(env, () => key, 'run/thief')).toThrow(SecretKeyError);
  });
});

const T = Date.UTC(2026, 0, 1, 12);
const HOUR = 3_600_000;
/** A run started a minute after the sealing, nothing earlier carrying the nonce, a day's retention. */
const fresh: SealFacts = { runStartMs: T + 60_000, earlierCarrying: [], retentionMs: 24 * HOUR };

describe('decideSealOpening: whether a run may first open a submission', () => {
  it('opens for a run started within the window with no earlier run carrying the nonce', () => {
    expect(decideSealOpening(T, fresh, T + 2 * 60_000)).toEqual({ kind: 'open' });
    // Up to the window after the sealing; and a service's run started days before an apply sealed its new plan.
    expect(decideSealOpening(T, { ...fresh, runStartMs: T + OPEN_WINDOW_MS }, T + OPEN_WINDOW_MS)).toEqual({ kind: 'open' });
    expect(decideSealOpening(T, { ...fresh, runStartMs: T - 72 * HOUR }, T + 60_000)).toEqual({ kind: 'open' });
  });

  it('refuses when an earlier execution of the workflow id carries the nonce', () => {
    expect(decideSealOpening(T, { ...fresh, earlierCarrying: ['r-victim'] }, T + HOUR)).toEqual({ kind: 'earlier-run', runId: 'r-victim' });
  });

  it('refuses a value sealed later than the worker clock says it is (beyond the clock skew)', () => {
    expect(decideSealOpening(T, fresh, T - SEAL_CLOCK_SKEW_MS)).toEqual({ kind: 'open' });
    expect(decideSealOpening(T, fresh, T - SEAL_CLOCK_SKEW_MS - 1)).toEqual({ kind: 'sealed-in-future' });
  });

  it('refuses a run started more than the window after the sealing', () => {
    expect(decideSealOpening(T, { ...fresh, runStartMs: T + OPEN_WINDOW_MS + 1 }, T + 2 * HOUR)).toEqual({ kind: 'started-too-late' });
  });

  it('refuses once an earlier run may have left the namespace (retention after the sealing)', () => {
    const retentionMs = 24 * HOUR;
    expect(decideSealOpening(T, fresh, T - SEAL_CLOCK_SKEW_MS + retentionMs - 1)).toEqual({ kind: 'open' });
    expect(decideSealOpening(T, fresh, T - SEAL_CLOCK_SKEW_MS + retentionMs)).toEqual({ kind: 'too-old-to-prove' });
  });

  it('refuses everything when the retention does not outlast the window, whatever else holds', () => {
    expect(decideSealOpening(T, { ...fresh, retentionMs: OPEN_WINDOW_MS + SEAL_CLOCK_SKEW_MS }, T)).toEqual({ kind: 'retention-too-short' });
    expect(decideSealOpening(T, { ...fresh, retentionMs: OPEN_WINDOW_MS + SEAL_CLOCK_SKEW_MS + 1 }, T)).toEqual({ kind: 'open' });
  });
});

describe('a seal nonce is bound to the first execution that used it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-seal-bindings-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const first = { workflowId: 'run/victim', firstRunId: 'r-1' };
  const now = () => T + 2 * 60_000;
  /** Temporal's answers, counted: `earlier` carries the nonce when given. */
  const temporal = (facts: Partial<SealFacts> = {}) => {
    const asked: string[] = [];
    const factsOf = async (run: { firstRunId: string }) => {
      asked.push(run.firstRunId);
      return { ...fresh, ...facts };
    };
    return { asked, factsOf };
  };

  it('decides locally: unknown, the same run again, another execution refused', () => {
    expect(decideBinding(null, first)).toBe('bind');
    expect(decideBinding(first, { ...first })).toBe('same-run');
    expect(decideBinding(first, { workflowId: 'run/victim', firstRunId: 'r-2' })).toBe('other-run');
    expect(decideBinding(first, { workflowId: 'run/thief', firstRunId: 'r-1' })).toBe('other-run');
  });

  it('asks Temporal once, records the answer (files 0600 in a 0700 directory), then refuses a later run of the same id from the record', async () => {
    const entries = [{ name: 'HF_TOKEN', nonce: newSealNonce(), sealedAtMs: T }];
    const { asked, factsOf } = temporal();
    await bindSealNonces(entries, first, factsOf, { dir, now });
    await bindSealNonces(entries, first, factsOf, { dir, now });
    expect(asked).toEqual(['r-1']);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const [file] = readdirSync(dir);
    expect(statSync(join(dir, file ?? '')).mode & 0o777).toBe(0o600);
    await expect(bindSealNonces(entries, { workflowId: 'run/victim', firstRunId: 'r-2' }, factsOf, { dir, now })).rejects.toThrow(
      /env HF_TOKEN: this sealed value belongs to an earlier run of run\/victim/,
    );
    expect(asked).toEqual(['r-1']);
  });

  it('on a machine with no record, refuses what Temporal shows an earlier run carries, and records nothing', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'troupe-seal-bindings-'));
    try {
      const entries = [{ name: 'HF_TOKEN', nonce: newSealNonce(), sealedAtMs: T }];
      const { factsOf } = temporal({ earlierCarrying: ['r-1'] });
      const thief = { workflowId: 'run/victim', firstRunId: 'r-2' };
      await expect(bindSealNonces(entries, thief, factsOf, { dir: empty, now })).rejects.toThrow(
        /^env HF_TOKEN: this sealed value belongs to an earlier run of run\/victim \(execution r-1, not r-2\); .*submit again/,
      );
      expect(readdirSync(empty)).toEqual([]);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('names the variable and what to do in each refusal', async () => {
    const cases: Array<[Partial<SealFacts>, RegExp]> = [
      [{ runStartMs: T + 2 * HOUR }, /^env A_TOKEN: execution r-9 of run\/x started at .*, more than 1 h after this value was sealed/],
      [{ retentionMs: HOUR }, /^env A_TOKEN: the namespace keeps closed workflows for 1 h, .*set its retention above 1.17 h \(temporal operator namespace update --retention\)/],
    ];
    for (const [facts, message] of cases) {
      const { factsOf } = temporal(facts);
      await expect(bindSealNonces([{ name: 'A_TOKEN', nonce: newSealNonce(), sealedAtMs: T }], { workflowId: 'run/x', firstRunId: 'r-9' }, factsOf, { dir, now })).rejects.toThrow(message);
    }
    const { factsOf } = temporal();
    await expect(bindSealNonces([{ name: 'A_TOKEN', nonce: newSealNonce(), sealedAtMs: T }], first, factsOf, { dir, now: () => T + 30 * HOUR })).rejects.toThrow(
      /^env A_TOKEN: this sealed value was sealed at .*, longer ago than the namespace's retention \(24 h\), and this worker machine has not opened it before/,
    );
    await expect(bindSealNonces([{ name: 'A_TOKEN', nonce: newSealNonce(), sealedAtMs: T }], first, factsOf, { dir, now: () => T - HOUR })).rejects.toThrow(
      /^env A_TOKEN: this sealed value was sealed at 2026-01-01T12:00:00.000Z, later than this worker's clock says it is: .*submit again/,
    );
  });
});

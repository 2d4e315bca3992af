import { describe, expect, it } from 'vitest';
import { isFdShortage, retryFdShortage } from '../../src/concurrency/fd-shortage';

const errno = (code: string) => Object.assign(new Error(`${code}: too many open files`), { code });

describe('retryFdShortage', () => {
  it('waits out EMFILE and ENFILE, then returns what the call returns', async () => {
    let calls = 0;
    const value = await retryFdShortage(async () => {
      calls += 1;
      if (calls === 1) throw errno('EMFILE');
      if (calls === 2) throw errno('ENFILE');
      return 'done';
    });
    expect(value).toBe('done');
    expect(calls).toBe(3);
  });

  it('throws any other error at once, and the last shortage past its time', async () => {
    let calls = 0;
    await expect(retryFdShortage(async () => {
      calls += 1;
      throw errno('EACCES');
    })).rejects.toThrow('EACCES');
    expect(calls).toBe(1);
    await expect(retryFdShortage(async () => {
      throw errno('EMFILE');
    }, 50)).rejects.toThrow('EMFILE');
    expect(isFdShortage(errno('EMFILE'))).toBe(true);
    expect(isFdShortage(new Error('EMFILE'))).toBe(false);
  });
});

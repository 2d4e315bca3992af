import { setTimeout as sleep } from 'node:timers/promises';

/** EMFILE (this process) or ENFILE (the machine): out of file descriptors, which passes once others are closed. */
export function isFdShortage(err: unknown): boolean {
  const code = err instanceof Error ? (err as NodeJS.ErrnoException).code : undefined;
  return code === 'EMFILE' || code === 'ENFILE';
}

/**
 * `fn`, tried again while it fails for want of file descriptors (a wait that doubles from 10 ms
 * up to 1 s, for about 30 s in all): a busy moment is waited out instead of failing a job or a
 * teardown. Other errors are thrown at once; so is the last shortage.
 */
export async function retryFdShortage<T>(fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let pause = 10; ; pause = Math.min(pause * 2, 1_000)) {
    try {
      return await fn();
    } catch (err) {
      if (!isFdShortage(err) || Date.now() + pause > deadline) throw err;
    }
    await sleep(pause);
  }
}

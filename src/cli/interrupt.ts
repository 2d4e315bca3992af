/**
 * Ctrl-C (and SIGTERM) as an AbortSignal for a command that follows a run: the first one asks the
 * command to let go, a second one exits at once.
 */
export interface Interrupt {
  signal: AbortSignal;
  /** Resolves when interrupted: race it against the work to let go without waiting for a poll. */
  interrupted: Promise<'interrupted'>;
  /**
   * Lets go after a Ctrl-C: once what was printed has reached stdout and stderr, the process exits
   * with 130 there and then. The command's calls still in flight are not waited for, and the
   * connection is not closed under them: the SDK would try such a call again on the closed channel,
   * and that throws outside any caller ("Channel has been shut down").
   */
  letGo(): Promise<never>;
  dispose(): void;
}

export function onInterrupt(): Interrupt {
  const controller = new AbortController();
  const handler = () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort();
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  const interrupted = new Promise<'interrupted'>((resolve) => {
    controller.signal.addEventListener('abort', () => resolve('interrupted'), { once: true });
  });
  return {
    signal: controller.signal,
    interrupted,
    letGo: async () => {
      await Promise.all([drained(process.stdout), drained(process.stderr)]);
      process.exit(130);
    },
    dispose: () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}

/** Resolves once everything written to `stream` so far has been handed to the system. */
async function drained(stream: NodeJS.WriteStream): Promise<void> {
  await new Promise<void>((resolve) => stream.write('', () => resolve()));
}

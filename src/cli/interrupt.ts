/**
 * Ctrl-C (and SIGTERM) as an AbortSignal for a command that follows a run: the first one asks the
 * command to let go, a second one exits at once.
 */
export interface Interrupt {
  signal: AbortSignal;
  /** Resolves when interrupted: race it against the work to let go without waiting for a poll. */
  interrupted: Promise<'interrupted'>;
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
    dispose: () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}

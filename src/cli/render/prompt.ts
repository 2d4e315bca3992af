import { createInterface } from 'node:readline/promises';
import { CliError } from '../command';

/** Refuses, as a usage error, to ask a question nobody can answer (no terminal on stdin). */
export function assertCanAsk(flagToSkip: string): void {
  if (!process.stdin.isTTY) {
    throw new CliError(`stdin is not a terminal, so troupe cannot ask you to confirm: pass ${flagToSkip} to go ahead without asking`, 2);
  }
}

/** A yes/no question on the terminal; anything but y/yes (or Ctrl-C) is no. */
export async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  const cancel = new AbortController();
  rl.on('SIGINT', () => cancel.abort());
  try {
    const answer = await rl.question(`${question} [y/N] `, { signal: cancel.signal });
    return /^y(es)?$/i.test(answer.trim());
  } catch {
    process.stderr.write('\n');
    return false;
  } finally {
    rl.close();
  }
}

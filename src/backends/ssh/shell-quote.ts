/**
 * POSIX single-quoting: the only character that needs care inside '...' is the quote itself.
 * Safe for any string without NUL (which no argv or env value can hold anyway).
 */
export function shQuote(value: string): string {
  if (value.includes('\0')) throw new Error('cannot pass a NUL character to a shell');
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/**
 * The command line sent in an SSH exec request. The login shell runs it; the inner bash skips
 * profile and rc files so a user's .bashrc (slow, or printing) cannot change what the script does.
 * sshd does not signal a command whose channel closes, so `timeout` ends the script's whole
 * process group on the host when the caller's deadline has passed (a second after it).
 */
export function bashCommandLine(script: string, deadlineMs: number): string {
  const seconds = Math.ceil(deadlineMs / 1000) + 1;
  return `exec timeout -s KILL ${seconds} bash --noprofile --norc -c ${shQuote(script)}`;
}

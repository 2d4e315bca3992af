/**
 * What `fn` cost in CPU time (user + system of this process, in ms), with its value or its error.
 *
 * Tests that guard against a blow-up (a quadratic parse, an expanded alias bomb) bound CPU time,
 * never the wall clock: on a loaded machine the wall clock also counts the wait for a core (×9 at
 * load 18 on two cores), CPU time only the work done. vitest runs each file in a fork of its own
 * (`pool: 'forks'`), so no other file's work is counted. How long things take is a bench's business.
 */
export function cpuTimed<T>(fn: () => T): { value?: T; error?: unknown; cpuMs: number } {
  const before = process.cpuUsage();
  const cpuMs = () => {
    const used = process.cpuUsage(before);
    return (used.user + used.system) / 1000;
  };
  try {
    const value = fn();
    return { value, cpuMs: cpuMs() };
  } catch (error) {
    return { error, cpuMs: cpuMs() };
  }
}

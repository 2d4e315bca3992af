/**
 * The steps of a test under load, each timed from the load's start (`began → ended` in seconds),
 * for the test's report: what happened when, and whether it all happened while the load ran.
 */
export function timedSteps(start = Date.now()): { lines: string[]; step: <T>(what: string, act: () => Promise<T>) => Promise<T> } {
  const lines: string[] = [];
  const seconds = (at: number) => ((at - start) / 1000).toFixed(1);
  return {
    lines,
    step: async (what, act) => {
      const began = Date.now();
      const result = await act();
      lines.push(`${what}: ${seconds(began)} s → ${seconds(Date.now())} s`);
      return result;
    },
  };
}

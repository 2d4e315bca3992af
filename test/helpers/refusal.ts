/** The error `fn` throws, which must be a `type` (anything else is rethrown): what a test of a refusal reads. */
export function thrownBy<E extends Error>(fn: () => unknown, type: abstract new (...args: never[]) => E): E {
  try {
    fn();
  } catch (err) {
    if (err instanceof type) return err;
    throw err;
  }
  throw new Error(`expected a ${type.name}, nothing was thrown`);
}

import type { Context } from '@temporalio/activity';
import type { Backend, JobEndWatch, JobRef } from '../src/backends/backend';

/**
 * A batch's jobs as a backend that pushes their ends names them (Backend.watchEnds): after a first
 * round that checks every job, a round checks only the jobs named since, and the pause between
 * rounds ends early when one is named. Without the capability a batch checks every job every round.
 */
export class PushedEnds {
  private readonly named = new Set<number>();
  private wake: () => void = () => undefined;
  private firstRound = true;
  private readonly watch: JobEndWatch;

  constructor(watchEnds: NonNullable<Backend['watchEnds']>, refs: JobRef[], pollMs: number) {
    this.watch = watchEnds(refs, pollMs, (jobNums) => {
      for (const n of jobNums) this.named.add(n);
      this.wake();
    });
  }

  /** The jobs to check this round (each taken off the named ones): every job the first time, then the named ones and those `always` keeps. */
  pick<T extends { ref: JobRef }>(jobs: readonly T[], always: (job: T) => boolean): T[] {
    const picked = this.firstRound ? [...jobs] : jobs.filter((job) => this.named.has(job.ref.job_num) || always(job));
    this.firstRound = false;
    for (const job of picked) this.named.delete(job.ref.job_num);
    return picked;
  }

  /** Sleeps `ms`, or until a job of `live` is named (at once if one is already). */
  async pause(ctx: Context, ms: number, live: ReadonlyMap<number, unknown>): Promise<void> {
    if ([...this.named].some((n) => live.has(n))) return;
    await Promise.race([ctx.sleep(ms), new Promise<void>((resolve) => (this.wake = resolve))]);
    this.wake = () => undefined;
  }

  close(): void {
    this.watch.close();
  }
}

/** The pushed ends of these jobs when the backend has them, else null. */
export function pushedEnds(target: Backend, refs: JobRef[], pollMs: number): PushedEnds | null {
  return target.watchEnds ? new PushedEnds(target.watchEnds.bind(target), refs, pollMs) : null;
}

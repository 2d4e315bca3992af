import type { JobEndWatch } from '../backend';
import { mapLimit } from '../../concurrency/map-limit';
import { readClaim } from './job-process';
import { spawner, type EndWatch } from './spawner';

/**
 * Local jobs' ends pushed to the batch that supervises them (Backend.watchEnds): each job's wrapper
 * (the leader recorded in `started/pid`) is watched by the spawn helper, which is its parent when
 * this worker started it (its exit comes with SIGCHLD) and watches it by pidfd otherwise (a job
 * started by a worker that died: spawn-helper.mjs, pidfd-watch.pl). The wrapper exits only after
 * writing the job's exit code, so once it is named the job's files tell how it ended.
 *
 * The watch is on a process identified by pid and start time, so an end before the watch began (no
 * worker running, a pid reused since) is named at once. A job the helper cannot watch now (it is
 * starting, or was lost with a worker's crash of its own, no perl, no descriptor left) is named every
 * `pollMs`, as if polled, and its watch tried again RETRY_PUSH_MS later.
 */

/** A job the helper could not watch is polled this long before the next try at pushing its end. */
const RETRY_PUSH_MS = 2_000;
/** Job directories read at once to arm the watches of a batch. */
const CLAIMS_IN_FLIGHT = 32;

export interface EndWatchedJob {
  job_num: number;
  dir: string;
}

export function watchLocalJobEnds(jobs: readonly EndWatchedJob[], pollMs: number, changed: (jobNums: number[]) => void): JobEndWatch {
  let closed = false;
  const watches = new Map<number, EndWatch>();
  const polled = new Set<number>();
  const retries = new Set<NodeJS.Timeout>();
  const poller = setInterval(() => {
    if (polled.size > 0) changed([...polled]);
  }, pollMs);

  const pollThenRetry = (job: EndWatchedJob) => {
    polled.add(job.job_num);
    const timer = setTimeout(() => {
      retries.delete(timer);
      void arm(job);
    }, RETRY_PUSH_MS);
    retries.add(timer);
  };

  const arm = async (job: EndWatchedJob): Promise<void> => {
    const claim = await readClaim(job.dir).catch(() => null);
    if (closed) return;
    // Stopped before it started: the caller's check finds it so. Not started yet (or unreadable now): polled a while.
    if (claim?.kind === 'stopped') return changed([job.job_num]);
    if (claim?.kind !== 'started') return pollThenRetry(job);
    const watch = spawner.watchEnd(claim.leader.pid, claim.leader.starttime);
    watches.set(job.job_num, watch);
    // Watched from now on: what happened before this is told by the watch too (the process is gone).
    polled.delete(job.job_num);
    void watch.ended.then((how) => {
      if (closed || watches.get(job.job_num) !== watch) return;
      watches.delete(job.job_num);
      if (how === 'ended') changed([job.job_num]);
      else pollThenRetry(job);
    });
  };

  void mapLimit(jobs, CLAIMS_IN_FLIGHT, arm);
  return {
    close: () => {
      closed = true;
      clearInterval(poller);
      for (const timer of retries) clearTimeout(timer);
      for (const watch of watches.values()) watch.cancel();
      watches.clear();
      polled.clear();
    },
  };
}

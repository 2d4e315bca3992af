import { describe, expect, it } from 'vitest';
import { InstanceUnreachableError, type ExecResult, type JobProcessState, type JobRef, type ReadinessState } from '../../src/backends/backend';
import type { ReadyProbe } from '../../src/plan/plan-schema';
import type { JobEvent } from '../../src/contract/messages';
import { instance } from '../helpers/run-core';
import { JobSupervisor, sendNow, type JobSupervisorOptions, type SupervisionRounds, type SupervisorClock } from '../../activities/job-supervisor';
import { job as planJob } from './runner-fixtures';

/**
 * JobSupervisor's decisions under a fake clock: what it reports when, what a lost host, a probe,
 * the run's gone signal and a cancellation do. No timer runs: time moves only when every promise
 * has settled and the supervisor waits on the clock.
 */

const START = 1_000_000;

class FakeClock implements SupervisorClock {
  private t = START;
  private timers: Array<{ at: number; resolve: () => void; reject: (err: unknown) => void }> = [];
  private cancelWith: (err: unknown) => void = () => undefined;
  private cancelledBy: unknown = null;
  readonly cancelled: Promise<never>;

  constructor() {
    this.cancelled = new Promise<never>((_, reject) => (this.cancelWith = reject));
    // As the SDK does: nobody need await it.
    this.cancelled.catch(() => undefined);
  }

  now = (): number => this.t;

  sleep = (ms: number): Promise<void> =>
    this.cancelledBy !== null
      ? Promise.reject(this.cancelledBy)
      : new Promise<void>((resolve, reject) => this.timers.push({ at: this.t + ms, resolve, reject }));

  cancel(err: unknown): void {
    this.cancelledBy = err;
    this.cancelWith(err);
    for (const timer of this.timers) timer.reject(err);
    this.timers = [];
  }

  /** Lets everything that can run without time passing run. */
  async settle(): Promise<void> {
    for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
  }

  /** Runs `work` to its end, moving time to the next timer whenever nothing else can run. */
  async drive<T>(work: Promise<T>, limitMs = 600_000): Promise<T> {
    let done = false;
    const watched = work.finally(() => (done = true));
    watched.catch(() => undefined);
    for (;;) {
      await this.settle();
      if (done) return watched;
      this.timers.sort((a, b) => a.at - b.at);
      const next = this.timers.shift();
      if (!next) throw new Error(`stuck at +${this.t - START}ms: nothing to wait for and not done`);
      if (next.at - START > limitMs) throw new Error(`still running at +${next.at - START}ms`);
      this.t = Math.max(this.t, next.at);
      next.resolve();
    }
  }
}

/** Job `n` of a one-submission run, on `host-n`. */
const ref = (n: number, attempt = 0): JobRef => ({ run_id: 'run-1', run_name: 'pd', submission: 0, job_num: n, job_name: `pd-${n}-0`, ...(attempt ? { attempt } : {}), instance: { ...instance(n), host: `host-${n}` } });

/** What a job's process is at a time since the start (ms): a script per job. */
type StateAt = (sinceMs: number) => JobProcessState | 'unreachable';
const runningUntil =
  (ms: number, exitCode = 0): StateAt =>
  (since) =>
    since >= ms ? { state: 'exited', pid: 7, exit_code: exitCode } : { state: 'running', pid: 7 };

interface Scenario {
  jobs: StateAt[];
  probe?: ReadyProbe | null;
  /** A probe through exec(): its answer at a time since the start. */
  exec?: (jobNum: number, sinceMs: number) => ExecResult;
  /** A backend that probes on the node. */
  readiness?: (jobNum: number, sinceMs: number) => ReadinessState;
  /** The run's signal: true (taken), false (the run is gone), or an error thrown. */
  send?: (events: JobEvent[]) => Promise<boolean>;
  rounds?: (clock: FakeClock) => SupervisionRounds;
  intervalMs?: number;
  startedMs?: number;
  attempts?: number[];
}

function setUp(s: Scenario) {
  const clock = new FakeClock();
  const since = () => clock.now() - START;
  const refs = s.jobs.map((_, i) => ref(i, s.attempts?.[i] ?? 0));
  const sent: Array<{ at: number; events: JobEvent[] }> = [];
  const ended: number[] = [];
  const stateCalls: number[] = [];
  const target: JobSupervisorOptions['target'] = {
    jobState: async (job) => {
      stateCalls.push(job.job_num);
      const state = s.jobs[job.job_num]?.(since()) ?? { state: 'absent' };
      if (state === 'unreachable') throw new InstanceUnreachableError(`ssh: connect to ${job.instance.host}: timed out`);
      return state;
    },
    exec: async (job) => s.exec?.(job.job_num, since()) ?? { exit_code: 1, output: '' },
    ...(s.readiness ? { readiness: async (job: JobRef) => s.readiness?.(job.job_num, since()) ?? { state: 'pending' } } : {}),
  };
  const supervisor = new JobSupervisor({
    target,
    input: { jobs: refs.map((r, i) => ({ ref: r, plan_job: planJob(i, 0, 'workers', i) })), probe: s.probe ?? null, interval_ms: s.intervalMs ?? 1_000 },
    refs,
    startedMs: START + (s.startedMs ?? 0),
    send: async (events) => {
      sent.push({ at: since(), events: [...events] });
      return s.send ? s.send(events) : true;
    },
    clock,
    ended: (n) => ended.push(n),
    rounds: s.rounds?.(clock) ?? null,
  });
  return { clock, supervisor, sent, ended, stateCalls };
}

/** A short view of an event: kind, job, and what matters of it. */
function brief(e: JobEvent): string {
  if (e.kind === 'exited') return `exited ${e.job_num}${e.attempt ? `.${e.attempt}` : ''} code ${e.exit_code}`;
  if (e.kind === 'failed') return `failed ${e.job_num} ${e.reason} ${e.retry_event}`;
  return `${e.kind} ${e.job_num}${'attempt' in e && e.attempt ? `.${e.attempt}` : ''}`;
}

const httpProbe: ReadyProbe = { check: { kind: 'http', port: 8000, path: '/health' }, interval_s: 2, timeout_s: 10 };

describe('sendNow: what the supervisor sends at once and what it gathers', () => {
  const exit = (code: number): JobEvent => ({ kind: 'exited', job_num: 1, exit_code: code });
  const ready: JobEvent = { kind: 'ready', job_num: 1 };
  const cases: Array<[string, JobEvent[], number, number, boolean]> = [
    // name, pending, jobs still live, ms since the first pending event, sent now?
    ['nothing to send', [], 0, 5_000, false],
    ['a clean exit, small batch', [exit(0)], 16, 0, true],
    ['clean exits, large batch, within the second', [exit(0), exit(0)], 17, 999, false],
    ['clean exits, large batch, a second on', [exit(0), exit(0)], 17, 1_000, true],
    ['a failed exit, large batch', [exit(0), exit(3)], 500, 0, true],
    ['readiness, large batch', [ready], 500, 0, true],
    ['the last exit', [exit(0)], 0, 0, true],
  ];
  it.each(cases)('%s', (_name, pending, live, sinceMs, expected) => {
    expect(sendNow(pending, live, START, START + sinceMs)).toBe(expected);
  });
});

describe('JobSupervisor: what it reports, and when', () => {
  const cases: Array<{ name: string; scenario: Scenario; sent: Array<[number, string[]]>; ended: number[] }> = [
    {
      name: 'an exit, at the first check after it',
      scenario: { jobs: [runningUntil(2_500, 0)] },
      sent: [[3_000, ['exited 0 code 0']]],
      ended: [0],
    },
    {
      name: 'a job attempt, named by its attempt',
      scenario: { jobs: [runningUntil(0, 4)], attempts: [2] },
      sent: [[0, ['exited 0.2 code 4']]],
      ended: [0],
    },
    {
      name: 'a vanished job is a failure',
      scenario: { jobs: [() => ({ state: 'absent' })] },
      sent: [[0, ['failed 0 EXECUTOR_ERROR error']]],
      ended: [0],
    },
    {
      name: 'a host unreachable for more than 30 s is lost; the other job goes on',
      scenario: { jobs: [() => 'unreachable', runningUntil(40_000)] },
      sent: [
        [31_000, ['failed 0 INSTANCE_UNREACHABLE interruption']],
        [40_000, ['exited 1 code 0']],
      ],
      ended: [0, 1],
    },
    {
      name: 'a host that answers again within 30 s is not lost',
      scenario: { jobs: [(t) => (t < 20_000 || (t >= 25_000 && t < 45_000) ? 'unreachable' : runningUntil(50_000)(t))] },
      sent: [[50_000, ['exited 0 code 0']]],
      ended: [0],
    },
    {
      name: 'many clean exits of a large batch are gathered for a second',
      scenario: { jobs: Array.from({ length: 40 }, (_, i) => runningUntil(i < 5 ? 0 : i < 10 ? 1_000 : 5_000)) },
      sent: [
        [1_000, Array.from({ length: 10 }, (_, i) => `exited ${i} code 0`)],
        [5_000, Array.from({ length: 30 }, (_, i) => `exited ${i + 10} code 0`)],
      ],
      ended: Array.from({ length: 40 }, (_, i) => i),
    },
    {
      name: 'a failed exit in a large batch goes at once, with the clean ones gathered',
      scenario: { jobs: Array.from({ length: 40 }, (_, i) => runningUntil(i < 3 ? 0 : i === 3 ? 1_000 : 9_000, i === 3 ? 1 : 0)) },
      sent: [
        [1_000, ['exited 0 code 0', 'exited 1 code 0', 'exited 2 code 0', 'exited 3 code 1']],
        [9_000, Array.from({ length: 36 }, (_, i) => `exited ${i + 4} code 0`)],
      ],
      ended: Array.from({ length: 40 }, (_, i) => i),
    },
    {
      name: 'readiness by exec, found before the exit, is sent before it',
      scenario: { jobs: [runningUntil(4_500)], probe: httpProbe, exec: (_n, t) => (t >= 2_000 ? { exit_code: 0, output: '' } : { exit_code: 7, output: '' }) },
      sent: [
        [2_000, ['ready 0']],
        [5_000, ['exited 0 code 0']],
      ],
      ended: [0],
    },
    {
      name: 'a probe that never passes fails the job at its deadline; the job runs on',
      scenario: { jobs: [runningUntil(20_000)], probe: httpProbe },
      sent: [
        [8_000, ['failed 0 WAITING_READY_LIMIT_EXCEEDED error']],
        [20_000, ['exited 0 code 0']],
      ],
      ended: [0],
    },
    {
      name: 'the deadline counts from the first attempt, not this one',
      scenario: { jobs: [runningUntil(20_000)], probe: httpProbe, startedMs: -9_000 },
      sent: [
        [0, ['failed 0 WAITING_READY_LIMIT_EXCEEDED error']],
        [20_000, ['exited 0 code 0']],
      ],
      ended: [0],
    },
    {
      name: "a backend's own readiness is asked each interval",
      scenario: { jobs: [runningUntil(6_000)], probe: httpProbe, readiness: (_n, t) => (t >= 3_000 ? { state: 'ready' } : { state: 'pending' }) },
      sent: [
        [3_000, ['ready 0']],
        [6_000, ['exited 0 code 0']],
      ],
      ended: [0],
    },
    {
      name: "a backend's not-ready answer fails the job",
      scenario: { jobs: [runningUntil(6_000)], probe: httpProbe, readiness: () => ({ state: 'not-ready', exit_code: 1, output: 'connection refused' }) },
      sent: [
        [0, ['failed 0 WAITING_READY_LIMIT_EXCEEDED error']],
        [6_000, ['exited 0 code 0']],
      ],
      ended: [0],
    },
    {
      name: 'readiness found in the round a job ends is sent with its exit, first',
      scenario: { jobs: [runningUntil(0)], probe: httpProbe, exec: () => ({ exit_code: 0, output: '' }) },
      sent: [[0, ['ready 0', 'exited 0 code 0']]],
      ended: [0],
    },
  ];

  it.each(cases)('$name', async ({ scenario, sent, ended }) => {
    const t = setUp(scenario);
    await t.clock.drive(t.supervisor.run());
    expect(t.sent.map(({ at, events }) => [at, events.map(brief)])).toEqual(sent);
    expect(t.ended).toEqual(ended);
  });

  it("names a lost host's and a failed probe's cause in the message", async () => {
    const t = setUp({ jobs: [() => 'unreachable', runningUntil(10_000)], probe: httpProbe, exec: () => ({ exit_code: 7, output: '' }) });
    await t.clock.drive(t.supervisor.run());
    const messages = t.sent.flatMap(({ events }) => events).flatMap((e) => (e.kind === 'failed' ? [e.message] : []));
    expect(messages).toEqual([
      'workers/0 not ready after 10s: http://10.0.0.1:8000/health → exit code 7',
      'workers/1 not ready after 10s: http://10.0.0.2:8000/health → exit code 7',
      'host-0 unreachable for 30s while running pd-0-0: ssh: connect to host-0: timed out',
    ]);
  });
  it('reports the reason a backend names for an exit (an OOM kill) with the code', async () => {
    const oom: StateAt = (since) => (since >= 2_000 ? { state: 'exited', pid: 7, exit_code: 137, reason: 'out of memory: limit 256 MiB' } : { state: 'running', pid: 7 });
    const t = setUp({ jobs: [oom] });
    await t.clock.drive(t.supervisor.run());
    const events = t.sent.flatMap(({ events }) => events);
    expect(events).toEqual([{ kind: 'exited', job_num: 0, exit_code: 137, reason: 'out of memory: limit 256 MiB' }]);
  });
});

describe('JobSupervisor: the run, its signal and a cancellation', () => {
  it('stops at once when the run is gone (its signal finds no workflow)', async () => {
    const t = setUp({ jobs: [runningUntil(0, 1), runningUntil(60_000)], send: async () => false });
    await t.clock.drive(t.supervisor.run());
    expect(t.sent.map(({ at }) => at)).toEqual([0]);
    expect(t.stateCalls).toEqual([0, 1]);
  });

  it('fails with the error when the signal fails otherwise (the activity is retried)', async () => {
    const t = setUp({
      jobs: [runningUntil(0, 1), runningUntil(60_000)],
      send: async () => {
        throw new Error('connection refused');
      },
    });
    await expect(t.clock.drive(t.supervisor.run())).rejects.toThrow('connection refused');
    expect(t.stateCalls).toEqual([0, 1]);
  });

  it('sends nothing after a cancellation between rounds, and rejects with it', async () => {
    const t = setUp({ jobs: [runningUntil(60_000)] });
    const running = t.supervisor.run();
    running.catch(() => undefined);
    await t.clock.settle();
    t.clock.cancel(new Error('cancelled'));
    await expect(t.clock.drive(running)).rejects.toThrow('cancelled');
    expect(t.sent).toEqual([]);
    expect(t.stateCalls).toEqual([0]);
  });

  it('does not wait for a hanging backend call once cancelled', async () => {
    const clock = new FakeClock();
    const hang: JobSupervisorOptions['target'] = { jobState: () => new Promise<JobProcessState>(() => undefined), exec: async () => ({ exit_code: 0, output: '' }) };
    const supervisor = new JobSupervisor({
      target: hang,
      input: { jobs: [], probe: null, interval_ms: 1_000 },
      refs: [ref(0)],
      startedMs: START,
      send: async () => true,
      clock,
    });
    const running = supervisor.run();
    running.catch(() => undefined);
    await clock.settle();
    clock.cancel(new Error('cancelled'));
    // drive() throws "stuck" if the supervisor still waits on the call.
    await expect(clock.drive(running)).rejects.toThrow('cancelled');
  });

  it('with pushed ends: checks every job first, then the named ones and the unreachable, and wakes when one is named', async () => {
    const named = new Set<number>();
    const pauses: number[] = [];
    const t = setUp({
      jobs: [runningUntil(3_000), (s) => (s < 1_000 ? 'unreachable' : runningUntil(50_000)(s)), runningUntil(50_000)],
      rounds: (clock) => {
        let first = true;
        return {
          pick: (jobs, always) => {
            const picked = first ? [...jobs] : jobs.filter((job) => named.has(job.ref.job_num) || always(job));
            first = false;
            for (const job of picked) named.delete(job.ref.job_num);
            return picked;
          },
          pause: async (ms) => {
            pauses.push(ms);
            await clock.sleep(ms);
            // The backend names job 0 at +3s, jobs 1 and 2 at +50s.
            const since = clock.now() - START;
            if (since === 3_000) named.add(0);
            if (since === 50_000) named.add(1).add(2);
          },
        };
      },
    });
    await t.clock.drive(t.supervisor.run());
    expect(t.stateCalls).toEqual([0, 1, 2, 1, 0, 1, 2]);
    expect(t.sent.map(({ at, events }) => [at, events.map(brief)])).toEqual([
      [3_000, ['exited 0 code 0']],
      [50_000, ['exited 1 code 0', 'exited 2 code 0']],
    ]);
    expect(pauses.every((ms) => ms === 1_000)).toBe(true);
  });
});

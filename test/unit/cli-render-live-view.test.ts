import { describe, expect, it } from 'vitest';
import { describeStateChanges, LiveView, type Terminal } from '../../src/cli/render/live-view';
import { LogLines } from '../../src/cli/render/log-lines';
import { plain } from '../../src/cli/render/style';
import type { JobState, RunState } from '../../src/contract/run-state';
import { instance, job, pdRun, pdRunning, t0 } from './cli-render-fixtures';

class Screen implements Terminal {
  text = '';
  constructor(
    readonly isTTY: boolean,
    readonly columns = 200,
  ) {}
  write(chunk: string): boolean {
    this.text += chunk;
    return true;
  }
}

/** The run as it moves: provisioning, addresses, running, one job done, the run done. */
function story(): RunState[] {
  const provisioning = pdRun();
  const addressed = pdRun(
    {},
    provisioning.jobs.map((j, i) => (i < 2 ? { ...j, status: 'PULLING', instance: instance(`127.0.0.${i + 2}`) } : j)),
  );
  const running = pdRunning();
  const oneDone = pdRunning();
  const job3 = oneDone.jobs[3];
  if (!job3) throw new Error('fixture');
  oneDone.jobs[3] = { ...job3, status: 'DONE', exit_code: 0, termination_reason: 'DONE_BY_RUNNER', finished_at: t0 };
  const done = pdRun(
    { status: 'DONE', termination_reason: 'ALL_JOBS_DONE', finished_at: '2025-01-01T12:00:30.000Z' },
    oneDone.jobs.map((j) => ({ ...j, status: 'DONE', exit_code: 0, termination_reason: 'DONE_BY_RUNNER' })),
  );
  return [provisioning, addressed, running, oneDone, done];
}

describe('live view', () => {
  it('off a terminal, appends one plain line per change and nothing when nothing changed', () => {
    const screen = new Screen(false);
    const view = new LiveView(screen, plain);
    const states = story();
    for (const state of states) {
      view.update(state);
      view.update(state);
    }
    expect(screen.text.split('\n')).toEqual([
      'pd: PROVISIONING',
      '  job 0 router/0: PROVISIONING',
      '  job 1 prefill/0: PROVISIONING',
      '  job 2 prefill/1: PROVISIONING',
      '  job 3 decode/0: PROVISIONING',
      '  job 0 router/0: PULLING on local (127.0.0.2)',
      '  job 1 prefill/0: PULLING on local (127.0.0.3)',
      'pd: RUNNING',
      '  job 0 router/0: RUNNING pid 1000',
      '  job 1 prefill/0: RUNNING pid 1001',
      '  job 2 prefill/1: RUNNING on local (127.0.0.4), pid 1002',
      '  job 3 decode/0: RUNNING on local (127.0.0.5), pid 1003',
      '  job 3 decode/0: DONE exit 0',
      '  job 0 router/0: DONE exit 0',
      '  job 1 prefill/0: DONE exit 0',
      '  job 2 prefill/1: DONE exit 0',
      'pd: DONE (ALL_JOBS_DONE)',
      '',
    ]);
    expect(screen.text).not.toContain('\x1b');
  });

  it('names the reason of a failed job and a resubmission', () => {
    const running = pdRunning();
    const failed = pdRunning();
    const job1 = failed.jobs[1];
    if (!job1) throw new Error('fixture');
    failed.jobs[1] = { ...job1, status: 'FAILED', exit_code: 3, termination_reason: 'CONTAINER_EXITED_WITH_ERROR', message: 'exited with code 3' };
    expect(describeStateChanges(running, failed, plain)).toEqual([
      '  job 1 prefill/0: FAILED exit 3 — CONTAINER_EXITED_WITH_ERROR: exited with code 3',
    ]);
    const again = pdRun({ submission: 1 });
    expect(describeStateChanges(failed, again, plain).slice(0, 3)).toEqual([
      'pd: resubmitted (attempt 2)',
      'pd: PROVISIONING',
      '  job 0 router/0: PROVISIONING',
    ]);
  });

  it('says which group waits for which, once per change', () => {
    const before = pdRun();
    const waiting = pdRun({
      groups: before.groups.map((g) => (g.name === 'router' ? { ...g, waiting_for: 'prefill (ready 0/2), decode (ready 1/1)' } : g)),
    });
    expect(describeStateChanges(before, waiting, plain)).toEqual(['  group router: waiting for prefill (ready 0/2), decode (ready 1/1)']);
    expect(describeStateChanges(waiting, waiting, plain)).toEqual([]);
    const screen = new Screen(true);
    new LiveView(screen, plain).update(waiting);
    expect(screen.text.trimEnd().split('\n').at(-1)).toBe(' group router waits for prefill (ready 0/2), decode (ready 1/1)');
  });

  it("says where a service is served once its table is on the gateways, with a curl line that works, and again when that changes", () => {
    const before = pdRun({ status: 'RUNNING', service: { endpoints: [], auth: true, table_generation: 1, deployment: 0, rollout: null } });
    const serving = pdRun({ status: 'RUNNING', service: { endpoints: ['http://127.0.0.1:8080/services/pd/'], auth: true, table_generation: 2, deployment: 0, rollout: null } });
    expect(describeStateChanges(before, serving, plain)).toEqual([
      'pd: endpoint http://127.0.0.1:8080/services/pd/',
      '  try: curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/services/pd/',
    ]);
    // A new generation with the same endpoints says nothing; an open service's curl has no token.
    expect(describeStateChanges(serving, { ...serving, service: { endpoints: ['http://127.0.0.1:8080/services/pd/'], auth: true, table_generation: 3, deployment: 0, rollout: null } }, plain)).toEqual([]);
    const open = pdRun({ status: 'RUNNING', service: { endpoints: ['http://gw/services/pd/'], auth: false, table_generation: 1, deployment: 0, rollout: null } });
    expect(describeStateChanges(serving, open, plain)).toEqual(['pd: endpoint http://gw/services/pd/', '  try: curl http://gw/services/pd/']);
  });

  it('on a terminal, redraws the frame in place: cursor up over the last frame, clear, draw', () => {
    const screen = new Screen(true);
    const view = new LiveView(screen, plain, () => new Date(Date.parse(t0) + 5000));
    const [first, second] = story();
    if (!first || !second) throw new Error('fixture');
    view.update(first);
    const firstFrame = screen.text;
    expect(firstFrame.split('\n')[0]).toBe('pd  PROVISIONING  local: router×1, prefill×2, decode×1  (submitted 5s ago)');
    expect(firstFrame.split('\n')).toHaveLength(1 + 1 + 4 + 1);
    expect(firstFrame).not.toContain('\x1b[');
    view.update(second);
    const redraw = screen.text.slice(firstFrame.length);
    expect(redraw.startsWith('\x1b[6A\x1b[0J')).toBe(true);
    expect(redraw).toContain('PULLING');
    expect(redraw).toContain('127.0.0.3');
  });

  it('on a narrow terminal, counts wrapped rows so the redraw covers the whole frame', () => {
    const screen = new Screen(true, 20);
    const view = new LiveView(screen, plain);
    const state = pdRun({}, [job(0, 0, 'router', 0)]);
    view.update(state);
    const rows = screen.text
      .trimEnd()
      .split('\n')
      .reduce((n, line) => n + Math.max(1, Math.ceil(line.length / 20)), 0);
    const before = screen.text.length;
    view.update(state);
    expect(screen.text.slice(before).startsWith(`\x1b[${rows}A\x1b[0J`)).toBe(true);
  });

  it('a note goes above the frame and stays', () => {
    const screen = new Screen(true);
    const view = new LiveView(screen, plain);
    view.update(pdRun());
    view.note('no worker polls task queue "troupe"');
    const text = screen.text;
    const afterNote = text.slice(text.indexOf('no worker'));
    expect(afterNote.split('\n')[1]).toMatch(/^pd {2}PROVISIONING/);
    view.update(pdRunning());
    // The redraw goes up over the frame only (6 rows), not over the note.
    expect(screen.text.slice(text.length).startsWith('\x1b[6A\x1b[0J')).toBe(true);
  });

  it('ignores updates once closed', () => {
    const screen = new Screen(false);
    const view = new LiveView(screen, plain);
    view.update(pdRun());
    const last = view.close();
    view.update(pdRunning());
    expect(last?.status).toBe('PROVISIONING');
    expect(screen.text).not.toContain('RUNNING');
  });
});

describe('log lines', () => {
  it('writes whole lines only, prefixed per job, and the unterminated rest on flush', () => {
    const out: string[] = [];
    const lines = new LogLines((t) => out.push(t), (n) => (n === 1 ? 'prefill/0 | ' : 'prefill/1 | '));
    lines.push(1, 'hel');
    lines.push(2, 'one\ntw');
    lines.push(1, 'lo\nworld\n');
    lines.push(2, 'o');
    expect(out.join('')).toBe('prefill/1 | one\nprefill/0 | hello\nprefill/0 | world\n');
    lines.flush();
    expect(out.join('')).toBe('prefill/1 | one\nprefill/0 | hello\nprefill/0 | world\nprefill/1 | two\n');
  });

  it('without a prefix passes the log through unchanged', () => {
    const out: string[] = [];
    const lines = new LogLines((t) => out.push(t));
    lines.push(0, 'a\n\nb\n');
    lines.flush();
    expect(out.join('')).toBe('a\n\nb\n');
  });

  it('prints changes in the order they happened: workers READY before the router that waited for them', () => {
    const at = (s: number) => `2025-01-01T12:00:${String(s).padStart(2, '0')}.000Z`;
    const before = pdRunning();
    before.status = 'PROVISIONING';
    before.jobs = before.jobs.map((j) => ({ ...j, status: 'PULLING', pid: null, running_at: null }));
    // One poll saw all of it: the workers ran and became READY (3 s, 4 s), then the router ran (6 s).
    const after = pdRunning();
    after.jobs = after.jobs.map((j) =>
      j.job_num === 0
        ? { ...j, running_at: at(6) }
        : { ...j, status: 'READY', running_at: at(j.job_num), ready_at: at(j.job_num + 2) },
    );
    expect(describeStateChanges(before, after, plain)).toEqual([
      'pd: RUNNING',
      '  job 1 prefill/0: READY',
      '  job 2 prefill/1: READY',
      '  job 3 decode/0: READY',
      '  job 0 router/0: RUNNING pid 1000',
    ]);
  });

  it('prints a long reason once in full, then abbreviated, across updates and in the run line', () => {
    const why = 'no capacity in fleet gpu for group decode (1 more host(s) with cpu 2.., gpu 1..): h1: held by other/job 0; h2: unreachable; h3: cpu 1 < 2; h4: no gpu';
    const running = pdRunning();
    const oneFailed = pdRunning();
    oneFailed.jobs[2] = { ...(oneFailed.jobs[2] as JobState), status: 'FAILED', termination_reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', message: why, finished_at: t0 };
    const failed = pdRun(
      { status: 'FAILED', termination_reason: 'JOB_FAILED', message: `job 2 (prefill/1) failed: FAILED_TO_START_DUE_TO_NO_CAPACITY: ${why}`, finished_at: t0 },
      oneFailed.jobs.map((j) => (j.job_num === 3 ? { ...j, status: 'FAILED', termination_reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', message: why, finished_at: t0 } : j)),
    );
    const screen = new Screen(false);
    const view = new LiveView(screen, plain);
    for (const state of [running, oneFailed, failed]) view.update(state);
    expect(screen.text.split(why).length - 1).toBe(1);
    const lines = screen.text.split('\n');
    expect(lines.find((l) => l.startsWith('  job 2 prefill/1: FAILED'))).toContain(why);
    expect(lines.find((l) => l.startsWith('  job 3 decode/0: FAILED'))).toMatch(/— FAILED_TO_START_DUE_TO_NO_CAPACITY: no capacity in fleet g.{0,30}… \(in full above\)$/);
    expect(lines.find((l) => l.startsWith('pd: FAILED'))).toContain('(in full above)');
  });
});


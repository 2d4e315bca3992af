import { condition, defineSignal, getExternalWorkflowHandle, proxyActivities, setHandler } from '@temporalio/workflow';

/** Workflows of bench/hop-latency.ts: the bare cost of one Temporal hop, without Troupe. */

export const ballSignal = defineSignal<[number]>('ball');

const { noop } = proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10s' });

/** Sends the ball to `peer` and waits for it back, `rounds` times: two signal hops per round. */
export async function PingWorkflow(peer: string, rounds: number): Promise<number[]> {
  let ball = -1;
  setHandler(ballSignal, (n) => {
    ball = n;
  });
  const stamps: number[] = [Date.now()];
  for (let i = 0; i < rounds; i++) {
    await getExternalWorkflowHandle(peer).signal(ballSignal, i);
    await condition(() => ball === i);
    stamps.push(Date.now());
  }
  return stamps;
}

/** Sends every ball back to `peer`, until it has returned `rounds`. */
export async function PongWorkflow(peer: string, rounds: number): Promise<void> {
  let ball = -1;
  let returned = -1;
  setHandler(ballSignal, (n) => {
    ball = n;
  });
  while (returned < rounds - 1) {
    await condition(() => ball > returned);
    returned = ball;
    await getExternalWorkflowHandle(peer).signal(ballSignal, returned);
  }
}

/** `rounds` trivial activities, one after another. */
export async function ActivityChainWorkflow(rounds: number): Promise<number[]> {
  const stamps: number[] = [Date.now()];
  for (let i = 0; i < rounds; i++) {
    await noop();
    stamps.push(Date.now());
  }
  return stamps;
}

/**
 * Signals `peer` while `peer` signals it, `rounds` times: each signal's delivery holds the sender's
 * lock while it takes the receiver's, so the two can wait for each other.
 */
export async function CrossWorkflow(peer: string, rounds: number): Promise<number[]> {
  let ball = -1;
  setHandler(ballSignal, (n) => {
    ball = Math.max(ball, n);
  });
  const stamps: number[] = [Date.now()];
  for (let i = 0; i < rounds; i++) {
    await getExternalWorkflowHandle(peer).signal(ballSignal, i);
    await condition(() => ball >= i);
    stamps.push(Date.now());
  }
  return stamps;
}

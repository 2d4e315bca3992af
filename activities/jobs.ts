import type { Backend, JobFiles, JobRef } from '../src/backends/backend';
import type { JobPlan } from '../src/plan/plan-schema';
import type { AddressBook } from '../src/contract/messages';
import { buildClusterInfo } from '../src/runner/cluster-info';
import { renderJobFiles } from '../src/runner/job-files';
import { deriveRunSshKeys, type RunSshKeys } from '../src/secrets/run-ssh-keys';
import { loadSecretKey, openEnv, sealedEntries, SecretKeyError } from '../src/secrets/sealed-env';
import { bindSealNonces, type RunExecution, type SealFactsOf } from '../src/secrets/seal-binding';
import { backendFor } from './backend-lookup';
import type { BackendRegistry, ReadLogInput, RunOfJob } from './types';

/** A node that does not answer for this long fails its job with INSTANCE_UNREACHABLE. */
export const UNREACHABLE_LIMIT_MS = 30_000;

/** `addresses[group][node]` from job_ips in job_num order and the size of every group. */
export function addressesByGroup(jobIps: readonly string[], groupSizes: readonly number[]): string[][] {
  let next = 0;
  return groupSizes.map((size) => {
    const group = jobIps.slice(next, next + size);
    next += size;
    return group;
  });
}

/** What the nodes of a book see: the ranks still in the run, their addresses by group, and the cluster's lists. */
export interface BookView {
  ranks: number[];
  ips: string[];
  gpus: number[];
  byGroup: string[][];
  /** True when some ranks were removed (entries are then not rank-indexed). */
  sparse: boolean;
}

export function viewOfBook(book: AddressBook, groupSizes: readonly number[]): BookView {
  if (!book.job_groups) {
    return { ranks: book.job_ips.map((_, n) => n), ips: book.job_ips, gpus: book.gpus_per_node, byGroup: addressesByGroup(book.job_ips, groupSizes), sparse: false };
  }
  const removed = new Set(book.removed ?? []);
  const ranks = book.job_ips.map((_, n) => n).filter((n) => !removed.has(n));
  const groups = Math.max(groupSizes.length, ...book.job_groups.map((g) => g + 1));
  const byGroup: string[][] = Array.from({ length: groups }, () => []);
  for (const n of ranks) byGroup[book.job_groups[n] ?? 0]?.push(book.job_ips[n] ?? '');
  return {
    ranks,
    ips: ranks.map((n) => book.job_ips[n] ?? ''),
    gpus: ranks.map((n) => book.gpus_per_node[n] ?? 0),
    byGroup,
    sparse: removed.size > 0,
  };
}

/** Whether an env has sealed values (then the run's execution is looked up before opening them). */
export function hasSealedValues(env: Readonly<Record<string, string>>): boolean {
  return sealedEntries(env).length > 0;
}

/**
 * The job's env with its sealed values opened: only here, on the way to the node, and only for
 * the run they were sealed for (`run`, as Temporal reports it). Opened first, bound second: a
 * value that does not open for this run never binds its nonce; `factsOf` is what Temporal says
 * of a nonce this machine has not seen.
 */
export async function openSecrets(env: Readonly<Record<string, string>>, run: RunExecution | null, factsOf: SealFactsOf): Promise<Record<string, string>> {
  const entries = sealedEntries(env);
  if (entries.length === 0) return { ...env };
  if (run === null) throw new SecretKeyError('sealed env values with no run to open them for');
  const opened = openEnv(env, () => loadSecretKey({ create: false }), run.workflowId);
  await bindSealNonces(entries, run, factsOf);
  return opened;
}

/**
 * The run's inter-node SSH keys (runs of two or more nodes; null for one node), derived from the
 * same secret key as sealed env values: made by the worker on first use if it has none, so every
 * worker that serves one run must share it (TROUPE_SECRET_KEY or TROUPE_SECRET_KEY_FILE).
 */
export function runSshKeysFor(runUid: string, submission: number, nodes: number): RunSshKeys | null {
  if (nodes < 2) return null;
  return deriveRunSshKeys(loadSecretKey({ create: true }), runUid, submission);
}

/** What rendering a job's files needs from the run (once per start call or batch). */
export interface JobFilesContext {
  target: Backend;
  run: RunOfJob;
  runUid: string;
  /** The run's env with its sealed values opened. */
  env: Record<string, string>;
  addresses: AddressBook;
  /** viewOfBook() of the book. */
  view: BookView;
  /** runSshKeysFor() the run. */
  sshKeys: RunSshKeys | null;
  /** The run's group names in group order (node names); null: named by index. */
  groupNames?: readonly string[] | null;
}

/** A job's env, hostfile and launch script; throws with the job's name when no shell can carry them (retrying cannot help). */
export function renderFilesFor(ctx: JobFilesContext, ref: JobRef, planJob: JobPlan): JobFiles {
  try {
    const { view } = ctx;
    const files = renderJobFiles({
      run: { ...ctx.run, env: ctx.env, nodes_num: view.ips.length },
      runUid: ctx.runUid,
      job: planJob,
      cluster: buildClusterInfo(view.ips, view.gpus, ref.job_num, view.sparse ? view.ranks : undefined),
      addresses: view.byGroup,
      jobDirectory: ctx.target.jobDirectory(ref),
      ...(ctx.groupNames ? { groupNames: ctx.groupNames } : {}),
    });
    const keys = ctx.sshKeys;
    if (!keys) return files;
    const peers = view.ranks.map((jobNum, i) => ({ ip: view.ips[i] ?? '', hostPublicKey: keys.host(jobNum).publicKey, ...(view.sparse ? { job_num: jobNum } : {}) }));
    return { ...files, ssh: { client: keys.client, host: keys.host(ref.job_num), peers } };
  } catch (err) {
    throw new Error(`${ref.job_name}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

export function createJobActivities(backends: BackendRegistry) {
  return {
    async readJobLog({ backend, job, offset, limit_bytes }: ReadLogInput) {
      return await backendFor(backends, backend).readLog(job, offset, limit_bytes);
    },
  };
}

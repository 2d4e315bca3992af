import type { SshKeyPair } from '../secrets/ssh-key-pair';
import type { NodeIdentity } from './node-hosts';

/**
 * What a runner hands a backend for one job: the files it writes on the node and the node's keys.
 * Backends take these (src/backends/backend.ts re-exports them); the runner never imports a backend.
 */

/** The files a runner writes in the job's directory before starting its commands. */
export interface JobFiles {
  /** Environment of the job's commands (DSTACK_* and the task's env). */
  env: Record<string, string>;
  /** MPI hostfile content. */
  hostfile: string;
  /** The bash script that runs the job's commands (already interpolated). */
  script: string;
  /** The task's image: a backend with containers runs the script in it (the local fleet runs it on the host). */
  image?: string | null;
  /**
   * Inter-node SSH (runs of two or more nodes): the backend runs an SSH server on the node that
   * accepts only `client`, and configures the client side to reach every peer. Made by the
   * activity from the worker's secret; never in workflow history. Absent: a one-node run.
   */
  ssh?: NodeSshKeys | null;
  /** The first address book of the node (`peers.json`, TROUPE_PEERS_FILE); later ones come with writePeers(). */
  peers?: PeersFile | null;
  /**
   * The group's readiness probe, for a backend that probes on the node itself (one with
   * `readiness()`): started with the job, it runs until it passes or `budget_ms` has gone by.
   */
  ready_probe?: NodeReadyProbe | null;
  /** The node's host name and /etc/hosts (src/runner/node-hosts.ts), for a backend that gives a node a machine of its own. */
  node?: NodeIdentity | null;
}

/** A readiness probe as the node runs it (src/runner/ready-probe.ts renders the script). */
export interface NodeReadyProbe {
  script: string;
  interval_s: number;
  /** What is left of the group's timeout, counted from the job's first start attempt. */
  budget_ms: number;
}

/** What the node's own probe loop found: still probing, passed, or out of time with its last answer. */
export type ReadinessState = { state: 'pending' } | { state: 'ready' } | { state: 'not-ready'; exit_code: number; output: string };

/** A version of a run's live address book, as written to every node's `peers.json`. */
export interface PeersFile {
  version: number;
  /** The JSON text of the book (workflows/peers-book.ts makes it). */
  json: string;
}

export interface NodeSshKeys {
  /** The run's client key pair: every node logs in to its peers with it. */
  client: SshKeyPair;
  /** This node's host key pair. */
  host: SshKeyPair;
  /** Every node of the run in job_num order (this one too): its address and host public key. */
  peers: Array<{ ip: string; hostPublicKey: string; /** Its global rank (absent: its index here). */ job_num?: number }>;
}

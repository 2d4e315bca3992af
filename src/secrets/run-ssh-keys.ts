import { hkdfSync } from 'node:crypto';
import { ed25519FromSeed, type SshKeyPair } from './ssh-key-pair';

/**
 * The keys of a run's inter-node SSH (MPI): one client key pair that every node of the run logs
 * in to its peers with, and one host key pair per node. All are derived (HKDF-SHA256) from the
 * secret key the workers hold, the run's id, its submission and the node's number: nothing secret
 * is in workflow history or stored between steps, a worker that replaces another derives the same
 * keys, and another run (or submission) gets keys of its own.
 */
export interface RunSshKeys {
  client: SshKeyPair;
  /** Host key of node `jobNum`. */
  host(jobNum: number): SshKeyPair;
}

const SALT = 'troupe inter-node ssh v1';

function seedFor(secret: Buffer, runId: string, submission: number, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, SALT, `${runId}\0${submission}\0${purpose}`, 32));
}

export function deriveRunSshKeys(secret: Buffer, runId: string, submission: number): RunSshKeys {
  const hosts = new Map<number, SshKeyPair>();
  return {
    client: ed25519FromSeed(seedFor(secret, runId, submission, 'client')),
    host(jobNum) {
      let pair = hosts.get(jobNum);
      if (!pair) {
        pair = ed25519FromSeed(seedFor(secret, runId, submission, `host\0${jobNum}`));
        hosts.set(jobNum, pair);
      }
      return pair;
    },
  };
}

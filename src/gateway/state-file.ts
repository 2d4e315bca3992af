import { readFile } from 'node:fs/promises';
import { isErrno, writeFileAtomic } from '../backends/local/state-files';
import { describeTableIssues, GatewayStateSchema, type GatewayState, type ServiceTable } from './routing-table';

/**
 * The gateway's tables on disk (`--state FILE`), so a restarted gateway serves at once, before any run
 * has pushed to it again. Replaced atomically (write + rename), readable by its owner only (0600): the
 * token hashes are in it.
 */
export async function readGatewayState(path: string): Promise<ServiceTable[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return [];
    throw err;
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new Error(`gateway state ${path} is not JSON (${err instanceof Error ? err.message : String(err)}): fix or remove it`);
  }
  const parsed = GatewayStateSchema.safeParse(data);
  if (!parsed.success) throw new Error(`gateway state ${path} is not a gateway's state: ${describeTableIssues(parsed.error)}`);
  return parsed.data.services;
}

/** Writes are queued: two quick PUTs never race, and the last one is the one on disk. */
export class GatewayStateWriter {
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly path: string) {}

  write(tables: ServiceTable[]): Promise<void> {
    const state: GatewayState = { version: 1, services: tables };
    const next = this.queue.then(() => writeFileAtomic(this.path, `${JSON.stringify(state, null, 2)}\n`, 0o600));
    this.queue = next.catch(() => undefined);
    return next;
  }
}

import { existsSync } from 'node:fs';
import { canConfine, CONFINE_PERL, confineArgv, type Confinement } from '../no-new-privs';
import { spawner } from './spawner';

/**
 * No new privileges inside a local job (no-new-privs.ts): every process of the job (its commands,
 * its SSH server and sessions, probes, hooks) runs under them, installed right before the job's
 * first program: after what the worker does as root (ip netns exec, the isolated launch's mounts,
 * setpriv), before anything of the task's.
 */

let checked: Promise<Confinement> | null = null;

/** This machine's confinement, tried once per process (a kernel without seccomp filters, or perl missing, says why). */
export function jobConfinement(): Promise<Confinement> {
  checked ??= (async (): Promise<Confinement> => {
    if (!canConfine(process.arch)) return { walls: null, why: `no seccomp filter for ${process.arch}` };
    if (!existsSync(CONFINE_PERL)) return { walls: null, why: `${CONFINE_PERL} is missing` };
    const walls = confineArgv(process.arch);
    const r = await spawner.run(walls[0]!, [...walls.slice(1), '/bin/true']);
    return r.code === 0 ? { walls } : { walls: null, why: r.stderr.trim() || `exit ${r.code}` };
  })();
  return checked;
}

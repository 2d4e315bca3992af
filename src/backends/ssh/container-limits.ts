import { z } from 'zod';
import type { Resources } from '../../config/resources-schema';
import type { JobLimits } from '../cgroup-limits';

/**
 * The limits of a job with `image:` on an SSH host, set by docker or podman on its container: the
 * same JobLimits the cgroup path writes (cgroup-limits.ts jobLimits: one rule for both), as
 * `docker run` / `podman run` flags, plus /dev/shm from `resources.shm_size` as dstack's shim
 * gives its containers.
 *
 * Flags both runtimes take; the newest of them is docker's `--cpus` (Docker 1.13); `--pids-limit`
 * came in 1.11, `--shm-size` in 1.10, `--memory` and `--memory-swap` long before. Podman has had
 * all five since 1.0.
 */

/** The instance detail holding the job's /dev/shm size in bytes (SshBackend.provision). */
export const SHM_BYTES_DETAIL = 'shm_bytes';

const GiB = 1024 ** 3;

/** /dev/shm of the group's `resources.shm_size` (GB) in bytes; null: the runtime's default (64 MiB). */
export function shmBytesOf(resources: Pick<Resources, 'shm_size'>): number | null {
  return resources.shm_size !== null && resources.shm_size > 0 ? Math.round(resources.shm_size * GiB) : null;
}

const ShmBytesSchema = z.coerce.number().int().positive();

/** The /dev/shm size a job's instance carries; absent (no `shm_size`, or instances from before it): null. */
export function shmBytesOfDetails(details: Record<string, string>): number | null {
  const text = details[SHM_BYTES_DETAIL];
  return text === undefined || text === '' ? null : ShmBytesSchema.parse(text);
}

/**
 * `docker run` / `podman run` flags for the limits: memory as a hard limit with no swap beyond it
 * (`--memory-swap` equal to `--memory`, as the cgroup path sets memory.swap.max 0), CPUs as a
 * quota, the pids limit; none for a limit that is null. Plain numbers: both read bytes when no unit is given.
 */
export function containerLimitFlags(limits: JobLimits, shmBytes: number | null): string[] {
  return [
    ...(limits.memory_bytes === null ? [] : ['--memory', String(limits.memory_bytes), '--memory-swap', String(limits.memory_bytes)]),
    ...(limits.cpus === null ? [] : ['--cpus', String(limits.cpus)]),
    '--pids-limit',
    String(limits.pids),
    ...(shmBytes === null ? [] : ['--shm-size', String(shmBytes)]),
  ];
}

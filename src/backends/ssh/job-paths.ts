import { createHash } from 'node:crypto';
import type { JobRef } from '../backend';
import { attemptDirectoryName } from '../../runner/job-layout';

/**
 * Where a job lives on its host: `<base>/<run_id>/<submission>/<job_name>/` (a later attempt:
 * `<job_name>.attempt-<k>/`, attemptDirectoryName). Ids and names become
 * one safe path component each: kept when harmless, else sanitised and suffixed with a hash, so a
 * group name full of shell metacharacters still maps to one distinct, inert directory.
 */
export function pathSegment(name: string): string {
  if (/^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$/.test(name)) return name;
  const readable = name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '').slice(0, 60);
  return `${readable}-${createHash('sha256').update(name).digest('hex').slice(0, 10)}`;
}

export function checkBaseDir(baseDir: string): string {
  if (!baseDir.startsWith('/')) {
    throw new Error(`job base directory must be absolute (got "${baseDir}"); detectHost reports the user's home to build one`);
  }
  if (baseDir.split('/').some((part) => part === '..')) throw new Error(`job base directory must not contain "..": ${baseDir}`);
  return baseDir.replace(/\/+$/, '') || '/';
}

export function runDirectory(baseDir: string, runId: string): string {
  return `${checkBaseDir(baseDir)}/${pathSegment(runId)}`;
}

export function jobDirectory(baseDir: string, job: Pick<JobRef, 'run_id' | 'submission' | 'job_name' | 'attempt'>): string {
  return `${runDirectory(baseDir, job.run_id)}/${job.submission}/${attemptDirectoryName(pathSegment(job.job_name), job.attempt)}`;
}

/** Container name of a job run with `image:`: stable per job directory, valid for docker and podman. */
export function containerName(jobDir: string): string {
  return `troupe-${createHash('sha256').update(jobDir).digest('hex').slice(0, 16)}`;
}

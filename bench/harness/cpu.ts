import { readFileSync } from 'node:fs';

/**
 * Two adjacent clock-tick fields of /proc/PID/stat added up, in seconds; NaN when the process is
 * gone. `first` counts from the field after the command name (the 3rd field of the line).
 */
function statSeconds(pid: number, first: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[first]) + Number(fields[first + 1])) / 100;
  } catch {
    return Number.NaN;
  }
}

/** CPU seconds (user + system) a process has used so far: utime and stime, fields 14 and 15. */
export function cpuSeconds(pid: number): number {
  return statSeconds(pid, 11);
}

/** The 1-minute load average: how busy the machine was beside the bench. */
export function loadAverage(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {
    return Number.NaN;
  }
}

/** CPU seconds of the children a process has waited for (cutime + cstime): those that have ended. */
export function reapedChildrenCpuSeconds(pid: number): number {
  return statSeconds(pid, 13);
}

/** The live children of a process (their parent pid is `pid`). */
export function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

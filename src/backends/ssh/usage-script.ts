import type { GpuUsage, JobUsage } from '../job-usage';
import { JobLayout as L } from '../../runner/job-layout';
import { quoteShellWord } from '../../runner/shell-quote';

/**
 * What a job on an SSH host uses, read there in one command on the control shell (bash builtins
 * but for the GPU tool): the job's cgroup v2 when its leader has one of its own, else its
 * processes (the leader's session and process group: CPU ticks, PSS); and every GPU of the host
 * (a host holds one job) from `nvidia-smi`'s query. Figures only: nothing the job prints.
 */

export const NVIDIA_USAGE_QUERY = 'nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits';

/** Linux reports CPU time in USER_HZ, 100 on every architecture. */
const CLOCK_TICKS_PER_S = 100;
const MiB = 1024 * 1024;

export function jobUsageScript(jobDir: string): string {
  return [
    `cd ${quoteShellWord(jobDir)} 2>/dev/null && [ -s ${L.started}/${L.pid} ] || { echo "result absent"; exit 0; }`,
    `[ -s ${L.exitCode} ] && { echo "result absent"; exit 0; }`,
    `read -r leader leader_t0 < ${L.started}/${L.pid}`,
    'stat_of() { local s; { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1; s=${s##*) }; set -f; fs=($s); set +f; }',
    '[ -n "$leader" ] && stat_of "$leader" && [ "${fs[19]}" = "$leader_t0" ] && [ "${fs[0]}" != Z ] || { echo "result absent"; exit 0; }',
    'mem_total_kb=0; while read -r k v _; do [ "$k" = MemTotal: ] && mem_total_kb=$v && break; done < /proc/meminfo',
    'own=; its=',
    'while IFS= read -r l; do [ "${l:0:3}" = 0:: ] && own=${l:3}; done < /proc/$$/cgroup',
    'while IFS= read -r l; do [ "${l:0:3}" = 0:: ] && its=${l:3}; done < /proc/$leader/cgroup',
    'cg=/sys/fs/cgroup$its',
    'if [ -n "$its" ] && [ "$its" != "$own" ] && [ "$its" != / ] && [ -r "$cg/memory.current" ] && [ -r "$cg/cpu.stat" ]; then',
    '  read -r mem < "$cg/memory.current"; read -r max < "$cg/memory.max"',
    '  while read -r k v; do [ "$k" = usage_usec ] && usec=$v; done < "$cg/cpu.stat"',
    '  at=${EPOCHREALTIME/./}',
    '  [ "$max" = max ] && max=$((mem_total_kb * 1024))',
    '  echo "result usage cgroup ${at:0:-3} usec $usec $mem $max"',
    'else',
    '  ticks=0 bytes=0',
    '  for f in /proc/[0-9]*; do',
    '    p=${f#/proc/}',
    '    stat_of "$p" || continue',
    '    [ "${fs[0]}" != Z ] && { [ "${fs[2]}" = "$leader" ] || [ "${fs[3]}" = "$leader" ]; } || continue',
    '    ticks=$((ticks + fs[11] + fs[12]))',
    '    pss=',
    '    while read -r k v _; do [ "$k" = Pss: ] && pss=$v && break; done < "$f/smaps_rollup" 2>/dev/null',
    '    bytes=$((bytes + ${pss:-$((fs[21] * 4))} * 1024))',
    '  done',
    '  at=${EPOCHREALTIME/./}',
    '  echo "result usage proc ${at:0:-3} ticks $ticks $bytes $((mem_total_kb * 1024))"',
    'fi',
    `if command -v nvidia-smi >/dev/null 2>&1; then ${NVIDIA_USAGE_QUERY} 2>/dev/null | while IFS= read -r g; do echo "gpu $g"; done; fi`,
  ].join('\n');
}

/** `gpu 0, NVIDIA L40S, 40, 11776, 46068` (index, name, %, MiB used, MiB total); anything else is skipped. */
function parseGpu(line: string): GpuUsage | null {
  const fields = line.slice(4).split(',').map((f) => f.trim());
  if (fields.length !== 5) return null;
  const [index, name, util, used, total] = fields as [string, string, string, string, string];
  const numbers = [index, util, used, total].map(Number);
  if (numbers.some((n) => !Number.isFinite(n))) return null;
  return { index: Number(index), name, util_percent: Math.min(100, Math.max(0, Number(util))), memory_used_bytes: Number(used) * MiB, memory_total_bytes: Number(total) * MiB };
}

/** The script's answer, or null when the job is not running there. */
export function parseJobUsage(stdout: string): JobUsage | null {
  const lines = stdout.split('\n');
  const result = lines.find((l) => l.startsWith('result '))?.trim().split(/\s+/) ?? [];
  if (result[1] !== 'usage') return null;
  const [, , source, at, unit, counter, memory, limit] = result;
  const numbers = [at, counter, memory, limit].map(Number);
  if ((source !== 'cgroup' && source !== 'proc') || numbers.some((n) => !Number.isFinite(n))) throw new Error(`unreadable usage answer: ${result.join(' ')}`);
  const cpu_seconds = unit === 'usec' ? Number(counter) / 1e6 : Number(counter) / CLOCK_TICKS_PER_S;
  const gpus = lines.filter((l) => l.startsWith('gpu ')).flatMap((l) => parseGpu(l) ?? []);
  return { at_ms: Number(at), cpu_seconds, memory_bytes: Number(memory), memory_limit_bytes: Number(limit) > 0 ? Number(limit) : null, source, gpus };
}

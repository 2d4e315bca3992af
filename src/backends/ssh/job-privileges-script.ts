import { canConfine, CONFINE_PERL, confineArgv, noNewPrivsLine, type Confinement } from '../no-new-privs';
import { quoteShellWord } from '../../runner/shell-quote';

/**
 * No new privileges inside a job on an SSH host (no-new-privs.ts): the start script runs the
 * job's wrapper under the same perl install as the local fleet's, with the filter built by the
 * worker for the host's architecture, after the wrapper joined its cgroup and before it runs. So
 * the commands, the readiness loop, the job's SSH server and the sessions `mpirun` opens on it all
 * inherit them. Neither needs root: they hold for any SSH user.
 *
 * Whether the host can apply them is probed once per connection (with the cgroup probe): its
 * `uname -m`, then the install tried on `/bin/true`. Where it cannot (no table for its
 * architecture, perl missing, a kernel without seccomp filters), the job runs without and one line
 * in its log says why.
 */

/** `uname -m` of the machines the filter has a table for, to Node's `process.arch` names (what confineArgv takes). */
const ARCH_OF_MACHINE: Readonly<Record<string, string>> = { x86_64: 'x64', aarch64: 'arm64' };

function argvOf(machine: string): string[] | null {
  const arch = ARCH_OF_MACHINE[machine];
  return arch !== undefined && canConfine(arch) ? confineArgv(arch) : null;
}

/**
 * Bash (no exit: it runs before the cgroup probe, in the same command) that prints one line:
 * `walls ok MACHINE`, `walls none MACHINE` (no table), `walls no-perl MACHINE`, or
 * `walls failed MACHINE WHY` (the install refused, e.g. a kernel without seccomp filters).
 */
export function privilegesProbeScript(): string {
  const q = quoteShellWord;
  return [
    'm=$(uname -m 2>/dev/null)',
    'case $m in',
    ...Object.keys(ARCH_OF_MACHINE).flatMap((machine) => {
      const argv = argvOf(machine);
      return argv ? [`  ${q(machine)}) walls=(${argv.map(q).join(' ')}) ;;`] : [];
    }),
    '  *) walls=() ;;',
    'esac',
    'if [ ${#walls[@]} -eq 0 ]; then echo "walls none $m"',
    `elif [ ! -x ${q(CONFINE_PERL)} ]; then echo "walls no-perl $m"`,
    'elif walls_err=$("${walls[@]}" /bin/true 2>&1); then echo "walls ok $m"',
    'else echo "walls failed $m $(printf %s "$walls_err" | head -n 1)"; fi',
  ].join('\n');
}

/** What a job on `host` runs under, from the probe's output. */
export function parsePrivilegesProbe(stdout: string, host: string): Confinement {
  const line = stdout.split('\n').find((l) => l.startsWith('walls '));
  const [, outcome = '', machine = '', ...why] = line?.trim().split(/\s+/) ?? [];
  const argv = outcome === 'ok' ? argvOf(machine) : null;
  if (argv) return { walls: argv };
  const reason: Record<string, string> = {
    none: `no seccomp filter for ${machine || 'an unnamed architecture'} on ${host}`,
    'no-perl': `${CONFINE_PERL} is missing on ${host}`,
    failed: `${why.join(' ') || 'the install failed'} on ${host}`,
  };
  return { walls: null, why: reason[outcome] ?? `${host} did not say whether it can forbid new privileges` };
}

/** The words that run the command after them under the walls (none where the host cannot apply them). */
export function privilegesWords(confinement: Confinement): string {
  return confinement.walls === null ? '' : `${confinement.walls.map(quoteShellWord).join(' ')} `;
}

/** What the start script writes to the job's `log` (run in the job's directory) where there are no walls: why. */
export function noPrivilegesLogLines(confinement: Confinement, log: string): string[] {
  return confinement.walls === null ? [`printf '%s\\n' ${quoteShellWord(noNewPrivsLine(confinement.why).trimEnd())} >> ${log}`] : [];
}

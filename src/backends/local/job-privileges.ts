import { existsSync } from 'node:fs';
import { filterSupports, seccompFilter } from './seccomp-filter';
import { spawner } from './spawner';

/**
 * No new privileges inside a local job: every process of the job (its commands, its SSH server and
 * sessions, probes, hooks) runs under `no_new_privs` and the seccomp filter of seccomp-filter.ts.
 * Both are inherited across fork and exec and cannot be undone, so the argv of `confineArgv` goes
 * right before the job's first program: after what the worker does as root (ip netns exec, the
 * isolated launch's mounts, setpriv), before anything of the task's.
 *
 * Installed by perl (in Debian's essential set, already used by the spawner's pidfd watcher) with
 * two prctl calls, then exec: a few ms per process, no new package. Where the machine cannot apply
 * them, the job runs without and its log says why in one line (noNewPrivsLine).
 */

const PERL = '/usr/bin/perl';

/** prctl's syscall number per `process.arch` (64-bit only: the program packs a 64-bit sock_fprog). */
const PRCTL: Record<string, number> = { x64: 157, arm64: 167 };

// PR_SET_NO_NEW_PRIVS (38), then PR_SET_SECCOMP (22) with SECCOMP_MODE_FILTER (2) and a struct
// sock_fprog { unsigned short len; struct sock_filter *filter; }; then the command in place of perl.
const INSTALL = [
  'my ($nr, $hex) = splice @ARGV, 0, 2;',
  'my $f = pack "H*", $hex;',
  'my $prog = pack "S x6 P", length($f) / 8, $f;',
  'syscall($nr, 38, 1, 0, 0, 0) == 0 && syscall($nr, 22, 2, $prog, 0, 0) == 0 or die "troupe: cannot forbid new privileges: $!\\n";',
  'exec { $ARGV[0] } @ARGV or die "troupe: cannot run $ARGV[0]: $!\\n";',
].join(' ');

/** What a job's first program is run under: the argv that execs it (`walls`), or why there is none. */
export type Confinement = { walls: readonly string[] } | { walls: null; why: string };

/** The argv that runs the command after it with no_new_privs and the filter, on a machine of kind `arch`. */
export function confineArgv(arch: string): string[] {
  const prctl = PRCTL[arch];
  if (prctl === undefined || !filterSupports(arch)) throw new Error(`no seccomp filter for ${arch}`);
  return [PERL, '-e', INSTALL, '--', String(prctl), seccompFilter(arch).toString('hex')];
}

let checked: Promise<Confinement> | null = null;

/** This machine's confinement, tried once per process (a kernel without seccomp filters, or perl missing, says why). */
export function jobConfinement(): Promise<Confinement> {
  checked ??= (async (): Promise<Confinement> => {
    if (PRCTL[process.arch] === undefined || !filterSupports(process.arch)) return { walls: null, why: `no seccomp filter for ${process.arch}` };
    if (!existsSync(PERL)) return { walls: null, why: `${PERL} is missing` };
    const walls = confineArgv(process.arch);
    const r = await spawner.run(walls[0]!, [...walls.slice(1), '/bin/true']);
    return r.code === 0 ? { walls } : { walls: null, why: r.stderr.trim() || `exit ${r.code}` };
  })();
  return checked;
}

/** The line a job's log starts with when it runs without these walls. */
export function noNewPrivsLine(why: string): string {
  return `troupe: no_new_privs and the seccomp filter (no user namespaces, no mounts) are not applied to this job: ${why}\n`;
}

import { filterSupports, seccompFilter } from './seccomp-filter';

/**
 * No new privileges inside a job, on either kind of node: `no_new_privs` and the seccomp filter of
 * seccomp-filter.ts, installed by perl (in Debian's essential set) with two prctl calls, then exec
 * of the job's first program. Both are inherited across fork and exec and cannot be undone, so
 * the argv of `confineArgv` goes right before the job's first program, after what Troupe does with
 * privileges (the local fleet's netns, mounts and user switch; an SSH host's cgroup). Neither needs
 * root. Where a machine cannot apply them, the job runs without and its log says why in one line
 * (noNewPrivsLine).
 */

/** The perl that installs them, as a job's machine must have it. */
export const CONFINE_PERL = '/usr/bin/perl';

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

/** True when confineArgv has a program for a machine of kind `arch` (Node's `process.arch` names). */
export function canConfine(arch: string): boolean {
  return PRCTL[arch] !== undefined && filterSupports(arch);
}

/** The argv that runs the command after it with no_new_privs and the filter, on a machine of kind `arch`. */
export function confineArgv(arch: string): string[] {
  const prctl = PRCTL[arch];
  if (prctl === undefined || !filterSupports(arch)) throw new Error(`no seccomp filter for ${arch}`);
  return [CONFINE_PERL, '-e', INSTALL, '--', String(prctl), seccompFilter(arch).toString('hex')];
}

/** The line a job's log starts with when it runs without these walls. */
export function noNewPrivsLine(why: string): string {
  return `troupe: no_new_privs and the seccomp filter (no user namespaces, no mounts) are not applied to this job: ${why}\n`;
}

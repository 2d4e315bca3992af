import { quoteShellWord } from './shell-quote';

/**
 * What an isolated node's launch does as root in its new namespaces before it drops to the run's
 * user (isolated-launch.ts says why each): mounts, a directory made, a kernel setting written. The
 * steps are said once here and carried out one of two ways:
 *
 * - by ONE perl process (`mountsArgv`), which calls mount(2) itself: perl is on every Debian
 *   machine (the job's walls already need it, no-new-privs.ts), and a node's set-up is then one
 *   program start instead of one `mount` per step (8–10 for a node in a network of its own: each
 *   `mount` loads libmount and libblkid, ~2 ms of CPU apiece; a thousand nodes start on 2 cores);
 * - or, where perl or the machine's mount(2) number is not known, one shell line per step
 *   (`mountsShell`), util-linux's `mount` each: the same calls.
 *
 * Every path and option here is Troupe's (the job's directory, the fleet's hidden directories, its
 * own option strings); none comes from the task.
 */

/** mount(2) flags used here (linux/mount.h). */
export const MS = { nosuid: 0x2, nodev: 0x4, noexec: 0x8, bind: 0x1000 } as const;

export type NodeSetupStep =
  /** mount(2) of `source` on `target`; `ifTargetExists`: skipped when the target is not there. */
  | { kind: 'mount'; source: string; target: string; fstype: string | null; flags: number; data: string | null; ifTargetExists?: boolean }
  /** `mkdir -p`, mode 0755. */
  | { kind: 'mkdir'; path: string }
  /** `text` written to `path` (a file of /proc/sys); `optional`: a failure is not the node's. */
  | { kind: 'write'; path: string; text: string; optional?: boolean };

/** A machine's mount(2) number per `process.arch` (64-bit Linux). */
const MOUNT_SYSCALL: Record<string, number> = { x64: 165, arm64: 40 };

/** The mount(2) number on a machine of kind `arch`, or null where it is not known here. */
export function mountSyscallOf(arch: string): number | null {
  return MOUNT_SYSCALL[arch] ?? null;
}

// The steps come as words: `m` / `mi` (if the target exists) SOURCE TARGET FSTYPE FLAGS DATA, `d`
// PATH, `w` / `wo` (optional) PATH TEXT. An empty FSTYPE or DATA is a NULL pointer. Values are
// copied into variables: perl's syscall may write through a pointer, so it refuses constants.
const PROGRAM = [
  'my $nr = shift @ARGV;',
  'while (@ARGV) {',
  '  my $op = shift @ARGV;',
  '  if ($op eq "m" || $op eq "mi") {',
  '    my ($src, $dst, $type, $flags, $data) = splice @ARGV, 0, 5;',
  '    next if $op eq "mi" && !-e $dst;',
  '    my $t = length($type) ? $type : 0; my $o = length($data) ? $data : 0;',
  '    syscall($nr, $src, $dst, $t, 0 + $flags, $o) == 0 or die "troupe: mount $dst: $!\\n";',
  '  } elsif ($op eq "d") {',
  '    my $p = ""; for my $part (grep { length } split m{/}, shift @ARGV) { $p .= "/$part"; mkdir($p, 0755) or -d $p or die "troupe: mkdir $p: $!\\n"; }',
  '  } elsif ($op eq "w" || $op eq "wo") {',
  '    my ($path, $text) = splice @ARGV, 0, 2;',
  '    my $fh; my $ok = open($fh, ">", $path) && (print {$fh} $text) && close($fh);',
  '    $ok or $op eq "wo" or die "troupe: write $path: $!\\n";',
  '  } else { die "troupe: unknown set-up step $op\\n"; }',
  '}',
].join(' ');

/** The argv that carries out `steps` in one perl process. */
export function mountsArgv(perl: string, mountSyscall: number, steps: readonly NodeSetupStep[]): string[] {
  const words = steps.flatMap((s): string[] => {
    if (s.kind === 'mount') return [s.ifTargetExists ? 'mi' : 'm', s.source, s.target, s.fstype ?? '', String(s.flags), s.data ?? ''];
    if (s.kind === 'mkdir') return ['d', s.path];
    return [s.optional ? 'wo' : 'w', s.path, s.text];
  });
  return [perl, '-e', PROGRAM, '--', String(mountSyscall), ...words];
}

/** `mount`'s -o for the flags and data of a step. */
function mountOptions(flags: number, data: string | null): string[] {
  const names = (['nosuid', 'nodev', 'noexec'] as const).filter((n) => (flags & MS[n]) !== 0);
  return [...(data ? [data] : []), ...names];
}

/** The steps as shell lines, a `mount` (or `mkdir`, or a redirect) each; `fail` runs when one fails. */
export function mountsShell(tools: { mount: string; mkdir: string }, steps: readonly NodeSetupStep[], fail: string): string[] {
  const q = quoteShellWord;
  return steps.map((s) => {
    if (s.kind === 'mkdir') return `${q(tools.mkdir)} -p ${q(s.path)} || ${fail}`;
    if (s.kind === 'write') return `printf '%s' ${q(s.text)} > ${q(s.path)}${s.optional ? ' 2>/dev/null' : ` || ${fail}`}`;
    const bind = (s.flags & MS.bind) !== 0;
    const options = mountOptions(s.flags, s.data);
    const line = [
      q(tools.mount),
      ...(bind ? ['--no-canonicalize', '--bind'] : []),
      ...(s.fstype ? ['-t', s.fstype] : []),
      ...(options.length > 0 ? ['-o', options.join(',')] : []),
      q(s.source),
      q(s.target),
    ].join(' ');
    return s.ifTargetExists ? `if [ -e ${q(s.target)} ]; then ${line} || ${fail}; fi` : `${line} || ${fail}`;
  });
}

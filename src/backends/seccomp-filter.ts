/**
 * The seccomp filter every process of a job runs under (no-new-privs.ts installs it): a
 * classic BPF program, built here because no Debian tool builds one from a rule list (bubblewrap
 * and systemd take a compiled program or link libseccomp). It refuses, with EPERM:
 *
 * - a new user namespace: `unshare` or `clone` with CLONE_NEWUSER (root inside it would let the job
 *   mount, make devices and reach kernel code unprivileged users cannot), and `setns` (joining one);
 * - mounting: `mount`, `umount`/`umount2`, `pivot_root` and the new mount API (`open_tree`,
 *   `move_mount`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `mount_setattr`);
 *
 * and answers `clone3` with ENOSYS: its flags are in memory a filter cannot read, and the C library
 * falls back to `clone` (as Docker's default profile does). Syscalls of an ABI it has no table for
 * (x32 on x86_64, or an unknown architecture) are refused, so the numbers of another ABI cannot
 * walk around it. Everything else is allowed.
 */

/** AUDIT_ARCH_* values (linux/audit.h) of the ABIs the filter knows. */
const AUDIT_ARCH = { x86_64: 0xc000003e, i386: 0x40000003, aarch64: 0xc00000b7 } as const;
type Abi = keyof typeof AUDIT_ARCH;

const CLONE_NEWUSER = 0x10000000;
const X32_SYSCALL_BIT = 0x40000000;
const EPERM = 1;
const ENOSYS = 38;

/** Syscall numbers per ABI (arch/x86/entry/syscalls/*.tbl, include/uapi/asm-generic/unistd.h). */
interface SyscallTable {
  /** Refused when their first argument holds CLONE_NEWUSER. */
  userns: { clone: number; unshare: number };
  refused: readonly number[];
  clone3: number;
}

/** Added to every ABI in one numbering (Linux 5.2 on): the new mount API and clone3. */
const NEW_MOUNT_API = [428, 429, 430, 431, 432, 433, 442];
const CLONE3 = 435;

const TABLES: Record<Abi, SyscallTable> = {
  // setns, mount, umount2, pivot_root
  x86_64: { userns: { clone: 56, unshare: 272 }, refused: [308, 165, 166, 155, ...NEW_MOUNT_API], clone3: CLONE3 },
  // setns, mount, umount, umount2, pivot_root
  i386: { userns: { clone: 120, unshare: 310 }, refused: [346, 21, 22, 52, 217, ...NEW_MOUNT_API], clone3: CLONE3 },
  // setns, mount, umount2, pivot_root
  aarch64: { userns: { clone: 220, unshare: 97 }, refused: [268, 40, 39, 41, ...NEW_MOUNT_API], clone3: CLONE3 },
};

/** The ABIs a process of this machine's kind may call the kernel with (a 64-bit x86 process may use int 0x80). */
const ABIS_OF: Record<string, readonly Abi[]> = { x64: ['x86_64', 'i386'], arm64: ['aarch64'] };

/** Node's `process.arch` names the filter has tables for. */
export function filterSupports(arch: string): boolean {
  return arch in ABIS_OF;
}

// struct sock_filter opcodes (linux/filter.h).
const LD_ABS_W = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;
const RET_ALLOW = 0x7fff0000;
const RET_ERRNO = 0x00050000;

/** Offsets in struct seccomp_data: nr, arch, and the low 32 bits of args[0] (little-endian ABIs only). */
const NR = 0;
const ARCH = 4;
const ARG0_LOW = 16;

type Label = 'allow' | 'eperm' | 'enosys' | 'userns' | `abi${number}`;
type Insn = { op: number; k: number; jt?: Label; jf?: Label } | { label: Label };

/** The program for this machine's kind (`process.arch`), as the bytes of its sock_filter array. */
export function seccompFilter(arch: string): Buffer {
  const abis = ABIS_OF[arch];
  if (!abis) throw new Error(`no syscall table for ${arch}`);
  const prog: Insn[] = [{ op: LD_ABS_W, k: ARCH }];
  abis.forEach((abi, i) => {
    const next: Label = i + 1 < abis.length ? `abi${i + 1}` : 'eperm';
    const t = TABLES[abi];
    if (i > 0) prog.push({ label: `abi${i}` }, { op: LD_ABS_W, k: ARCH });
    prog.push({ op: JEQ_K, k: AUDIT_ARCH[abi], jf: next }, { op: LD_ABS_W, k: NR });
    if (abi === 'x86_64') prog.push({ op: JGE_K, k: X32_SYSCALL_BIT, jt: 'eperm' });
    prog.push({ op: JEQ_K, k: t.clone3, jt: 'enosys' });
    for (const nr of [t.userns.clone, t.userns.unshare]) prog.push({ op: JEQ_K, k: nr, jt: 'userns' });
    for (const nr of t.refused) prog.push({ op: JEQ_K, k: nr, jt: 'eperm' });
    prog.push({ op: RET_K, k: RET_ALLOW });
  });
  prog.push(
    { label: 'userns' },
    { op: LD_ABS_W, k: ARG0_LOW },
    { op: JSET_K, k: CLONE_NEWUSER, jt: 'eperm' },
    { label: 'allow' },
    { op: RET_K, k: RET_ALLOW },
    { label: 'eperm' },
    { op: RET_K, k: RET_ERRNO | EPERM },
    { label: 'enosys' },
    { op: RET_K, k: RET_ERRNO | ENOSYS },
  );
  return assemble(prog);
}

/** Resolves labels to forward jumps (a BPF jump only goes forward, at most 255 instructions). */
function assemble(prog: readonly Insn[]): Buffer {
  const at = new Map<Label, number>();
  const code: Array<Exclude<Insn, { label: Label }>> = [];
  for (const insn of prog) {
    if ('label' in insn) at.set(insn.label, code.length);
    else code.push(insn);
  }
  const out = Buffer.alloc(code.length * 8);
  code.forEach((insn, i) => {
    const jump = (label: Label | undefined): number => {
      if (label === undefined) return 0;
      const target = at.get(label);
      if (target === undefined || target <= i || target - i - 1 > 255) throw new Error(`seccomp filter: bad jump to ${label} at ${i}`);
      return target - i - 1;
    };
    out.writeUInt16LE(insn.op, i * 8);
    out.writeUInt8(jump(insn.jt), i * 8 + 2);
    out.writeUInt8(jump(insn.jf), i * 8 + 3);
    out.writeUInt32LE(insn.k >>> 0, i * 8 + 4);
  });
  return out;
}

import { describe, expect, it } from 'vitest';
import { filterSupports, seccompFilter } from '../../src/backends/seccomp-filter';

/**
 * The seccomp filter of a local job (issue 37, part 2), run here by a small interpreter of the
 * classic BPF it is made of: what each ABI's syscalls get. (Real processes under it: test/e2e/local-privileges.test.ts.)
 */

const X86_64 = 0xc000003e;
const I386 = 0x40000003;
const AARCH64 = 0xc00000b7;
const CLONE_NEWUSER = 0x10000000;
const CLONE_NEWNS = 0x20000;
const ALLOW = 'allow';
const EPERM = 'EPERM';
const ENOSYS = 'ENOSYS';

/** Runs the program on one syscall (its number, ABI and first argument's low 32 bits). */
function verdict(prog: Buffer, arch: number, nr: number, arg0 = 0): string {
  const data = new Map([
    [0, nr],
    [4, arch],
    [16, arg0],
  ]);
  let acc = 0;
  for (let pc = 0; pc < prog.length / 8; pc += 1) {
    const op = prog.readUInt16LE(pc * 8);
    const jt = prog.readUInt8(pc * 8 + 2);
    const jf = prog.readUInt8(pc * 8 + 3);
    const k = prog.readUInt32LE(pc * 8 + 4);
    if (op === 0x20) acc = data.get(k) ?? 0;
    else if (op === 0x15) pc += acc === k ? jt : jf;
    else if (op === 0x35) pc += acc >= k ? jt : jf;
    else if (op === 0x45) pc += (acc & k) !== 0 ? jt : jf;
    else if (op === 0x06) return k === 0x7fff0000 ? ALLOW : k === 0x50001 ? EPERM : k === 0x50026 ? ENOSYS : `ret ${k.toString(16)}`;
    else throw new Error(`unknown opcode ${op}`);
  }
  throw new Error('fell off the end');
}

describe('the seccomp filter of a local job', () => {
  const x64 = seccompFilter('x64');
  const arm = seccompFilter('arm64');

  it.each([
    ['x86_64 unshare(CLONE_NEWUSER)', x64, X86_64, 272, CLONE_NEWUSER, EPERM],
    ['x86_64 unshare(CLONE_NEWNS|CLONE_NEWUSER)', x64, X86_64, 272, CLONE_NEWUSER | CLONE_NEWNS, EPERM],
    ['x86_64 unshare(CLONE_NEWNS)', x64, X86_64, 272, CLONE_NEWNS, ALLOW],
    ['x86_64 clone(CLONE_NEWUSER)', x64, X86_64, 56, CLONE_NEWUSER | 17, EPERM],
    ['x86_64 clone (a fork or a thread)', x64, X86_64, 56, 0x3d0f00, ALLOW],
    ['x86_64 clone3', x64, X86_64, 435, 0, ENOSYS],
    ['x86_64 mount', x64, X86_64, 165, 0, EPERM],
    ['x86_64 umount2', x64, X86_64, 166, 0, EPERM],
    ['x86_64 setns', x64, X86_64, 308, 0, EPERM],
    ['x86_64 fsopen', x64, X86_64, 430, 0, EPERM],
    ['x86_64 mount_setattr', x64, X86_64, 442, 0, EPERM],
    ['x86_64 read', x64, X86_64, 0, 0, ALLOW],
    ['x86_64 execve', x64, X86_64, 59, 0, ALLOW],
    ['x32 read', x64, X86_64, 0x40000000, 0, EPERM],
    ['i386 unshare(CLONE_NEWUSER)', x64, I386, 310, CLONE_NEWUSER, EPERM],
    ['i386 mount', x64, I386, 21, 0, EPERM],
    ['i386 umount', x64, I386, 22, 0, EPERM],
    ['i386 read', x64, I386, 3, 0, ALLOW],
    ['aarch64 on x86_64', x64, AARCH64, 63, 0, EPERM],
    ['aarch64 unshare(CLONE_NEWUSER)', arm, AARCH64, 97, CLONE_NEWUSER, EPERM],
    ['aarch64 clone(CLONE_NEWUSER)', arm, AARCH64, 220, CLONE_NEWUSER, EPERM],
    ['aarch64 mount', arm, AARCH64, 40, 0, EPERM],
    ['aarch64 clone3', arm, AARCH64, 435, 0, ENOSYS],
    ['aarch64 read', arm, AARCH64, 63, 0, ALLOW],
    ['x86_64 on aarch64', arm, X86_64, 0, 0, EPERM],
  ])('%s', (_name, prog, arch, nr, arg0, expected) => {
    expect(verdict(prog, arch, nr, arg0)).toBe(expected);
  });

  it('has no table for other machines, and says so', () => {
    expect(filterSupports('riscv64')).toBe(false);
    expect(() => seccompFilter('riscv64')).toThrow('no syscall table for riscv64');
  });
});

import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { CONTROL_SHELL_COMMAND, ControlShell, type ShellChannel } from '../../src/backends/ssh/control-shell';

/**
 * The control shell's protocol against a real bash on this machine (what sshd would start for the
 * exec request), its pipes standing in for the SSH channel. Over real sshd: test/e2e/ssh-*.test.ts.
 */

const children: ChildProcessWithoutNullStreams[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

/** A login shell that prints noise from its rc file first, as a chatty .bashrc does. */
function localShell(rcNoise = 'Welcome!\\nSome motd\\n'): { shell: ControlShell; child: ChildProcessWithoutNullStreams } {
  const child = spawn('bash', ['-c', `printf '${rcNoise}'; printf 'rc on stderr\\n' >&2; ${CONTROL_SHELL_COMMAND}`], { env: { ...process.env, TMPDIR: tmpdir() } });
  children.push(child);
  const channel: ShellChannel = {
    on: (event: 'data' | 'close', listener: ((chunk: Buffer) => void) & (() => void)) =>
      event === 'data' ? child.stdout.on('data', listener) : child.once('close', listener),
    stderr: { on: (_event, listener) => child.stderr.on('data', listener) },
    write: (data) => child.stdin.write(data),
    close: () => child.stdin.end(),
  };
  return { shell: new ControlShell(channel, 'local'), child };
}

describe('control shell', () => {
  it('skips what the rc files print and runs commands one after the other', async () => {
    const { shell } = localShell();
    await shell.ready(5_000);
    expect(await shell.run('echo one; echo err >&2; exit 3', 5_000)).toEqual({ stdout: 'one\n', stderr: 'err\n', exitCode: 3, signal: null });
    expect(await shell.run('printf two', 5_000)).toEqual({ stdout: 'two', stderr: '', exitCode: 0, signal: null });
  });

  it('passes the script and stdin byte for byte, output with no newline, binary and large', async () => {
    const { shell } = localShell();
    const hostile = "quotes ' \" `backticks` $(not run) \\ ünïcødé\n; rm -rf / #";
    const big = Buffer.alloc(300_000, 0xab);
    expect((await shell.run('cat', 5_000, hostile)).stdout).toBe(hostile);
    const counted = await shell.run('wc -c', 5_000, big);
    expect(counted.stdout.trim()).toBe(String(big.length));
    const literal = await shell.run(`printf '%s' '${hostile.replaceAll("'", `'\\''`)}'`, 5_000);
    expect(literal.stdout).toBe(hostile);
    // A NUL byte cannot be in a bash string: such a stdin goes base64-encoded, byte for byte still.
    const withNul = Buffer.from([0x61, 0x00, 0x0a, 0x00, 0xff, 0x62]);
    expect((await shell.run('od -An -tx1 | tr -s " " | sed "s/^ //"', 5_000, withNul)).stdout.trim()).toBe('61 00 0a 00 ff 62');
    expect((await shell.run('wc -c', 5_000, '')).stdout.trim()).toBe('0');
  });

  it('each command in a fresh bash: no state carries over, the login umask stays', async () => {
    const { shell } = localShell();
    await shell.run('cd /; export LEAK=1; umask 000', 5_000);
    const after = await shell.run('pwd; echo "${LEAK:-none}"; umask', 5_000);
    const [, leak, umask] = after.stdout.trim().split('\n');
    expect(leak).toBe('none');
    expect(umask).not.toBe('0000');
  });

  it('kills a command at its deadline (137) and goes on with the next', async () => {
    const { shell } = localShell();
    const started = Date.now();
    const killed = await shell.run('sleep 30', 1_000);
    expect(killed.exitCode).toBe(137);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await shell.run('echo alive', 5_000)).stdout).toBe('alive\n');
  });

  it('fails the pending command when the shell dies, and removes its temporary directory on exit', async () => {
    const { shell, child } = localShell();
    await shell.ready(5_000);
    const dirs = () => readdirSync(tmpdir()).filter((d) => d.startsWith(`troupe-ctl.${child.pid}.`));
    expect(dirs()).toHaveLength(1);
    const pending = shell.run('sleep 30', 60_000);
    child.kill('SIGKILL');
    await expect(pending).rejects.toThrow(/control shell ended/);
    expect(shell.ended).toBe(true);
    // A killed shell leaves its directory; the next shell to start removes it.
    const left = dirs();
    const next = localShell();
    await next.shell.ready(5_000);
    for (const d of left) expect(existsSync(`${tmpdir()}/${d}`)).toBe(false);
    next.shell.close();
  });
});

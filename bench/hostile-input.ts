/**
 * The hostile-input table of RELIABILITY-FIGURES.md: generates one input per class, runs the real
 * CLI (`troupe plan -f FILE --json`) under `/usr/bin/time -v` and prints class, result, wall time
 * and peak memory. Run: `npx tsx bench/hostile-input.ts`. Prints figures; asserts nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-hostile-bench-'));
const lines = (...rows: string[]) => `${rows.join('\n')}\n`;
const many = (n: number, row: (i: number) => string) => Array.from({ length: n }, (_, i) => row(i));

/** Class name and the file's contents (or an existing path). */
const classes: [string, string | { path: string }][] = [
  ['`/dev/zero` as the config', { path: '/dev/zero' }],
  ['a 5 MiB file', lines('type: task', 'commands: [x]', `# ${'x'.repeat(5 * 1024 * 1024)}`)],
  ['49 aliases of a 100 KB scalar', lines('type: task', 'commands:', `  - &big ${'v'.repeat(100_000)}`, ...many(49, () => '  - *big'))],
  ['30,000 keys in `env`', lines('type: task', 'commands: [x]', 'env:', ...many(30_000, (i) => `  K${i}: v`))],
  ['30,000 keys in `resources`', lines('type: task', 'commands: [x]', 'resources:', ...many(30_000, (i) => `  k${i}: 1`))],
  ['a 1.2 MB command', lines('type: task', 'commands:', `  - echo ${'a'.repeat(1_200_000)}`)],
  ['600 groups, each depending on all earlier ones', lines('type: task', 'groups:', ...many(600, (i) => `  - {name: g${i}, commands: [x], depends_on: [${many(i, (j) => `g${j}`).join(', ')}]}`))],
  ['1,025 groups', lines('type: task', 'groups:', ...many(1_025, (i) => `  - {name: g${i}, commands: [x]}`))],
  ['flow nesting 10,000 deep', lines('type: task', 'commands: [x]', `env: ${'['.repeat(10_000)}${']'.repeat(10_000)}`)],
  ['`!!python/object/apply` tag', lines('type: task', 'commands: [!!python/object/apply:os.system [id]]')],
  ['NUL from a `"\\0"` escape', lines('type: task', 'commands: ["a\\0b"]')],
  ['`gpu: -2`', lines('type: task', 'commands: [x]', 'resources: {gpu: -2}')],
  ['`memory: 99999999999999999999999TB`', lines('type: task', 'commands: [x]', 'resources: {memory: 99999999999999999999999TB}')],
  ['`image: --privileged`', lines('type: task', 'commands: [x]', 'image: "--privileged"')],
  ['`fleets: [../../x]`', lines('type: task', 'commands: [x]', 'fleets: ["../../x"]')],
  ['`${{ }}` in `ready.command`', lines('type: task', 'groups:', '  - {name: a, commands: [x], ready: {command: "curl ${{ groups[0].nodes[0].IP_ADDRESS }}"}}')],
  ['ESC and BEL in the run name', lines('type: task', 'name: "x\\e]0;PWNED\\a"', 'commands: [x]')],
];

console.log('| class | count | result | time | peak memory |');
console.log('| --- | --- | --- | --- | --- |');
try {
  for (const [name, input] of classes) {
    let file: string;
    if (typeof input === 'string') {
      file = join(scratch, `${classes.findIndex(([n]) => n === name)}.yml`);
      writeFileSync(file, input);
    } else {
      file = input.path;
    }
    const run = spawnSync('/usr/bin/time', ['-v', process.execPath, 'bin/troupe.js', 'plan', '-f', file, '--json'], {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 256 * 1024 * 1024,
      timeout: 300_000,
    });
    const stats = run.stderr;
    const rss = Number(/Maximum resident set size \(kbytes\): (\d+)/.exec(stats)?.[1] ?? 0);
    const wall = /Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (.+)/.exec(stats)?.[1]?.trim() ?? '?';
    const refusal = stats.split('\n').find((line) => line !== '' && !line.startsWith('\t') && !line.startsWith('Command'));
    const reason = refusal ? refusal.replace(/^.*?: [^:]+: /, '').slice(0, 90) : '';
    const result = run.status === 0 ? 'planned' : `exit ${run.status}: ${reason}`;
    console.log(`| ${name} | 1 | ${result.replace(/\|/g, '\\|')} | ${wall} | ${(rss / 1024).toFixed(0)} MiB |`);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

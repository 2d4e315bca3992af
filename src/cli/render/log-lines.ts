/**
 * Log output split into whole lines, per job, so that lines of several jobs (and notices between
 * them) never mix within a line. A prefix (`router/0 | `) is put before each line when given.
 */
export class LogLines {
  private readonly partial = new Map<number, string>();

  constructor(
    private readonly write: (text: string) => void,
    private readonly prefixOf: (jobNum: number) => string = () => '',
  ) {}

  push(jobNum: number, data: string): void {
    const text = (this.partial.get(jobNum) ?? '') + data;
    const end = text.lastIndexOf('\n');
    if (end < 0) {
      this.partial.set(jobNum, text);
      return;
    }
    this.partial.set(jobNum, text.slice(end + 1));
    const prefix = this.prefixOf(jobNum);
    const lines = text.slice(0, end).split('\n');
    this.write(lines.map((line) => `${prefix}${line}\n`).join(''));
  }

  /** Writes what is left of unterminated lines (the end of a log without a final newline). */
  flush(): void {
    for (const [jobNum, text] of this.partial) {
      if (text !== '') this.write(`${this.prefixOf(jobNum)}${text}\n`);
    }
    this.partial.clear();
  }
}

import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { ConfigError } from './errors';

/** A config file is at most this many bytes: checked before reading, and again while parsing text given directly. */
export const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

/** `4 MiB`, for messages. */
export function formatMiB(bytes: number): string {
  return `${Number((bytes / (1024 * 1024)).toFixed(1))} MiB`;
}

/**
 * A config file's bytes, refused at once if it is not a regular file (`/dev/zero`, a FIFO, a
 * directory) or is larger than MAX_CONFIG_BYTES: nothing is read past the bound, so a hostile path
 * cannot make `plan` use memory without limit. Errors opening the file (ENOENT...) are thrown as they are.
 */
export function readConfigBytes(file: string): Buffer {
  const fd = openSync(file, 'r');
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) {
      throw new ConfigError(file, 1, 1, '(file)', `not a regular file (${fileKind(stat)}): a config is a YAML file`);
    }
    if (stat.size > MAX_CONFIG_BYTES) throw tooLarge(file, stat.size);
    // The file may grow between fstat and read: read at most one byte more than the bound.
    const buffer = Buffer.alloc(MAX_CONFIG_BYTES + 1);
    let length = 0;
    for (;;) {
      const n = readSync(fd, buffer, length, buffer.length - length, null);
      if (n === 0) break;
      length += n;
      if (length > MAX_CONFIG_BYTES) throw tooLarge(file, length);
    }
    return buffer.subarray(0, length);
  } finally {
    closeSync(fd);
  }
}

export function tooLarge(file: string, bytes: number): ConfigError {
  return new ConfigError(
    file,
    1,
    1,
    '(file)',
    `the file is ${formatMiB(bytes)}${bytes > MAX_CONFIG_BYTES && bytes === MAX_CONFIG_BYTES + 1 ? ' or more' : ''}: a config file is at most ${formatMiB(MAX_CONFIG_BYTES)}`,
  );
}

function fileKind(stat: ReturnType<typeof fstatSync>): string {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isSocket()) return 'a socket';
  return 'not a file';
}


/**
 * A config file's bytes as text. Only UTF-8 is read (a UTF-8 byte order mark is fine): bytes that
 * are not UTF-8 are refused at their line and column, never replaced by U+FFFD, so a value does not
 * silently change on its way to a node.
 */
export function decodeConfigFile(bytes: Uint8Array, file: string): string {
  if ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff)) {
    throw new ConfigError(file, 1, 1, '(file)', 'the file is UTF-16 (it starts with a UTF-16 byte order mark): save it as UTF-8');
  }
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    const at = firstInvalidByte(bytes);
    const before = new TextDecoder('utf-8').decode(bytes.subarray(0, at));
    const lines = before.split('\n');
    const line = lines.length;
    const col = (lines[lines.length - 1]?.length ?? 0) + 1;
    const byte = bytes[at]?.toString(16).padStart(2, '0') ?? '??';
    throw new ConfigError(file, line, col, '(file)', `byte 0x${byte} is not UTF-8: save the file as UTF-8`);
  }
}

/** Offset of the first byte that does not start or continue a valid UTF-8 sequence. */
function firstInvalidByte(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i] ?? 0;
    const len = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (len === 0) return i;
    const chunk = bytes.subarray(i, i + len);
    if (chunk.length < len) return i;
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(chunk);
    } catch {
      return i;
    }
    i += len;
  }
  return i;
}

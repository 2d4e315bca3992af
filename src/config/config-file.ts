import { ConfigError } from './errors';

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

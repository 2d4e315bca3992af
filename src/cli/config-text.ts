import { decodeConfigFile, readConfigBytes } from '../config/config-file';
import { ConfigError } from '../config/errors';
import { CliError } from './command';

/**
 * A config file's text, as every command that takes `-f FILE` reads it: a refusal of the file's
 * content (too large, not UTF-8) exits 1 like any config error; a file that cannot be read exits 2.
 */
export function readConfigText(file: string): string {
  let bytes: Buffer;
  try {
    bytes = readConfigBytes(file);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 1);
    throw new CliError(`cannot read ${file}: ${err instanceof Error ? err.message : String(err)}`, 2);
  }
  try {
    return decodeConfigFile(bytes, file);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 1);
    throw err;
  }
}

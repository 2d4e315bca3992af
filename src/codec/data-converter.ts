import { fileURLToPath } from 'node:url';
import type { DataConverter } from '@temporalio/common';
import { loadCodecKeyring, type CodecKeyring } from './codec-keys';
import { EncryptionCodec } from './payload-codec';

/**
 * The one data converter of every Troupe client and worker: payloads encrypted by the codec, and
 * failures' messages and stack traces moved into an encrypted payload. What a job prints (log
 * tails, exit reasons, probe output) and sealed env values then reach Temporal only encrypted.
 */

/** For bundleWorkflowCode: workflow code converts its failures with this converter too. */
export const failureConverterPath = fileURLToPath(new URL('./failure-converter.cjs', import.meta.url));

export function troupeDataConverter(keyring: CodecKeyring = loadCodecKeyring({ create: true })): DataConverter {
  return { payloadCodecs: [new EncryptionCodec(keyring)], failureConverterPath };
}

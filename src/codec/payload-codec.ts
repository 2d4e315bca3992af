import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import type { CodecKeyring } from './codec-keys';

/**
 * Encrypts whole payloads (AES-256-GCM): the encoded payload keeps only its encoding and key id in
 * clear; data, encoding and every other metadata of the original are inside the ciphertext.
 * A payload that is not encrypted is refused by decode: with a key configured, a plain payload
 * is one written by a client without the key (`temporal workflow start --input`, a forged plan),
 * which must not reach a worker as if it came from a key holder.
 */

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';

// The package is CommonJS: Node's ESM loader gives it as a default export only.
const { Payload: PayloadMessage } = proto.temporal.api.common.v1;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const utf8 = (text: string): Uint8Array => Buffer.from(text, 'utf8');

export class UnknownCodecKeyError extends Error {
  override readonly name = 'UnknownCodecKeyError';
}

export class UnencryptedPayloadError extends Error {
  override readonly name = 'UnencryptedPayloadError';
}

export interface EncryptionCodecOptions {
  /**
   * What decode does with a payload that is not encrypted: `refuse` (clients and workers, the
   * default), or `pass` it as it is (the codec server, which only shows payloads to a reader).
   */
  unencrypted?: 'refuse' | 'pass';
}

export class EncryptionCodec implements PayloadCodec {
  constructor(
    private readonly keyring: CodecKeyring,
    private readonly options: EncryptionCodecOptions = {},
  ) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.encrypt(payload));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.decrypt(payload));
  }

  private encrypt(payload: Payload): Payload {
    const { id, key } = this.keyring.current;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    // The key id is bound to the ciphertext, so a payload cannot be relabelled with another key's id.
    cipher.setAAD(utf8(id));
    const plain = PayloadMessage.encode(payload).finish();
    const body = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    return { metadata: { encoding: utf8(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: utf8(id) }, data: body };
  }

  private decrypt(payload: Payload): Payload {
    const encoding = payload.metadata?.encoding;
    if (!encoding || Buffer.from(encoding).toString('utf8') !== ENCRYPTED_ENCODING) {
      if (this.options.unencrypted === 'pass') return payload;
      const shown = encoding ? JSON.stringify(Buffer.from(encoding).toString('utf8').slice(0, 40)) : 'none';
      throw new UnencryptedPayloadError(
        `refused an unencrypted payload (encoding ${shown}): this side has a codec key, so every payload must be encrypted with it; send it through a Troupe client or give the sender TROUPE_CODEC_KEY_FILE`,
      );
    }
    const idBytes = payload.metadata?.[KEY_ID_METADATA];
    const id = idBytes ? Buffer.from(idBytes).toString('utf8') : '';
    const key = this.keyring.byId.get(id);
    if (!key) {
      throw new UnknownCodecKeyError(
        `payload encrypted with codec key "${id}", which is not in this side's key file (TROUPE_CODEC_KEY_FILE); add that key below the current one`,
      );
    }
    const body = Buffer.from(payload.data ?? new Uint8Array());
    if (body.length < IV_BYTES + TAG_BYTES) throw new UnknownCodecKeyError(`payload encrypted with codec key "${id}" is truncated`);
    const decipher = createDecipheriv('aes-256-gcm', key, body.subarray(0, IV_BYTES));
    decipher.setAAD(utf8(id));
    decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(body.subarray(IV_BYTES, body.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new UnknownCodecKeyError(`payload encrypted with codec key "${id}" does not open with that key (altered or corrupt)`);
    }
    const decoded = PayloadMessage.decode(plain);
    return { metadata: decoded.metadata, data: decoded.data };
  }
}

import { describe, expect, it } from 'vitest';
import { looksSecret } from '../../src/config/secret-names';

describe('which env names are secret by their name', () => {
  it.each(['HF_TOKEN', 'DB_PASS', 'DB_PASSWD', 'MYSQL_PWD', 'AWS_CREDENTIALS', 'SSH_PRIVATE_KEY', 'GPG_PASSPHRASE', 'PASS', 'SMTP_PASS_FILE', 'api_key'])(
    '%s is secret',
    (name) => expect(looksSecret(name)).toBe(true),
  );

  it.each(['PWD', 'PATH', 'PASSTHROUGH', 'BYPASS_CACHE', 'COMPASS', 'MODEL_ID', 'OLDPWD_DIR'])('%s is not', (name) => expect(looksSecret(name)).toBe(false));
});

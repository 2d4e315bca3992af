/**
 * Which env values are secret: every value taken from the submitting shell (`- HF_TOKEN`), and any
 * whose name says it is a token, key or password. Secret values are sealed before they reach
 * workflow history (src/secrets).
 */
export function looksSecret(name: string): boolean {
  // `_PWD` only as a suffix: the shell's own PWD is a directory, not a password.
  return /(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)|(^|_)PASS(_|$)|_PWD$/i.test(name);
}

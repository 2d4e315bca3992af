/**
 * Which env values are secret: every value taken from the submitting shell (`- HF_TOKEN`), and any
 * whose name says it is a token, key or password. Secret values are sealed before they reach
 * workflow history (src/secrets).
 */
export function looksSecret(name: string): boolean {
  return /(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)/i.test(name);
}

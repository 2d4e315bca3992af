/** The key file on a host whose fingerprint `ssh-keygen -lf` shows, for a key type (`ssh-ed25519`…). */
export function hostKeyFile(algorithm: string | null): string {
  if (algorithm?.startsWith('ecdsa')) return '/etc/ssh/ssh_host_ecdsa_key.pub';
  if (algorithm === 'ssh-rsa' || algorithm?.startsWith('rsa')) return '/etc/ssh/ssh_host_rsa_key.pub';
  return '/etc/ssh/ssh_host_ed25519_key.pub';
}

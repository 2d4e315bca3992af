#!/bin/sh
# Makes a Temporal deployment's certificates with openssl, once: a CA, a certificate for the services
# (the frontend's, and each service's toward the others: internode; CN troupe-server, the system role),
# one for workers (CN troupe-worker) and one for users' CLI and SDK (CN troupe-user). The server
# (deploy/temporal-server) takes a caller's role from its certificate's CN (README, Security).
# ECDSA P-256; keys 0600 and the folder 0700, made with a umask that lets nobody else in.
# Also the key pair users' tokens are signed with (RSA 3072, RS256): token.key, 0600, for whoever
# mints tokens (deploy/make-token.sh), and token.pub, which the server checks tokens with.
# The server's certificate names 127.0.0.1 and localhost, and the extra names given.
#
#   deploy/make-certs.sh DIR [DNS:name|IP:addr ...]
#
# Writes DIR/ca.pem, ca.key, server.pem, server.key, worker.pem, worker.key, user.pem, user.key,
# token.key, token.pub; makes only those missing (a folder from before the roles gets its worker and
# user certificates from its CA, one from before tokens its token key). scripts/deploy-local.sh runs it for its tls/ folder; docker-compose.yml
# runs it (with DNS:temporal, the server's service name) into the volume every client mounts.
# POSIX sh: it runs in any image with openssl. openssl's own messages go to stderr.
set -eu

dir="${1:?usage: make-certs.sh DIR [DNS:name|IP:addr ...]}"
shift
sans="IP:127.0.0.1,DNS:localhost"
for name in "$@"; do sans="$sans,$name"; done

[ -s "$dir/ca.pem" ] && [ -s "$dir/server.pem" ] && [ -s "$dir/worker.pem" ] && [ -s "$dir/user.pem" ] && [ -s "$dir/token.pub" ] && exit 0
command -v openssl >/dev/null || { echo "make-certs: no 'openssl' to make the certificates in $dir" >&2; exit 1; }

umask 077
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
if [ ! -s ca.pem ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=Troupe deployment CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
fi
# The services' certificate is also their client certificate toward each other.
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=$sans" >server.ext
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=clientAuth" >client.ext
# Each file's certificate and its CN: the CN is the role.
for pair in server:troupe-server worker:troupe-worker user:troupe-user; do
  name=${pair%%:*}
  [ -s "$name.pem" ] && continue
  ext=client.ext
  [ "$name" = server ] && ext=server.ext
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=${pair#*:}" -out "$name.csr"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 825 \
    -extfile "$ext" -out "$name.pem"
  rm -f "$name.csr"
done
rm -f ca.srl server.ext client.ext
if [ ! -s token.pub ]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:3072 -out token.key
  openssl pkey -in token.key -pubout -out token.pub
fi
chmod 644 ca.pem server.pem worker.pem user.pem token.pub

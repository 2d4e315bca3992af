#!/usr/bin/env bash
# Mints a user's token for the production deployment: a JWT (RS256) signed with the deployment's
# token key (token.key, which deploy/make-certs.sh makes beside the certificates), naming the
# namespaces (teams) its holder may act in. The server (deploy/temporal-server) gives its holder the
# user role in those namespaces only, or the reader role with --reader; never a worker's or the
# system's (README, Security). Prints the token; give it to `troupe` as --api-key or TEMPORAL_API_KEY.
#
#   deploy/make-token.sh --namespace NS[,NS2...] --sub NAME [--ttl 12h] [--reader] [--key FILE]
#
#   --ttl   how long it holds: <n>s, <n>m, <n>h or <n>d (default 12h); a token cannot be revoked
#           before, short is safer
#   --key   the signing key (default $TROUPE_DEPLOY_DIR/tls/token.key, as scripts/deploy-local.sh keeps it)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
key=${TROUPE_DEPLOY_DIR:-$repo/.troupe/deploy}/tls/token.key
namespaces='' sub='' ttl=12h grant=user

die() { echo "make-token: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace) namespaces=${2:-}; shift 2 || die "--namespace needs a value" ;;
    --sub) sub=${2:-}; shift 2 || die "--sub needs a value" ;;
    --ttl) ttl=${2:-}; shift 2 || die "--ttl needs a value" ;;
    --key) key=${2:-}; shift 2 || die "--key needs a value" ;;
    --reader) grant=reader; shift ;;
    *) die "unknown argument '$1' (usage: make-token.sh --namespace NS[,NS2] --sub NAME [--ttl 12h] [--reader] [--key FILE])" ;;
  esac
done
[ -n "$namespaces" ] || die "--namespace NS[,NS2] is required: the namespaces (teams) the token's holder may act in"
# Names that need no escaping in JSON: Temporal's namespace characters; a subject of the same, plus @ and +.
[[ $sub =~ ^[A-Za-z0-9._@+-]+$ ]] || die "--sub NAME is required: letters, digits and . _ @ + - (got '$sub')"
[[ $ttl =~ ^([1-9][0-9]*)([smhd])$ ]] || die "--ttl $ttl: give <n>s, <n>m, <n>h or <n>d"
case ${BASH_REMATCH[2]} in s) unit=1 ;; m) unit=60 ;; h) unit=3600 ;; d) unit=86400 ;; esac
seconds=$((BASH_REMATCH[1] * unit))
[ -r "$key" ] || die "no signing key $key (deploy/make-certs.sh makes token.key; give --key FILE)"

permissions=''
IFS=, read -r -a list <<<"$namespaces"
for ns in "${list[@]}"; do
  [[ $ns =~ ^[A-Za-z0-9._-]+$ ]] || die "--namespace: '$ns' is not a namespace name (letters, digits and . _ -)"
  permissions+="${permissions:+,}\"$ns:$grant\""
done

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
now=$(date +%s)
header=$(printf '{"alg":"RS256","typ":"JWT"}' | b64url)
payload=$(printf '{"sub":"%s","iat":%d,"exp":%d,"permissions":[%s]}' "$sub" "$now" "$((now + seconds))" "$permissions" | b64url)
signature=$(printf '%s.%s' "$header" "$payload" | openssl dgst -sha256 -sign "$key" -binary | b64url)
echo "$header.$payload.$signature"

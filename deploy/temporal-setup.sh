#!/bin/sh
# Prepares a Temporal namespace for Troupe with the `temporal` CLI: waits until the service is
# healthy, creates the namespace if it is missing, and registers Troupe's search attributes (the
# Web UI's run filters such as TroupeRunStatus="RUNNING"). Safe to run again: what exists is kept.
#
# docker-compose.yml runs it once per `up` in the admin-tools image; it is POSIX sh and needs
# only the temporal CLI, so it runs wherever that CLI does. Environment:
#   TEMPORAL_ADDRESS            frontend host:port (required)
#   TEMPORAL_NAMESPACE          namespace (default: default)
#   TROUPE_SEARCH_ATTRIBUTES    space-separated Name=Type pairs (required)
#   TROUPE_NAMESPACE_RETENTION  retention of closed runs' histories, for a new namespace (default: 168h)
#   TROUPE_SETUP_WAIT_SECONDS   how long to wait for the service (default: 120)
set -eu

address="${TEMPORAL_ADDRESS:?set TEMPORAL_ADDRESS to the Temporal frontend host:port}"
namespace="${TEMPORAL_NAMESPACE:-default}"
attributes="${TROUPE_SEARCH_ATTRIBUTES:?set TROUPE_SEARCH_ATTRIBUTES to Name=Type pairs}"
retention="${TROUPE_NAMESPACE_RETENTION:-168h}"
wait_seconds="${TROUPE_SETUP_WAIT_SECONDS:-120}"
deadline=$(( $(date +%s) + wait_seconds ))

say() { echo "temporal-setup: $*"; }

# Retries a command until it succeeds or the deadline passes: the server answers health checks a
# moment before a new namespace is visible to every service.
retry() {
  what="$1"
  shift
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      say "gave up after ${wait_seconds}s waiting for $what at $address"
      "$@" || true
      exit 1
    fi
    sleep 2
  done
}

# True when `search-attribute list` shows NAME with TYPE (the CLI prints a two-column table).
registered() {
  temporal operator search-attribute list --address "$address" --namespace "$namespace" |
    grep -Eq "^[[:space:]]*$1[[:space:]]+$2[[:space:]]*\$"
}

# A typo in the list is refused before anything on the service changes.
for pair in $attributes; do
  case "$pair" in
    [A-Za-z]*=[A-Za-z]*) ;;
    *) say "bad entry \"$pair\" in TROUPE_SEARCH_ATTRIBUTES (want Name=Type)"; exit 2 ;;
  esac
done

retry "a healthy service" temporal operator cluster health --address "$address"

if temporal operator namespace describe --address "$address" --namespace "$namespace" >/dev/null 2>&1; then
  say "namespace $namespace exists"
elif temporal operator namespace create --address "$address" --namespace "$namespace" --retention "$retention"; then
  say "namespace $namespace created (retention $retention)"
else
  # Another set-up may have created it a moment ago; the wait below tells.
  say "could not create namespace $namespace; waiting for it to appear"
fi
retry "namespace $namespace" temporal operator search-attribute list --address "$address" --namespace "$namespace"

for pair in $attributes; do
  name="${pair%%=*}"
  type="${pair#*=}"
  if registered "$name" "$type"; then
    say "$name ($type) already registered"
    continue
  fi
  # Older CLIs refuse an attribute that exists; the check below tells that apart from a conflict.
  temporal operator search-attribute create --address "$address" --namespace "$namespace" \
    --name "$name" --type "$type" >/dev/null 2>&1 || true
  if ! registered "$name" "$type"; then
    say "could not register $name as $type in namespace $namespace:"
    temporal operator search-attribute create --address "$address" --namespace "$namespace" \
      --name "$name" --type "$type" || true
    exit 1
  fi
  say "$name ($type) registered"
done
say "namespace $namespace is ready for Troupe"

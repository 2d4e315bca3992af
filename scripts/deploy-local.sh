#!/usr/bin/env bash
# A production-shaped Temporal deployment from bare processes, without Docker: PostgreSQL from
# Debian and the Temporal server at the release docker-compose.yml pins (built with Troupe's own
# authorizer: deploy/temporal-server), its frontend, history,
# matching and worker services each in its own process (so one can be killed and restarted alone);
# and a Troupe service gateway (`troupe gateway`), its tables kept in the state dir. Troupe workers
# are yours to start: `up` prints how, with the gateway's admin address and token file.
# The frontend and the services' traffic among themselves are mTLS: the first `up` makes a CA, a
# certificate for the services, one for workers and one for users (tls/ in the state dir, keys 0600),
# and a client without a certificate of that CA is refused. The certificate's CN is the caller's role:
# a user may start, read and stop runs, only workers poll task queues, send the fleets' Updates and a
# run's internal signals (README, Security). `up` prints the variables a user and a worker need.
# It also makes the key users' tokens are signed with (tls/token.key; the server checks them with
# token.pub): a token (deploy/make-token.sh) makes its holder a user in the namespaces it names only.
#
#   scripts/deploy-local.sh up       start what is not running; the first time also builds the server,
#                                    makes the certificates, creates the database, the schemas, the
#                                    namespace `default` and Troupe's search attributes. Prints the
#                                    frontend's address and the TLS variables a client needs.
#   scripts/deploy-local.sh down     stop the services and PostgreSQL (by recorded pid); data is kept
#   scripts/deploy-local.sh stop NAME  stop one part gracefully: postgresql, frontend, history,
#                                    matching, worker or gateway (`up` starts it again)
#   scripts/deploy-local.sh status   what runs, and where
#   scripts/deploy-local.sh build    only build (or find) the server binaries
#
# Environment:
#   TROUPE_DEPLOY_DIR               state, logs, pids and ports (default <repo>/.troupe/deploy)
#   TROUPE_TEMPORAL_SERVER_CACHE    the built server (troupe-server-<hash of deploy/temporal-server>)
#                                   and `sql` binaries (default ~/.cache/troupe/temporal-server-<version>)
#   TROUPE_DEPLOY_FRONTEND_PORT, TROUPE_DEPLOY_POSTGRES_PORT, TROUPE_DEPLOY_GATEWAY_PORT
#                                   fixed ports for the first `up` (default: free ones; then kept)
#   TROUPE_DEPLOY_GATEWAY_PUBLIC_URL  the gateway's --public-url (default: its loopback address)
# Runs as root: PostgreSQL runs as the `postgres` user.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
version=1.29.1
state=${TROUPE_DEPLOY_DIR:-$repo/.troupe/deploy}
cache=${TROUPE_TEMPORAL_SERVER_CACHE:-$HOME/.cache/troupe/temporal-server-$version}
services=(frontend history matching worker)
temporal_cli=$repo/.venv/bin/temporal
tls=$state/tls
server_src=$repo/deploy/temporal-server
# The server binary is named for its sources: a changed authorizer builds a new one (seconds once
# the Go build cache is warm), never runs a stale one.
server_bin=$cache/troupe-server-$(cd "$server_src" && cat go.mod go.sum $(ls *.go | grep -v '_test\.go$') | sha256sum | cut -c1-12)
# What a client of this deployment needs besides its address: the temporal CLI's flags, and its
# variable names, which Troupe reads too, with the certificate of its role (worker, user; the
# services' own for what only the operator does here: the namespace and search attributes). The
# server name is the certificate's `localhost`: Node warns when it is given an IP address as one.
tls_env() {
  printf '%s\n' TEMPORAL_TLS_SERVER_CA_CERT_PATH="$tls/ca.pem" TEMPORAL_TLS_CLIENT_CERT_PATH="$tls/$1.pem" \
    TEMPORAL_TLS_CLIENT_KEY_PATH="$tls/$1.key" TEMPORAL_TLS_SERVER_NAME=localhost
}
mapfile -t system_tls_env < <(tls_env server)
cli_tls=(--tls-ca-path "$tls/ca.pem" --tls-cert-path "$tls/server.pem" --tls-key-path "$tls/server.key" --tls-server-name localhost)

say() { echo "deploy-local: $*" >&2; }
die() { say "$*"; exit 1; }
# The recorded pid still runs that part: not reused by another process, not a zombie (whose
# command line is empty) that a killed service leaves until something reaps it.
alive() {
  local signature="start --service $1 "
  [ "$1" = gateway ] && signature="bin/troupe.js gateway "
  [ -f "$state/$1.pid" ] || return 1
  { tr '\0' ' ' <"/proc/$(cat "$state/$1.pid")/cmdline"; } 2>/dev/null | grep -q -- "$signature"
}
as_postgres() { runuser -u postgres -- "$@"; }

pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] || die "PostgreSQL is not installed (Debian package postgresql; scripts/setup.sh --test installs it)"
  echo "$dir"
}

# Builds the server (deploy/temporal-server: the release's services with Troupe's authorizer) and the
# release's schema tool from their Go modules once per machine (~7 min cold).
ensure_binaries() {
  [ -x "$server_bin" ] && [ -x "$cache/sql" ] && return 0
  command -v go >/dev/null || die "no 'go' to build the Temporal server $version into $cache"
  mkdir -p "$cache"
  say "building the Temporal server $version with Troupe's authorizer into $cache (minutes, once per machine)"
  (cd "$server_src" && go build -o "$server_bin.partial" . && mv "$server_bin.partial" "$server_bin")
  [ -x "$cache/sql" ] || GOBIN=$cache go install "go.temporal.io/server/cmd/tools/sql@v$version"
}

# The deployment's CA, the services' certificate, the workers' and the users', made once by the
# script the compose stack runs too (deploy/make-certs.sh): keys 0600 in a 0700 folder; the server's certificate
# names 127.0.0.1 and localhost, where everything listens.
ensure_certs() {
  sh "$repo/deploy/make-certs.sh" "$tls" 2>>"$state/logs/tls.log" \
    || die "the certificates could not be made in $tls (log: $state/logs/tls.log)"
}

# The release's schema folders come with its Go module.
schema_dir() {
  local dir
  dir=$(go mod download -json "go.temporal.io/server@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/schema/postgresql/v12" ] || die "no schema folder in the Go module go.temporal.io/server@v$version"
  echo "$dir/schema/postgresql/v12"
}

# Loopback ports that nothing holds, all bound together so none is handed out twice. Below 32768:
# the server keeps membership ports in a smallint column (and Linux hands out ephemeral ports above).
free_ports() {
  node -e '
    const net = require("node:net");
    const want = Number(process.argv[1]);
    const held = [];
    const tryOne = () => new Promise((resolve) => {
      const port = 10000 + Math.floor(Math.random() * 22767);
      const s = net.createServer();
      s.once("error", () => resolve());
      s.listen(port, "127.0.0.1", () => { held.push(s); resolve(); });
    });
    (async () => {
      while (held.length < want) await tryOne();
      console.log(held.map((s) => s.address().port).join(" "));
      held.forEach((s) => s.close());
    })();' "$1"
}

ensure_ports() {
  local p
  # A state dir from before the gateway gets its ports added; the others are kept.
  if [ -f "$state/ports.env" ]; then
    grep -q '^GATEWAY_PORT=' "$state/ports.env" && return 0
    read -r -a p <<<"$(free_ports 2)"
    printf 'GATEWAY_PORT=%s\nGATEWAY_ADMIN_PORT=%s\n' "${TROUPE_DEPLOY_GATEWAY_PORT:-${p[0]}}" "${p[1]}" >>"$state/ports.env"
    return 0
  fi
  read -r -a p <<<"$(free_ports 12)"
  cat >"$state/ports.env" <<EOF
POSTGRES_PORT=${TROUPE_DEPLOY_POSTGRES_PORT:-${p[0]}}
FRONTEND_PORT=${TROUPE_DEPLOY_FRONTEND_PORT:-${p[1]}}
FRONTEND_MEMBERSHIP_PORT=${p[2]}
HTTP_PORT=${p[3]}
HISTORY_PORT=${p[4]}
HISTORY_MEMBERSHIP_PORT=${p[5]}
MATCHING_PORT=${p[6]}
MATCHING_MEMBERSHIP_PORT=${p[7]}
WORKER_PORT=${p[8]}
WORKER_MEMBERSHIP_PORT=${p[9]}
GATEWAY_PORT=${TROUPE_DEPLOY_GATEWAY_PORT:-${p[10]}}
GATEWAY_ADMIN_PORT=${p[11]}
EOF
}

# The data directory belongs to `postgres`, who must be able to reach it: under the state dir when
# every folder on the way lets it pass, else in a private temp dir (its path kept in pgdata.path).
pgdata() {
  if [ -f "$state/pgdata.path" ]; then cat "$state/pgdata.path"; return; fi
  local dir
  if as_postgres test -x "$state"; then
    dir=$state/postgres
    mkdir -p "$dir"
  else
    dir=$(mktemp -d /tmp/troupe-deploy-pg.XXXXXX)
  fi
  chown postgres: "$dir"
  chmod 700 "$dir"
  echo "$dir" >"$state/pgdata.path"
  echo "$dir"
}

pg_running() { as_postgres "$(pg_bin)/pg_ctl" -D "$(pgdata)" status >/dev/null 2>&1; }

start_postgres() {
  local bin data
  bin=$(pg_bin)
  data=$(pgdata)
  if [ ! -f "$data/PG_VERSION" ]; then
    # A password of its own, kept beside the state (mode 600): loopback only, but not `trust`.
    head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$state/postgres.password"
    chmod 600 "$state/postgres.password"
    local pwfile
    pwfile=$(mktemp /tmp/troupe-deploy-pw.XXXXXX)
    cp "$state/postgres.password" "$pwfile"
    chown postgres: "$pwfile"
    as_postgres "$bin/initdb" -D "$data" -U temporal -A scram-sha-256 --pwfile="$pwfile" >"$state/logs/initdb.log" 2>&1 \
      || { rm -f "$pwfile"; die "initdb failed (log: $state/logs/initdb.log)"; }
    rm -f "$pwfile"
  fi
  pg_running && return 0
  as_postgres "$bin/pg_ctl" -D "$data" -l "$data/postgres.log" -w -t 60 \
    -o "-k $data -p $POSTGRES_PORT -c listen_addresses=127.0.0.1" start >/dev/null \
    || die "PostgreSQL did not start (log: $data/postgres.log)"
}

# deploy/temporal/schema.sh, as the compose deployment runs it, with the schema tool built here.
apply_schemas() {
  [ -f "$state/schema-$version" ] && return 0
  SQL_HOST=127.0.0.1 SQL_PORT=$POSTGRES_PORT SQL_USER=temporal SQL_PASSWORD=$(cat "$state/postgres.password") \
  TEMPORAL_SQL_TOOL=$cache/sql TEMPORAL_SCHEMA_DIR=$(schema_dir) \
    sh "$repo/deploy/temporal/schema.sh" >>"$state/logs/schema.log" 2>&1 \
    || die "the schema could not be applied (log: $state/logs/schema.log)"
  touch "$state/schema-$version"
}

start_service() {
  local service=$1
  alive "$service" && return 0
  # deploy/temporal/config/troupe.yaml is a template: it reads these.
  TROUPE_POSTGRES_HOST=127.0.0.1 TROUPE_POSTGRES_PORT=$POSTGRES_PORT TROUPE_POSTGRES_USER=temporal \
  TROUPE_POSTGRES_PASSWORD=$(cat "$state/postgres.password") \
  TROUPE_TEMPORAL_FRONTEND_PORT=$FRONTEND_PORT TROUPE_TEMPORAL_FRONTEND_MEMBERSHIP_PORT=$FRONTEND_MEMBERSHIP_PORT \
  TROUPE_TEMPORAL_HTTP_PORT=$HTTP_PORT \
  TROUPE_TEMPORAL_HISTORY_PORT=$HISTORY_PORT TROUPE_TEMPORAL_HISTORY_MEMBERSHIP_PORT=$HISTORY_MEMBERSHIP_PORT \
  TROUPE_TEMPORAL_MATCHING_PORT=$MATCHING_PORT TROUPE_TEMPORAL_MATCHING_MEMBERSHIP_PORT=$MATCHING_MEMBERSHIP_PORT \
  TROUPE_TEMPORAL_WORKER_PORT=$WORKER_PORT TROUPE_TEMPORAL_WORKER_MEMBERSHIP_PORT=$WORKER_MEMBERSHIP_PORT \
  TROUPE_TEMPORAL_DYNAMIC_CONFIG=$repo/deploy/temporal/dynamicconfig.yaml TROUPE_TEMPORAL_TLS_DIR=$tls \
  TROUPE_TEMPORAL_TOKEN_KEY=$tls/token.pub \
    setsid "$server_bin" --root "$repo/deploy/temporal" --config config --env troupe \
      start --service "$service" >>"$state/logs/$service.log" 2>&1 </dev/null &
  echo $! >"$state/$service.pid"
}

# The service gateway: its admin token made once (mode 600, beside the state, as PostgreSQL's
# password), its tables in gateway.json, so a restarted gateway serves them at once.
start_gateway() {
  alive gateway && return 0
  if [ ! -s "$state/gateway-admin.token" ]; then
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/gateway-admin.token")
  fi
  setsid node "$repo/bin/troupe.js" gateway --listen "127.0.0.1:$GATEWAY_PORT" --admin "127.0.0.1:$GATEWAY_ADMIN_PORT" \
    --public-url "${TROUPE_DEPLOY_GATEWAY_PUBLIC_URL:-http://127.0.0.1:$GATEWAY_PORT}" \
    --state "$state/gateway.json" --admin-token-file "$state/gateway-admin.token" \
    >>"$state/logs/gateway.log" 2>&1 </dev/null &
  echo $! >"$state/gateway.pid"
  local deadline=$((SECONDS + 60))
  # Up when its admin API answers GET /info with the token (what the compose healthcheck asks).
  until node -e 'fetch(process.argv[1], {headers: {Authorization: `Bearer ${require("fs").readFileSync(process.argv[2], "utf8").trim()}`}}).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
      "http://127.0.0.1:$GATEWAY_ADMIN_PORT/info" "$state/gateway-admin.token"; do
    alive gateway || die "the gateway exited (log: $state/logs/gateway.log)"
    [ "$SECONDS" -lt "$deadline" ] || die "the gateway's admin API does not answer after 60 s (log: $state/logs/gateway.log)"
    sleep 0.5
  done
}

# On a new database the first service to start writes the cluster's metadata; several starting
# at once race for it and the losers exit. So one goes first, and the others once the row is there.
wait_cluster_metadata() {
  local deadline=$((SECONDS + 120))
  until PGPASSWORD=$(cat "$state/postgres.password") "$(pg_bin)/psql" -h 127.0.0.1 -p "$POSTGRES_PORT" -U temporal \
      -d temporal -tAc "SELECT count(*) FROM cluster_metadata_info" 2>/dev/null | grep -q '^[1-9]'; do
    alive history || die "the history service exited (log: $state/logs/history.log)"
    [ "$SECONDS" -lt "$deadline" ] || die "no cluster metadata after 120 s (log: $state/logs/history.log)"
    sleep 0.5
  done
}

wait_healthy() {
  local deadline=$((SECONDS + 180)) service
  until "$temporal_cli" operator cluster health --address "127.0.0.1:$FRONTEND_PORT" "${cli_tls[@]}" 2>/dev/null | grep -q SERVING; do
    for service in "${services[@]}"; do
      alive "$service" || die "the $service service exited (log: $state/logs/$service.log)"
    done
    [ "$SECONDS" -lt "$deadline" ] || die "the frontend at 127.0.0.1:$FRONTEND_PORT is not healthy after 180 s (logs: $state/logs)"
    sleep 1
  done
}

# The namespace and the search attributes, retried: a new server takes a few seconds to accept them.
setup_namespace() {
  [ -f "$state/namespace-ready" ] && return 0
  local deadline=$((SECONDS + 120))
  until "$temporal_cli" operator namespace describe --address "127.0.0.1:$FRONTEND_PORT" "${cli_tls[@]}" --namespace default >/dev/null 2>&1; do
    "$temporal_cli" operator namespace create --address "127.0.0.1:$FRONTEND_PORT" "${cli_tls[@]}" --namespace default \
      --retention 168h >>"$state/logs/setup.log" 2>&1 || true
    [ "$SECONDS" -lt "$deadline" ] || die "could not create the namespace default (log: $state/logs/setup.log)"
    sleep 2
  done
  until env TEMPORAL_ADDRESS="127.0.0.1:$FRONTEND_PORT" "${system_tls_env[@]}" node "$repo/bin/troupe.js" setup --namespace default >>"$state/logs/setup.log" 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "troupe setup failed (log: $state/logs/setup.log)"
    sleep 2
  done
  touch "$state/namespace-ready"
}

stop_pid() {
  local name=$1 pid i
  [ -f "$state/$name.pid" ] || return 0
  pid=$(cat "$state/$name.pid")
  if alive "$name"; then
    kill -TERM "$pid"
    for i in $(seq 1 100); do alive "$name" || break; sleep 0.2; done
    if alive "$name"; then kill -KILL "$pid"; fi
  fi
  rm -f "$state/$name.pid"
}

up() {
  mkdir -p "$state/logs"
  ensure_binaries
  ensure_ports
  ensure_certs
  # shellcheck source=/dev/null
  . "$state/ports.env"
  start_postgres
  apply_schemas
  local service
  start_service history
  wait_cluster_metadata
  for service in "${services[@]}"; do start_service "$service"; done
  wait_healthy
  setup_namespace
  start_gateway
  local user_env worker_env
  mapfile -t user_env < <(tls_env user)
  mapfile -t worker_env < <(tls_env worker)
  echo "Temporal frontend: 127.0.0.1:$FRONTEND_PORT  (mTLS; the certificate is the role)"
  echo "Users (troupe and temporal CLIs, SDK): export TEMPORAL_ADDRESS=127.0.0.1:$FRONTEND_PORT$(printf ' %q' "${user_env[@]}")"
  echo "Workers: TEMPORAL_ADDRESS=127.0.0.1:$FRONTEND_PORT$(printf ' %q' "${worker_env[@]}") troupe worker --gateway http://127.0.0.1:$GATEWAY_ADMIN_PORT --gateway-token-file $state/gateway-admin.token"
  echo "Service gateway: http://127.0.0.1:$GATEWAY_PORT"
  echo "Users' tokens (a user in the namespaces named only): TEMPORAL_API_KEY=\$(TROUPE_DEPLOY_DIR=$(printf '%q' "$state") $(printf '%q' "$repo/deploy/make-token.sh") --namespace default --sub NAME --ttl 12h)"
}

stop_postgres() {
  if [ -f "$state/pgdata.path" ] && pg_running; then
    as_postgres "$(pg_bin)/pg_ctl" -D "$(pgdata)" -m fast -w stop >/dev/null
  fi
}

down() {
  [ -d "$state" ] || return 0
  local i
  stop_pid gateway
  for ((i = ${#services[@]} - 1; i >= 0; i--)); do stop_pid "${services[$i]}"; done
  stop_postgres
  say "stopped (data kept in $state)"
}

stop_one() {
  local name=${1:-} service
  [ -d "$state" ] || die "not set up ($state)"
  if [ "$name" = postgresql ]; then stop_postgres; return; fi
  for service in "${services[@]}" gateway; do
    if [ "$service" = "$name" ]; then stop_pid "$name"; return; fi
  done
  die "no part named '$name' (postgresql, ${services[*]}, gateway)"
}

status() {
  [ -f "$state/ports.env" ] || { echo "not set up ($state)"; return 0; }
  # shellcheck source=/dev/null
  . "$state/ports.env"
  local service
  if pg_running; then echo "postgresql  running  127.0.0.1:$POSTGRES_PORT"; else echo "postgresql  stopped"; fi
  for service in "${services[@]}"; do
    if alive "$service"; then echo "$service  running  pid $(cat "$state/$service.pid")"; else echo "$service  stopped"; fi
  done
  if alive gateway; then
    echo "gateway  running  pid $(cat "$state/gateway.pid")  http://127.0.0.1:$GATEWAY_PORT  admin http://127.0.0.1:$GATEWAY_ADMIN_PORT"
  else
    echo "gateway  stopped"
  fi
  echo "Temporal frontend: 127.0.0.1:$FRONTEND_PORT  (mTLS: the CA and the worker's and user's certificates in $tls)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  stop) stop_one "${2:-}" ;;
  status) status ;;
  build) ensure_binaries; echo "$server_bin" ;;
  *) echo "usage: scripts/deploy-local.sh up|down|stop NAME|status|build" >&2; exit 2 ;;
esac

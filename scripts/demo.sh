#!/usr/bin/env bash
# `npm run demo`: Troupe's main job on the embedded default — a local Temporal dev server, a worker,
# and the seed's PD-disaggregation sample on the local fleet. `npm run demo -- --stop` stops the
# dev server and worker it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node --import tsx scripts/demo.ts "$@"

#!/usr/bin/env bash
# `npm run demo`: Troupe's main job on the embedded default — a local Temporal dev server, a worker,
# and the seed's PD-disaggregation sample on the local fleet. `npm run demo -- --stop` stops the
# dev server and worker it started. `npm run demo -- --service`: the PD service behind a gateway,
# called once with curl, then stopped with all it started (scripts/demo-service.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node --import tsx scripts/demo.ts "$@"

#!/usr/bin/env bash
# The whole test suite: installs what it needs, type-checks, then runs every test against a real
# Temporal dev server (started once by vitest's global set-up) and real processes / sshd hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
npx tsc --noEmit
mkdir -p artifacts
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json=artifacts/vitest.json --reporter=./scripts/summary-reporter.ts "$@" || status=$?
# The closing line: an expected failure (`it.fails`) counts as a known failure, not as a pass.
npx tsx -e '
  import { readFileSync } from "node:fs";
  import { summaryLine } from "./scripts/summary-reporter.ts";
  console.log(summaryLine(JSON.parse(readFileSync("artifacts/summary.json", "utf8"))));
' || true
exit "$status"

#!/usr/bin/env bash
# The whole test suite: installs what it needs, type-checks, then runs every test against a real
# Temporal dev server (started once by vitest's global set-up) and real processes / sshd hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
npx tsc --noEmit
mkdir -p artifacts
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json=artifacts/vitest.json "$@" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync("artifacts/vitest.json", "utf8"));
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests + r.numTodoTests} skipped`);
' || true
exit "$status"

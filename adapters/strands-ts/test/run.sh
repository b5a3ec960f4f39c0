#!/usr/bin/env bash
# Builds harvest-strands and runs its tests with node's test runner against each pinned SDK:
# 1.19.0 (the package's devDependency) and 1.16.0 (test/sdk-1.16/, its own lockfile).
#   HARVEST_BIN=/path/to/harvest test/run.sh [--install]
# --install: npm ci in both directories first (what scripts/test.sh does).
# For 1.16 the built dist/ and the tests are copied into test/sdk-1.16/run/, so that
# '@strands-agents/sdk' resolves, from the adapter as from the tests, to that directory's copy.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${HARVEST_BIN:?HARVEST_BIN must name the harvest binary}"
if [ "${1:-}" = --install ]; then
	npm ci --no-audit --no-fund --loglevel=error
	(cd test/sdk-1.16 && npm ci --no-audit --no-fund --loglevel=error)
fi
npx --no-install tsc -p tsconfig.json
tests=(test/sandbox.test.js test/exec.test.js test/agent.test.js)
rc=0
echo "strands-ts: tests against @strands-agents/sdk 1.19.0" >&2
STRANDS_SDK_EXPECT=1.19.0 node --test "${tests[@]}" || rc=1
run=test/sdk-1.16/run
rm -rf "$run"
mkdir -p "$run/test"
cp -R dist "$run/dist"
cp test/*.js "$run/test/"
echo "strands-ts: tests against @strands-agents/sdk 1.16.0" >&2
(cd "$run" && STRANDS_SDK_EXPECT=1.16.0 node --test "${tests[@]}") || rc=1
exit $rc

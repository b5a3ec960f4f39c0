#!/usr/bin/env bash
# Line and branch coverage of src/ by the test suite: a HARVEST_COVERAGE build (gcc --coverage
# -O0, no sanitizers) in build-cov/, the whole suite through ctest, then lcov.
#
#   scripts/coverage.sh [CTEST ARGS...]      (e.g. -R walk to measure a few tests only)
#
# Prints a table of line and branch coverage per file of src/ and the total, and writes the
# HTML report to build-cov/coverage/index.html (open it in a browser, e.g.
# `xdg-open build-cov/coverage/index.html`, or serve it: `python3 -m http.server -d
# build-cov/coverage 8000` and browse http://localhost:8000/). The lcov data is
# build-cov/coverage.info.
#
#   scripts/coverage.sh --reset
#       Only zeroes the counters of COVERAGE_BUILD (already configured and built as below) and
#       makes its empty .gcda files: scripts/test.sh's valgrind step does so before its run,
#       whose counters the coverage step then reports (one run of the suite for both).
#
# Environment:
#   COVERAGE_BUILD     the build directory (default: build-cov)
#   COVERAGE_MIN       fail (exit 1) when total line coverage is below this percentage
#                      (default: none; the project's target is 85)
#   COVERAGE_CONTINUE  1: keep the counters already in COVERAGE_BUILD (a run under valgrind,
#                      say) and add those of the tests CTEST ARGS select, then report
#
# Exits 1 when a test fails (the report is still made) or the minimum is not met.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/deps.sh
hv_install_deps
build=${COVERAGE_BUILD:-build-cov}
start=$(date +%s)
lcov_opts=(--rc lcov_branch_coverage=1)

reset_counters() {
	lcov --quiet "${lcov_opts[@]}" --zerocounters --directory "$build"
	rm -rf "$build/coverage" "$build"/coverage*.info
	# Some tests run harvest as the user nobody, whose counters must be written too (and who
	# must not print "profiling: ... Permission denied" on stderr): every .gcda file is made
	# beforehand, empty and world-writable, which libgcov fills as if it were new. The empty
	# ones left over (code no test ran) are removed afterwards.
	find "$build" -name '*.gcno' | while read -r f; do
		g=${f%.gcno}.gcda
		: >"$g"
		chmod 666 "$g"
	done
}
if [ "${1:-}" = --reset ]; then
	reset_counters
	exit 0
fi

# Atomic counter updates: the walker, the MIME detector and the runner are multithreaded, and
# racing plain increments lose counts (lcov then reports "negative counts"). No emulator: a
# build the valgrind step configured with one runs its tests natively here (scripts/test.sh
# configures it with these same flags, so nothing is recompiled).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_COVERAGE=ON -DHARVEST_SANITIZE=OFF \
	-DHARVEST_WERROR=ON -DHARVEST_TESTS=ON -DCMAKE_C_FLAGS=-fprofile-update=atomic \
	-DCMAKE_CROSSCOMPILING_EMULATOR= >/dev/null
cmake --build "$build" -j "$(nproc)"

[ "${COVERAGE_CONTINUE:-0}" = 1 ] || reset_counters

tests_rc=0
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@") || tests_rc=$?
find "$build" -name '*.gcda' -size 0 -delete

lcov --quiet "${lcov_opts[@]}" --capture --directory "$build" --base-directory "$root" \
	--output-file "$build/coverage-all.info" 2> >(grep -v -E '^Subroutine .* redefined at' >&2)
lcov --quiet "${lcov_opts[@]}" --extract "$build/coverage-all.info" "$root/src/*" \
	--output-file "$build/coverage.info"
genhtml --quiet "${lcov_opts[@]}" --branch-coverage --legend --title "harvest src/" \
	--prefix "$root" --output-directory "$build/coverage" "$build/coverage.info"

# The table, from the tracefile: per file LF/LH (lines found/hit), BRF/BRH (branches).
cov_rc=0
python3 - "$build/coverage.info" "$root" "${COVERAGE_MIN:-}" <<'EOF' || cov_rc=$?
import os, sys
info, root, minimum = sys.argv[1], sys.argv[2], sys.argv[3]
files, cur = {}, None
for line in open(info):
    line = line.strip()
    if line.startswith('SF:'):
        cur = os.path.relpath(line[3:], root)
        files[cur] = {'LF': 0, 'LH': 0, 'BRF': 0, 'BRH': 0}
    elif ':' in line and cur and line.split(':', 1)[0] in ('LF', 'LH', 'BRF', 'BRH'):
        k, v = line.split(':', 1)
        files[cur][k] += int(v)
def pct(h, f):
    return 100.0 * h / f if f else 100.0
w = max([len(f) for f in files] + [5])
print(f"\n{'file':<{w}}  {'lines':>17}  {'branches':>17}")
tot = {'LF': 0, 'LH': 0, 'BRF': 0, 'BRH': 0}
for f in sorted(files):
    d = files[f]
    for k in tot:
        tot[k] += d[k]
    print(f"{f:<{w}}  {pct(d['LH'], d['LF']):6.1f}% {d['LH']:>4}/{d['LF']:<5}"
          f"  {pct(d['BRH'], d['BRF']):6.1f}% {d['BRH']:>4}/{d['BRF']:<5}")
total = pct(tot['LH'], tot['LF'])
print(f"{'total':<{w}}  {total:6.1f}% {tot['LH']:>4}/{tot['LF']:<5}"
      f"  {pct(tot['BRH'], tot['BRF']):6.1f}% {tot['BRH']:>4}/{tot['BRF']:<5}")
if minimum and total < float(minimum):
    print(f"coverage: {total:.1f}% of lines, below the minimum {minimum}%", file=sys.stderr)
    sys.exit(1)
EOF
echo "coverage: HTML report in $build/coverage/index.html ($(($(date +%s) - start)) s)" >&2
if [ $tests_rc -ne 0 ]; then
	echo "coverage: some tests failed (above); the numbers count what ran" >&2
	exit 1
fi
exit $cov_rc

#!/usr/bin/env bash
# The test suite: what CI (.ci/run) runs, and what to run before a change lands.
#
#   scripts/test.sh
#       Every check, in this order; each runs even when an earlier one failed, and the last
#       lines say which passed and how long each took:
#       1. suite     ASan + UBSan, warnings as errors (build-test/): the whole suite via ctest,
#                    the walker stress test included
#       2. lint      scripts/lint.sh: clang-tidy (.clang-tidy) and cppcheck on src/, include/
#       3. fuzz      scripts/fuzz.sh: every libFuzzer target (tests/fuzz/) under ASan + UBSan,
#                    its saved regression inputs first, then HARVEST_FUZZ_SECONDS
#                    of fuzzing from its seed corpus (default 12 s each)
#       4. valgrind  the suite again, built without sanitizers (build-vg/), under memcheck (see
#                    --valgrind below)
#       5. coverage  scripts/coverage.sh on step 4's counters (build-vg/ is a --coverage
#                    build), with those of the five tests step 4 leaves out, run natively there;
#                    fails when line coverage of src/ is below HARVEST_COVERAGE_MIN (default 85)
#       6. adapters  the Strands sandbox adapters (adapters/) against a plain RelWithDebInfo
#                    harvest (build-adapters/): npm ci in each lockfile's directory, then the
#                    TypeScript tests (node --test) against @strands-agents/sdk 1.19.0 and 1.16.0,
#                    and the Python tests (Debian's pytest); about a minute
#       7. page      the HTML page (`--format html`) in a real browser: Debian's chromium, headless,
#                    driven by playwright-core (npm ci in tests/page/; no browser is downloaded),
#                    against the same harvest build as step 6; a run whose artifacts are plots
#                    (Debian's matplotlib), an SVG and an HTML file with scripts, a CSV, a PDF,
#                    hostile names...: every image decodes, no script ran, no request but data:,
#                    the CSV's cells; screenshots (desktop and phone, light and dark) are left in
#                    build-page/screenshots/ to look at; about 20 s
#       About 50 minutes on 2 cores (valgrind 30 of them). Exits 0 only when every step passed.
#
#   scripts/test.sh --quick [CTEST ARGS...]
#       Steps 1 and 2, and 6 and 7 when no CTEST ARGS are given (a few minutes): the loop while
#       working on a change. CTEST ARGS go to ctest (e.g. -R walk). HARVEST_LINT=0 skips step 2,
#       HARVEST_ADAPTERS=0 step 6, HARVEST_PAGE=0 step 7.
#
#   scripts/test.sh --adapters
#       Step 6 only.
#
#   scripts/test.sh --page
#       Step 7 only.
#
#   scripts/test.sh --valgrind [CTEST ARGS...]
#       Step 4 only. Builds without sanitizers (Debug, -O0) into build-vg/ and runs the suite
#       under valgrind's memcheck: every test program, and every harvest process the CLI tests
#       start (valgrind follows exec into the built binaries; system programs such as sh,
#       timeout or cp run natively). Any memory error, or a definite leak, fails: the process
#       exits 99, and its report is kept in build-vg/valgrind/PID.log and printed. Left out,
#       with the reasons below: walk_big_cli_test, collect_fd_stress_test, history_cli_test,
#       history_cli_test_pg and changes_diff_test; and the harvest children of run_cli_test and mime_cli_test run natively (HV_VG_EXCLUDE,
#       HV_VG_NO_TRACE).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
hv_install_deps

usage() {
	echo "usage: scripts/test.sh [--quick [CTEST ARGS...] | --valgrind [CTEST ARGS...] | --adapters | --page]" >&2
	exit 2
}
mode=all
case ${1:-} in
--quick)
	mode=quick
	shift
	;;
--valgrind)
	mode=valgrind
	shift
	;;
--adapters)
	mode=adapters
	shift
	[ $# -eq 0 ] || usage
	;;
--page)
	mode=page
	shift
	[ $# -eq 0 ] || usage
	;;
esac
# CTEST ARGS select tests; the full run checks everything.
[ $mode != all ] || [ $# -eq 0 ] || usage

# Every harvest the checks start without --db finds its default database under a data
# directory of the checks' own, never the user's history (a stale or newer file there would
# change what they see).
XDG_DATA_HOME=${HARVEST_TEST_BUILD:-build-test}/data-home
case $XDG_DATA_HOME in
/*) ;;
*) XDG_DATA_HOME=$PWD/$XDG_DATA_HOME ;;
esac
rm -rf "$XDG_DATA_HOME"
mkdir -p "$XDG_DATA_HOME"
export XDG_DATA_HOME

# The tests the valgrind step leaves out (see run_valgrind).
HV_VG_EXCLUDE=${HV_VG_EXCLUDE:-^(walk_big_cli_test|collect_fd_stress_test|history_cli_test|history_cli_test_pg|changes_diff_test)$}

# ---- step 1: the suite under ASan + UBSan ----
run_suite() {
	local build=${HARVEST_TEST_BUILD:-build-test}
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_SANITIZE=ON -DHARVEST_WERROR=ON \
		-DHARVEST_TESTS=ON >/dev/null
	cmake --build "$build" -j "$(nproc)"
	local rc=0
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
		UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		bash -c 'cd "$1" && shift && ctest --output-on-failure -j "$(nproc)" "$@"' ctest \
		"$build" "$@" || rc=$?
	# A case that could not run here (most need root: they become the user nobody) is
	# skipped, not passed: say which.
	grep -h '^\[  SKIPPED \] [a-z_]' "$build/Testing/Temporary/LastTest.log" 2>/dev/null |
		sed 's/^\[  SKIPPED \] //' | sort -u | tr '\n' ' ' >"$skip_list" || true
	return $rc
}

# ---- step 4: the suite under valgrind memcheck ----
run_valgrind() {
	# Left out, and why:
	# - walk_big_cli_test: it walks trees of 100,000 entries and 100,000 levels (and 20,000 deep
	#   through the CLI) many times over: 50-75 s under ASan, so (not measured) 25-60 min at
	#   memcheck's 20-50x slowdown, longer than the rest of the suite together.
	#   The walker code it runs is the walk.c that walk_test, walk_stress_test and walk_cli_test
	#   exercise under memcheck here, on smaller trees.
	# - collect_fd_stress_test: it runs harvest under descriptor limits of 4 to 64, and valgrind
	#   takes descriptors of its own from the same limit (its log file, the client's executable,
	#   its reserved ones), so under memcheck the limits would measure valgrind, not harvest; it
	#   also starts about 70 harvest processes, each paying valgrind's start and libmagic's load.
	#   The collect code it exercises is checked under memcheck by collect_test,
	#   collect_window_test and collect_cli_test.
	# - history_cli_test_pg: history_cli_test's scenarios again, against PostgreSQL: under
	#   memcheck each is a quarter of an hour (every scenario starts harvest processes, each
	#   paying valgrind's start). The PostgreSQL history code is checked under memcheck by
	#   history_pg_cli_test and pg_pieces_test.
	# - history_cli_test: the same scenarios on SQLite took 900-940 s under memcheck, a fifth of
	#   the step's test time on its own. The SQLite history code runs under memcheck through
	#   store_test and the CLI tests that read the history (run, archive, page, terminal,
	#   lazyload, snapshot_size).
	# - changes_diff_test: several hundred random workloads, each run three ways; 430 s under
	#   memcheck. The change tracker runs under memcheck through changes_test, execute_test,
	#   changes_rename_test and collect_cli_test.
	# (All five run natively after, in the same build, for the coverage step: see coverage; and
	# under ASan + UBSan in step 1.)
	# Test programs whose harvest children run natively (the test program itself is still under
	# memcheck), and why:
	# - run_cli_test: its timing cases give harvest a fixed time to start the command (a 2 s
	#   --timeout within which the shell must print a pid; a first chunk seen while a 3 s sleep
	#   goes on); under memcheck harvest needs 1.0-1.5 s (valgrind's start and libmagic's load)
	#   before it even runs the command, so the tests would measure valgrind.
	#   `harvest run` is still checked through history_cli_test and collect_cli_test, which run it
	#   too, and run.c/execute.c through run_test and execute_test.
	# - mime_cli_test: test_cache_used relies on harvest caching a file written just before it
	#   starts within 2 s (younger files are not cached); under memcheck, on a loaded machine,
	#   harvest takes longer than that. The MIME code is still checked through mime_test, and the
	#   cache through collect_cli_test.
	# - collect_mem_cli_test: it bounds harvest's peak memory, which under memcheck is
	#   valgrind's own (so there it only bounds the growth over a tiny collect), and it is
	#   RUN_SERIAL: its 300 s under memcheck ended the step with one core idle. The spooled
	#   contents it reads and writes are checked under memcheck through collect_test,
	#   spool_records_test and page_cli_test.
	HV_VG_NO_TRACE=${HV_VG_NO_TRACE:-run_cli_test mime_cli_test collect_mem_cli_test}
	build=${HARVEST_VG_BUILD:-build-vg}
	root=$PWD
	logs=$root/$build/valgrind
	tmp=${TMPDIR:-/tmp}
	# The wrapper CMake's CROSSCOMPILING_EMULATOR puts in front of every test's command (add_test
	# does so natively before CMake 3.28, and under policy CMP0158 OLD after).
	# - Each process logs to its own file, and its summary says how many errors it had.
	# - Children are traced through exec, so the harvest processes the CLI tests start are checked;
	#   programs under /usr, /bin, /sbin, the scripts the tests write into their temporary
	#   directories ($TMPDIR/harvest-test.*, tests/common/testutil.c), and those run by a relative
	#   path (sh, timeout, cp) are skipped: they run natively. (Not all of $TMPDIR: a checkout
	#   there would skip its own harvest. A program elsewhere, such as a python3 found first in
	#   ~/.pyenv, is checked too; only slower.) The last line counts the processes checked.
	# - --child-silent-after-fork: a forked child logs nothing until it execs (then the new program
	#   logs to its own file). Without it the child, still root, would create PID.log, and the
	#   harvest it execs as nobody, same PID, could not open it. A forked child that never execs
	#   and has an error still exits 99, which its test sees; rerun that test with
	#   HV_VG_ARGS=--child-silent-after-fork=no to read the report.
	# - --vgdb=no: no gdbserver FIFOs in /tmp, which a process that became nobody cannot remove.
	# - tests/valgrind.supp: what is reported but is not harvest's (each entry says why).
	# - HV_VG_ARGS adds options (e.g. --track-origins=yes to find where an uninitialised value
	#   came from; it doubles the time).
	mkdir -p "$build"
	wrapper=$root/$build/valgrind-test.sh
	cat >"$wrapper" <<-WRAPPER
	#!/bin/sh
	# Made by scripts/test.sh --valgrind: runs one test program (\$1) under memcheck.
	trace=yes
	for t in $HV_VG_NO_TRACE; do
		[ "\${1##*/}" = "\$t" ] && trace=no
	done
	exec valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite \\
		--show-leak-kinds=definite --error-exitcode=99 --num-callers=30 --vgdb=no \\
		--child-silent-after-fork=yes --trace-children=\$trace \\
		'--trace-children-skip=/usr/*,/bin/*,/sbin/*,${tmp%/}/harvest-test.*,./*' \\
		'--log-file=$logs/%p.log' '--suppressions=$root/tests/valgrind.supp' \\
		${HV_VG_ARGS:-} "\$@"
	WRAPPER
	chmod +x "$wrapper"
	# The coverage build's flags (scripts/coverage.sh): the coverage step reports this run's
	# counters, so that the suite is not run a third time for them (the counters cost memcheck
	# about nothing: collect_test took 56 s with them and 59 s without).
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_SANITIZE=OFF -DHARVEST_COVERAGE=ON \
		-DHARVEST_WERROR=ON -DHARVEST_TESTS=ON -DCMAKE_C_FLAGS=-fprofile-update=atomic \
		"-DCMAKE_CROSSCOMPILING_EMULATOR=$wrapper" >/dev/null
	cmake --build "$build" -j "$(nproc)"
	COVERAGE_BUILD=$build scripts/coverage.sh --reset
	# Memcheck is 20-50x slower: every test gets 4 times the timeout CMakeLists.txt gives it
	# (history_cli_test, the longest, takes 7-13 minutes against its 15).
	perl -pi -e 's/TIMEOUT "(\d+)"/sprintf("TIMEOUT \"%d\"", $1 * 4)/ge' "$build/CTestTestfile.cmake"
	rm -rf "$logs"
	mkdir -p "$logs"
	chmod 1777 "$logs" # the tests run harvest as nobody too
	echo "test: under valgrind memcheck; left out: $HV_VG_EXCLUDE; harvest children not traced" \
		"in: $HV_VG_NO_TRACE (see scripts/test.sh)" >&2
	start=$(date +%s)
	tests_rc=0
	(cd "$build" && ctest --output-on-failure -j "$(nproc)" -E "$HV_VG_EXCLUDE" "$@") || tests_rc=$?
	# Errors of processes whose exit status no test looks at count too. (A process killed by a
	# signal, as some tests do on purpose, writes no summary.)
	found=0
	n=0
	cli=0
	for f in "$logs"/*.log; do
		[ -e "$f" ] || continue
		n=$((n + 1))
		grep -q -E "^==[0-9]+== Command: $root/$build/harvest( |\$)" "$f" && cli=$((cli + 1))
		grep -q -E '^==[0-9]+== ERROR SUMMARY: [1-9]' "$f" || continue
		found=$((found + 1))
		echo "==== valgrind: $f" >&2
		cat "$f" >&2
	done
	echo "test: valgrind: $n processes checked ($cli of them harvest), $found with errors;" \
		"$(($(date +%s) - start)) s" >&2
	[ $tests_rc -eq 0 ] || echo "test: ctest failed under valgrind" >&2
	# The whole suite starts hundreds of harvest processes: none checked means the tracing
	# missed them (a skip pattern matching the build directory), not that they were clean.
	local cli_ok=0
	if [ $# -eq 0 ] && [ $cli -eq 0 ]; then
		echo "test: valgrind checked no harvest process: the tracing is broken" >&2
		cli_ok=1
	fi
	[ $tests_rc -eq 0 ] && [ $found -eq 0 ] && [ $cli_ok -eq 0 ]
}

# ---- step 5: coverage, of the valgrind step's run ----
# The counters the suite left under memcheck in its build (build-vg/, a coverage build), with
# those of the tests left out there, run now natively in the same build; then the report
# (scripts/coverage.sh; fails below HARVEST_COVERAGE_MIN, default 85% of src/'s lines).
run_coverage() {
	COVERAGE_BUILD=${HARVEST_VG_BUILD:-build-vg} COVERAGE_CONTINUE=1 \
		COVERAGE_MIN="${HARVEST_COVERAGE_MIN:-85}" scripts/coverage.sh -R "$HV_VG_EXCLUDE"
}

# ---- step 6: the Strands sandbox adapters ----
run_adapters() {
	local build=${HARVEST_ADAPTERS_BUILD:-build-adapters}
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		echo "test: the adapters need node and npm on PATH" >&2
		return 1
	fi
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHARVEST_TESTS=OFF >/dev/null
	cmake --build "$build" -j "$(nproc)"
	local bin=$PWD/$build/harvest rc=0
	HARVEST_BIN=$bin adapters/strands-ts/test/run.sh --install || rc=1
	# Debian's python3 and pytest (python3-pytest), whatever python3 comes first on PATH.
	(cd adapters/strands-py && HARVEST_BIN=$bin /usr/bin/python3 -m pytest -q -p no:cacheprovider) ||
		rc=1
	return $rc
}

# ---- step 7: the HTML page in a real browser ----
run_page() {
	# The harvest build of step 6 (the same configuration: built once when both run).
	local build=${HARVEST_PAGE_BUILD:-build-adapters} out=$PWD/build-page
	local p
	for p in node npm /usr/bin/chromium /usr/bin/python3; do
		command -v "$p" >/dev/null || {
			echo "test: the page test needs $p (scripts/deps.sh installs it)" >&2
			return 1
		}
	done
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHARVEST_TESTS=OFF >/dev/null
	cmake --build "$build" -j "$(nproc)"
	(cd tests/page && npm ci --no-audit --no-fund --loglevel=error)
	rm -rf "$out"
	mkdir -p "$out"
	node tests/page/page_test.mjs "$PWD/$build/harvest" "$out"
}

# ---- the PostgreSQL server of the history tests ----
# One real PostgreSQL 15 for every step that runs the suite (suite, valgrind, coverage):
# scripts/pg_fixture.sh initdb's it into a temporary directory as the user nobody, listening
# only on a unix socket there; it is stopped (and its directory removed) when this script
# exits, or by the fixture's watchdog if this script is killed. The tests find it through
# HARVEST_TEST_PG_DIR (tests/common/tu_pg.c; each database they make is dropped when their
# program ends); the case that stops a server mid-run starts a private one of its own. When
# it cannot start, the history tests fail (they try to start one themselves, and say why).
pg_start() {
	local out
	if out=$(scripts/pg_fixture.sh start $$); then
		HARVEST_TEST_PG_DIR=${out%%$'\n'*}
		export HARVEST_TEST_PG_DIR
		trap 'scripts/pg_fixture.sh stop "$HARVEST_TEST_PG_DIR"' EXIT
		echo "test: PostgreSQL 15 for the history tests in $HARVEST_TEST_PG_DIR" >&2
	else
		echo "test: PostgreSQL did not start: the history tests will fail" >&2
	fi
}
case $mode in
quick | valgrind | all) pg_start ;;
esac

# ---- steps, and the summary ----
results=()
failed_logs=()
skip_list=${HARVEST_TEST_BUILD:-build-test}/skipped-cases
rm -f "$skip_list"
overall=0
step() {
	local name=$1
	shift
	local t0 rc=0
	t0=$(date +%s)
	echo "test: ==== $name" >&2
	# Each step's output is also kept, so that the summary can end with the report of a step
	# that failed (CI shows the end of the output).
	local log=${HARVEST_TEST_BUILD:-build-test}/step-$name.log
	mkdir -p "$(dirname "$log")"
	: >"$log"
	# In the background, so that set -e holds inside the step (it is off in a function called
	# as the left side of ||).
	"$@" > >(tee -a "$log") 2> >(tee -a "$log" >&2) &
	wait $! || rc=$?
	local secs=$(($(date +%s) - t0))
	if [ $rc -eq 0 ]; then
		results+=("$(printf '%-9s passed  %5d s' "$name" "$secs")")
		if [ "$name" = suite ] && [ -s "$skip_list" ]; then
			results+=("$(printf '%-9s but these cases were SKIPPED, not run (most need root): %s' \
				"" "$(cat "$skip_list")")")
		fi
	else
		results+=("$(printf '%-9s FAILED  %5d s  (exit %d)' "$name" "$secs" "$rc")")
		failed_logs+=("$log")
		overall=1
	fi
}

case $mode in
quick)
	step suite run_suite "$@"
	[ "${HARVEST_LINT:-1}" = 0 ] || step lint scripts/lint.sh
	[ "${HARVEST_ADAPTERS:-1}" = 0 ] || [ $# -gt 0 ] || step adapters run_adapters
	[ "${HARVEST_PAGE:-1}" = 0 ] || [ $# -gt 0 ] || step page run_page
	;;
valgrind)
	step valgrind run_valgrind "$@"
	;;
adapters)
	step adapters run_adapters
	;;
page)
	step page run_page
	;;
all)
	step suite run_suite
	step lint scripts/lint.sh
	step fuzz scripts/fuzz.sh "${HARVEST_FUZZ_SECONDS:-12}"
	step valgrind run_valgrind
	step coverage run_coverage
	step adapters run_adapters
	step page run_page
	;;
esac
echo "test: ==== summary" >&2
for r in "${results[@]}"; do
	echo "test: $r" >&2
done
for log in "${failed_logs[@]}"; do
	echo "test: ==== the end of $log" >&2
	grep -v '^ok \|^ *ok [0-9]' "$log" | tail -n 60 >&2
done
exit $overall

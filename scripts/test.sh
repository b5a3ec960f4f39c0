#!/usr/bin/env bash
# The test suite.
#
#   scripts/test.sh [CTEST ARGS...]
#       Builds harvest with AddressSanitizer + UndefinedBehaviorSanitizer and warnings as
#       errors into build-test/, runs the whole suite through ctest, then the static analysis
#       (scripts/lint.sh: clang-tidy and cppcheck). Fails if either fails. HARVEST_LINT=0 skips
#       the lint step (e.g. while iterating on one test with -R).
#
#   scripts/test.sh --valgrind [CTEST ARGS...]
#       Builds without sanitizers (Debug, -O0) into build-vg/ and runs the suite under
#       valgrind's memcheck: every test program, and every harvest process the CLI tests start
#       (valgrind follows exec into the built binaries; system programs such as sh, timeout or
#       cp run natively). Any memory error, or a definite leak, fails: the process exits 99,
#       and its report is kept in build-vg/valgrind/PID.log and printed. Left out, with the
#       reasons below: walk_big_cli_test; and the harvest children of run_cli_test and
#       mime_cli_test run natively (HV_VG_EXCLUDE, HV_VG_NO_TRACE).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
hv_install_deps

mode=test
if [ "${1:-}" = --valgrind ]; then
	mode=valgrind
	shift
fi

if [ $mode = test ]; then
	build=${HARVEST_TEST_BUILD:-build-test}
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_SANITIZE=ON -DHARVEST_WERROR=ON \
		-DHARVEST_TESTS=ON >/dev/null
	cmake --build "$build" -j "$(nproc)"
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
	tests_rc=0
	(cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@") || tests_rc=$?
	lint_rc=0
	if [ "${HARVEST_LINT:-1}" != 0 ]; then
		scripts/lint.sh || lint_rc=$?
	fi
	[ $tests_rc -eq 0 ] || echo "test: ctest failed" >&2
	[ $lint_rc -eq 0 ] || echo "test: lint failed" >&2
	[ $tests_rc -eq 0 ] && [ $lint_rc -eq 0 ]
	exit
fi

# ---- --valgrind ----
# Left out, and why:
# - walk_big_cli_test: it walks trees of 100,000 entries and 100,000 levels (and 20,000 deep
#   through the CLI) many times over: 50-75 s under ASan, so (not measured) 25-60 min at
#   memcheck's 20-50x slowdown, longer than the rest of the suite together.
#   The walker code it runs is the walk.c that walk_test, walk_stress_test and walk_cli_test
#   exercise under memcheck here, on smaller trees.
HV_VG_EXCLUDE=${HV_VG_EXCLUDE:-^walk_big_cli_test$}
# Test programs whose harvest children run natively (the test program itself is still under
# memcheck), and why:
# - run_cli_test: test_chunk_while_running asserts that the first output chunk arrives less
#   than 1.5 s after harvest starts; under memcheck harvest needs 1.0-1.5 s (valgrind's start
#   and libmagic's load) before it even runs the command, so the test would measure valgrind.
#   `harvest run` is still checked through history_cli_test and collect_cli_test, which run it
#   too, and run.c/execute.c through run_test and execute_test.
# - mime_cli_test: test_cache_used relies on harvest caching a file written just before it
#   starts within 2 s (younger files are not cached); under memcheck, on a loaded machine,
#   harvest takes longer than that. The MIME code is still checked through mime_test, and the
#   cache through collect_cli_test.
HV_VG_NO_TRACE=${HV_VG_NO_TRACE:-run_cli_test mime_cli_test}
build=${HARVEST_VG_BUILD:-build-vg}
root=$PWD
logs=$root/$build/valgrind
tmp=${TMPDIR:-/tmp}
# The wrapper CMake's CROSSCOMPILING_EMULATOR puts in front of every test's command (add_test
# does so natively before CMake 3.28, and under policy CMP0158 OLD after).
# - Each process logs to its own file, and its summary says how many errors it had.
# - Children are traced through exec, so the harvest processes the CLI tests start are checked;
#   programs under /usr, /bin, /sbin and the temporary directories, and those run by a relative
#   path (sh, timeout, cp, test scripts) are skipped: they run natively. (A program elsewhere,
#   such as a python3 found first in ~/.pyenv, is checked too; only slower.)
# - --child-silent-after-fork: a forked child logs nothing until it execs (then the new program
#   logs to its own file). Without it the child, still root, would create PID.log, and the
#   harvest it execs as nobody, same PID, could not open it. A forked child that never execs
#   and has an error still exits 99, which its test sees; rerun that test with
#   HV_VG_ARGS=--child-silent-after-fork=no to read the report.
# - --vgdb=no: no gdbserver FIFOs in /tmp, which a process that became nobody cannot remove.
# - HV_VG_ARGS adds options (e.g. --track-origins=yes to find where an uninitialised value
#   came from; it doubles the time).
mkdir -p "$build"
wrapper=$root/$build/valgrind-test.sh
cat >"$wrapper" <<WRAPPER
#!/bin/sh
# Made by scripts/test.sh --valgrind: runs one test program (\$1) under memcheck.
trace=yes
for t in $HV_VG_NO_TRACE; do
	[ "\${1##*/}" = "\$t" ] && trace=no
done
exec valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite \\
	--show-leak-kinds=definite --error-exitcode=99 --num-callers=30 --vgdb=no \\
	--child-silent-after-fork=yes --trace-children=\$trace \\
	'--trace-children-skip=/usr/*,/bin/*,/sbin/*,/tmp/*,${tmp%/}/*,./*' \\
	'--log-file=$logs/%p.log' ${HV_VG_ARGS:-} "\$@"
WRAPPER
chmod +x "$wrapper"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_SANITIZE=OFF -DHARVEST_COVERAGE=OFF \
	-DHARVEST_WERROR=ON -DHARVEST_TESTS=ON "-DCMAKE_CROSSCOMPILING_EMULATOR=$wrapper" >/dev/null
cmake --build "$build" -j "$(nproc)"
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
for f in "$logs"/*.log; do
	[ -e "$f" ] || continue
	n=$((n + 1))
	grep -q -E '^==[0-9]+== ERROR SUMMARY: [1-9]' "$f" || continue
	found=$((found + 1))
	echo "==== valgrind: $f" >&2
	cat "$f" >&2
done
echo "test: valgrind: $n processes checked, $found with errors; $(($(date +%s) - start)) s" >&2
[ $tests_rc -eq 0 ] || echo "test: ctest failed under valgrind" >&2
[ $tests_rc -eq 0 ] && [ $found -eq 0 ]

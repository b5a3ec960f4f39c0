#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (ASan + UBSan, Debian's clang) into build-fuzz/
# and runs each for SECONDS (default 60) on a scratch copy of its seed corpus.
#
#   scripts/fuzz.sh [SECONDS]
#
# Environment:
#   FUZZ_TARGETS  the targets to run, space-separated (default: every tests/fuzz/fuzz_*.c)
#   FUZZ_BUILD    the build directory (default: build-fuzz)
#   FUZZ_ARGS     more libFuzzer options, for every target (e.g. "-jobs=2 -workers=2")
#
# Each target first replays its regression inputs (tests/fuzz/regressions/<target>/), then
# fuzzes. A crash, a sanitizer report, a leak or a timeout is a finding: its report is printed,
# the input is kept under build-fuzz/artifacts/<target>/, and the script exits 1. The repository's
# seeds are never written: libFuzzer grows build-fuzz/corpus/<target>/ instead, which later runs
# reuse. On success the last line is "fuzz: N targets, all clean".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-60}
case $seconds in
'' | *[!0-9]*)
	echo "usage: scripts/fuzz.sh [SECONDS]" >&2
	exit 2
	;;
esac

# shellcheck source=scripts/deps.sh
. scripts/deps.sh
HV_PACKAGES="$HV_PACKAGES clang libclang-rt-14-dev"
hv_install_deps

cc=
for c in clang clang-14; do
	if command -v "$c" >/dev/null 2>&1; then
		cc=$c
		break
	fi
done
[ -n "$cc" ] || {
	echo "fuzz: clang not found" >&2
	exit 1
}

build=${FUZZ_BUILD:-build-fuzz}
case $build in
/*) ;;
*) build=$root/$build ;;
esac
mkdir -p "$build/obj" "$build/bin" "$build/corpus" "$build/artifacts" "$build/logs"

# -max_len per target: what its inputs need to reach every branch, and no more (libFuzzer's
# mutations are cheaper on short inputs).
max_len() {
	case $1 in
	json) echo 12288 ;;  # past the writer's 4096-byte string chunks and escape's 512
	chunk) echo 4096 ;;
	parse) echo 96 ;;
	regex) echo 512 ;;  # an expression of at most 96 bytes and a few lines to match
	produced) echo 64 ;;  # a header and at most 12 two-byte operations
	store) echo 32768 ;;  # the seed databases have 512-byte pages
	*) echo 4096 ;;
	esac
}

# The per-input time limit: a store open may wait on a lock no one holds for its busy timeout,
# which would be a finding (a hang), so stay above it only slightly.
timeout_for() {
	case $1 in
	store) echo 15 ;;
	*) echo 10 ;;
	esac
}

# shellcheck disable=SC2054 # the commas are clang's, inside one option
cflags=(-std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
	-fno-sanitize-recover=all -Iinclude -Isrc/lib -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64
	-DHARVEST_VERSION='"fuzz"' -Wall -Wno-unused-parameter -I"$(pg_config --includedir)")
# libpq, libarchive, libmagic and libseccomp are not linked: libharvest opens them with dlopen
# when first used.
libs=(-lsqlite3 -lcrypto -lpthread)

# The library once, instrumented for coverage (fuzzer-no-link) and the sanitizers.
objs=()
for src in src/lib/*.c; do
	obj=$build/obj/$(basename "${src%.c}").o
	if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src/lib include -newer "$obj" \
		-name '*.h' -print -quit)" ]; then
		"$cc" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
	fi
	objs+=("$obj")
done

if [ -n "${FUZZ_TARGETS:-}" ]; then
	read -r -a targets <<<"$FUZZ_TARGETS"
else
	targets=()
	for f in tests/fuzz/fuzz_*.c; do
		t=$(basename "$f" .c)
		targets+=("${t#fuzz_}")
	done
fi

for t in "${targets[@]}"; do
	[ -f "tests/fuzz/fuzz_$t.c" ] || {
		echo "fuzz: no target '$t' (tests/fuzz/fuzz_$t.c)" >&2
		exit 2
	}
	"$cc" "${cflags[@]}" -fsanitize=fuzzer "tests/fuzz/fuzz_$t.c" "${objs[@]}" "${libs[@]}" \
		-o "$build/bin/fuzz_$t"
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# The report of a finding in log $1: the check or sanitizer message, the top of its stack, and
# where the input was written.
report() {
	awk 'done { if (/Test unit written/) print; next }
		/check failed|runtime error|^==[0-9]+==ERROR|^Running: / {print; n=14; next}
		/^SUMMARY/ {print; done=1; next}
		/^NOTE: libFuzzer|Combine libFuzzer with/ {next}
		/^ *#[0-9]+ / && /libFuzzer|fuzzer::|__sanitizer|__ubsan|__asan|libc|_start|raise|abort/ {next}
		n > 0 {print; n--}' "$1" | head -n 40 >&2
}

# The targets' scratch trees and databases (fuzz_produced, fuzz_store), gone after the run even
# when a target crashed.
scratch=$(mktemp -d /dev/shm/harvest-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export HV_FUZZ_TMPDIR=$scratch

failed=()
for t in "${targets[@]}"; do
	bin=$build/bin/fuzz_$t
	corpus=$build/corpus/$t
	artifacts=$build/artifacts/$t
	log=$build/logs/$t.log
	mkdir -p "$corpus" "$artifacts"
	if [ -d "tests/fuzz/seeds/$t" ]; then
		cp -n tests/fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
	fi
	common=(-max_len="$(max_len "$t")" -timeout="$(timeout_for "$t")" -rss_limit_mb=2048
		-artifact_prefix="$artifacts/")

	# The regressions, one at a time so that every failing one is reported: each input that
	# once found a bug must pass.
	reg_failed=0
	if [ -d "tests/fuzz/regressions/$t" ]; then
		for f in tests/fuzz/regressions/"$t"/*; do
			[ -f "$f" ] || continue
			rlog=$build/logs/$t.regression-$(basename "$f").log
			if ! "$bin" "${common[@]}" "$f" >"$rlog" 2>&1; then
				echo "fuzz: $t: FINDING: regression $f fails (log: $rlog)" >&2
				report "$rlog"
				reg_failed=1
			fi
		done
	fi
	if [ "$reg_failed" = 1 ]; then
		failed+=("$t")
		continue
	fi

	# shellcheck disable=SC2086 # FUZZ_ARGS is a list of options
	if "$bin" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 \
		${FUZZ_ARGS:-} "$corpus" >"$log" 2>&1; then
		execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
		rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
		units=$(find "$corpus" -type f | wc -l)
		printf 'fuzz: %-8s %10s execs in %ss, %6s exec/s, corpus %s\n' "$t" "${execs:-?}" \
			"$seconds" "${rate:-?}" "$units"
	else
		echo "fuzz: $t: FINDING (log: $log)" >&2
		report "$log"
		crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
		[ -n "$crash" ] && echo "fuzz: $t: reproduce with: $bin $crash" >&2
		failed+=("$t")
	fi
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#targets[@]} targets, findings in: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, all clean"

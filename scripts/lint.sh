#!/usr/bin/env bash
# Static analysis: clang-tidy (the checks of .clang-tidy, all errors) on every source file of
# src/ and the headers of src/ and include/ they include, and cppcheck on src/ and include/.
# Both must be clean; the script exits 1 on any finding and prints it. scripts/test.sh runs it
# after the tests.
#
#   scripts/lint.sh [FILE.c...]     (default: every src/**/*.c)
#
# Environment:
#   LINT_BUILD  the CMake build whose compile_commands.json clang-tidy reads (default:
#               build-lint; configured here, never built)
#   LINT_JOBS   parallel clang-tidy processes (default: nproc)
#
# A false positive is suppressed where it occurs, with its reason:
#   /* why it cannot happen
#    * NOLINTNEXTLINE(check-name) */          (clang-tidy)
#   /* cppcheck-suppress id ; why */          (cppcheck, on the line before)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
hv_install_deps

tidy=
for t in clang-tidy clang-tidy-14; do
	if command -v "$t" >/dev/null 2>&1; then
		tidy=$t
		break
	fi
done
[ -n "$tidy" ] || {
	echo "lint: clang-tidy not found" >&2
	exit 1
}
build=${LINT_BUILD:-build-lint}
jobs=${LINT_JOBS:-$(nproc)}
start=$(date +%s)

# The compile commands of a plain build: the flags and defines clang-tidy must parse with.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_TESTS=OFF \
	-DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null

if [ $# -gt 0 ]; then
	files=("$@")
else
	mapfile -t files < <(find src -name '*.c' | LC_ALL=C sort)
fi
status=0

# clang-tidy, one process per file; each file's report goes to its own log, printed only when
# it has a finding (clang-tidy exits non-zero on an error, and every check is one).
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
printf '%s\n' "${files[@]}" |
	xargs -P "$jobs" -I{} sh -c \
		'"$1" -p "$2" --quiet "$3" >"$4/$(echo "$3" | tr / _).log" 2>&1 ||
			echo "$3" >>"$4/failed"' \
		sh "$tidy" "$build" {} "$logs"
if [ -s "$logs/failed" ]; then
	while read -r f; do
		# Keep the findings and their notes, not the "N warnings generated" chatter.
		grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Error while processing' \
			"$logs/$(echo "$f" | tr / _).log" || true
	done < <(LC_ALL=C sort "$logs/failed")
	echo "lint: clang-tidy: findings in $(wc -l <"$logs/failed") file(s)" >&2
	status=1
else
	echo "lint: clang-tidy: ${#files[@]} files clean" >&2
fi

# cppcheck: the project's include paths and defines (cppcheck checks this one configuration);
# headers are checked as part of each source file and on their own.
if ! cppcheck --enable=warning,performance,portability --error-exitcode=1 --inline-suppr \
	--quiet --std=c11 --language=c --library=posix -j "$jobs" \
	-I include -I src/lib -I src/cli \
	-D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DHARVEST_VERSION='"0.0.0"' \
	src include/harvest.h include/harvest/*.h; then
	echo "lint: cppcheck: findings (above)" >&2
	status=1
else
	echo "lint: cppcheck: clean" >&2
fi

echo "lint: $([ $status -eq 0 ] && echo clean || echo FAILED) in $(($(date +%s) - start)) s" >&2
exit $status

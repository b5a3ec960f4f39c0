#!/usr/bin/env bash
# Benchmarks harvest against its peers on a corpus it generates itself, and prints ratios.
#
#   scripts/bench.sh                  every section
#   scripts/bench.sh --only walk      one section (a comma-separated list works too)
#   scripts/bench.sh --list           the sections
#   options: --rounds N (default 5)   --entries N (walk corpus size, default 200000)
#            --bin PATH (a harvest binary to use instead of building build-bench/harvest)
#            --keep (leave the temp directory for inspection)
#
# Method: one warm-up run of every command (so the corpus is in the page cache), then N rounds
# in which every command runs once, in the same order — interleaved, so load drift hits all
# tools alike — and the median of the N times is reported. Every command writes its output to
# a file on a tmpfs (/dev/shm when it is writable, else the temp directory, said in the
# header): no tool sees /dev/null (which a tool could special-case) and no reader process
# competes for the CPU, as `| cat >/dev/null` would on a 2-core machine. Peak memory comes
# from separate runs under `/usr/bin/time -f %M`, so that wrapper costs nothing in the timings.
#
# Adding a section: write bench_<name>() (use hv_time_rounds, hv_median, hv_row, hv_target),
# and add <name> to HV_SECTIONS. Sections share $HV_TMP, $HV_OUT, $HARVEST and $HV_ROUNDS.
set -euo pipefail
cd "$(dirname "$0")/.."

HV_SECTIONS=(walk)
HV_ROUNDS=5
HV_WALK_ENTRIES=200000
HARVEST=
HV_KEEP=0
HV_ONLY=

die() { echo "bench: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	--only) HV_ONLY=${2:?--only needs a section}; shift 2 ;;
	--only=*) HV_ONLY=${1#--only=}; shift ;;
	--rounds) HV_ROUNDS=${2:?}; shift 2 ;;
	--entries) HV_WALK_ENTRIES=${2:?}; shift 2 ;;
	--bin) HARVEST=${2:?}; shift 2 ;;
	--keep) HV_KEEP=1; shift ;;
	--list) printf '%s\n' "${HV_SECTIONS[@]}"; exit 0 ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1 (see --help)" ;;
	esac
done
[[ $HV_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive number"
[[ $HV_WALK_ENTRIES =~ ^[1-9][0-9]*$ ]] || die "--entries: a positive number"

# ---- common helpers ----

hv_build() {
	if [ -n "$HARVEST" ]; then
		[ -x "$HARVEST" ] || die "$HARVEST is not executable"
		return
	fi
	if [ ! -f build-bench/CMakeCache.txt ]; then
		cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHARVEST_TESTS=OFF >/dev/null
	fi
	cmake --build build-bench -j "$(nproc)" >/dev/null
	HARVEST=$PWD/build-bench/harvest
}

hv_setup_tmp() {
	HV_TMP=$(mktemp -d "${TMPDIR:-/tmp}/harvest-bench.XXXXXX")
	if [ "$HV_KEEP" = 1 ]; then
		trap 'rm -rf "${HV_OUTDIR:-}"; echo "bench: kept $HV_TMP" >&2' EXIT
	else
		trap 'chmod -R u+rwx "$HV_TMP" 2>/dev/null; rm -rf "$HV_TMP" "${HV_OUTDIR:-}"' EXIT
	fi
	trap 'exit 130' INT TERM
	# Output goes to a tmpfs file when one is available.
	HV_OUTDIR=
	if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm)" = tmpfs ]; then
		HV_OUTDIR=$(mktemp -d /dev/shm/harvest-bench-out.XXXXXX)
		HV_OUT_WHERE="a file on tmpfs (/dev/shm)"
	else
		HV_OUTDIR=$HV_TMP/out
		mkdir -p "$HV_OUTDIR"
		HV_OUT_WHERE="a file in $HV_TMP ($(stat -f -c %T "$HV_TMP"))"
	fi
	HV_OUT=$HV_OUTDIR/stdout
}

# "WALL CPU": the seconds "$@" takes (wall clock, to the microsecond) and the CPU seconds it
# uses (user + system, all threads, to the millisecond), its stdout written to $HV_OUT. CPU
# time is the figure that other load on the machine disturbs least. Fails loudly when the
# command fails: a benchmark of a broken run is worthless.
hv_time() {
	local t0 t1 rc=0 TIMEFORMAT='%3U %3S'
	t0=$EPOCHREALTIME
	{ time "$@" >"$HV_OUT" 2>"$HV_OUTDIR/stderr"; } 2>"$HV_OUTDIR/cpu" || rc=$?
	t1=$EPOCHREALTIME
	if [ $rc -ne 0 ]; then
		echo "bench: '$*' failed with status $rc:" >&2
		head -5 "$HV_OUTDIR/stderr" >&2
		exit 1
	fi
	awk -v a="$t0" -v b="$t1" '{ printf "%.6f %.3f\n", b - a, $1 + $2 }' "$HV_OUTDIR/cpu"
}

# The median of the numbers given as arguments.
hv_median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# hv_time_rounds NAME... : runs the commands held in the arrays HV_CMD_<NAME> (one warm-up,
# then $HV_ROUNDS interleaved rounds) and sets HV_MEDIAN[<NAME>] (wall seconds) and
# HV_CPU[<NAME>] (CPU seconds), medians of the rounds.
declare -A HV_MEDIAN HV_CPU
hv_time_rounds() {
	local name round
	declare -A times cpus
	local ref t
	local -a cmd
	for name in "$@"; do
		ref="HV_CMD_${name}[@]"
		cmd=("${!ref}")
		hv_time "${cmd[@]}" >/dev/null # warm-up: page cache, dentries, binaries
	done
	for ((round = 1; round <= HV_ROUNDS; round++)); do
		for name in "$@"; do
			ref="HV_CMD_${name}[@]"
			cmd=("${!ref}")
			t=$(hv_time "${cmd[@]}")
			times[$name]+=" ${t% *}"
			cpus[$name]+=" ${t#* }"
		done
	done
	for name in "$@"; do
		# shellcheck disable=SC2086
		HV_MEDIAN[$name]=$(hv_median ${times[$name]})
		# shellcheck disable=SC2086
		HV_CPU[$name]=$(hv_median ${cpus[$name]})
	done
}

# Peak resident memory of "$@" in KiB (its output to $HV_OUT).
hv_peak_kib() {
	/usr/bin/time -f %M -o "$HV_OUTDIR/time" "$@" >"$HV_OUT" 2>/dev/null
	tail -1 "$HV_OUTDIR/time"
}

hv_row() { printf '  %-44s %10s %10s %10s\n' "$1" "$2" "$3" "${4:-}"; }

# hv_target LABEL VALUE LIMIT: PASS when VALUE <= LIMIT.
hv_target() {
	local verdict
	verdict=$(awk -v v="$2" -v l="$3" 'BEGIN { print (v <= l) ? "PASS" : "MISS" }')
	printf '  %-44s %10s   (target <= %s)  %s\n' "$1" "$2" "$3" "$verdict"
	[ "$verdict" = PASS ] || HV_MISSES=$((HV_MISSES + 1))
}
HV_MISSES=0

hv_header() {
	echo "harvest bench — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "  machine: $(nproc) CPUs, $(uname -sr), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "  harvest: $("$HARVEST" --version 2>/dev/null | head -1) ($HARVEST)"
	echo "  corpus under $HV_TMP ($(stat -f -c %T "$HV_TMP")); output of every command to $HV_OUT_WHERE"
	echo "  median of $HV_ROUNDS interleaved rounds, after one warm-up run of each command"
	echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews wall times)"
}

# ---- section: walk ----

# A deterministic tree of at least $1 entries: nested directories (up to 6 levels, fan-out
# 0-6), 10-120 files each with mixed sizes (sparse, so generation is quick), ~2% symlinks
# (to files, to directories, dangling).
hv_gen_walk_tree() {
	python3 - "$1" "$2" <<'PY'
import os, random, sys
root, target = sys.argv[1], int(sys.argv[2])
rng = random.Random(20240601)
exts = [".py", ".txt", ".json", ".csv", ".png", ".md", "", ".log", ".c", ".h"]
def size():
    r = rng.random()
    if r < 0.60: return rng.randint(0, 4096)
    if r < 0.90: return rng.randint(4096, 65536)
    if r < 0.99: return rng.randint(65536, 1 << 20)
    return rng.randint(1 << 20, 16 << 20)
os.mkdir(root)
count, queue = 0, [(root, 0)]
while queue and count < target:
    d, depth = queue.pop(0)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    nfiles = rng.randint(10, 120)
    names = []
    for i in range(nfiles):
        name = "f%d_%s%s" % (i, "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 12))), rng.choice(exts))
        if rng.random() < 0.02 and names:
            t = rng.choice([rng.choice(names), "..", "missing-" + name])
            os.symlink(t, name, dir_fd=fd)
        else:
            f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
            os.ftruncate(f, size())
            os.close(f)
            names.append(name)
        count += 1
    nsub = rng.randint(1 if depth < 2 else 0, 6) if depth < 6 else 0
    if depth == 0: nsub = 24
    for i in range(nsub):
        name = "dir%d_%s" % (i, "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 8))))
        os.mkdir(name, 0o755, dir_fd=fd)
        count += 1
        queue.append((os.path.join(d, name), depth + 1))
    os.close(fd)
if count < target:
    sys.exit("generator: only %d entries" % count)
print(count)
PY
}

# shellcheck disable=SC2034 # the HV_CMD_* arrays are read by hv_time_rounds
bench_walk() {
	local tree=$HV_TMP/walk-tree n_find n_hv
	echo
	echo "== walk: harvest walk vs find vs bfs"
	local t0=$EPOCHREALTIME
	hv_gen_walk_tree "$tree" "$HV_WALK_ENTRIES" >/dev/null
	n_find=$(find "$tree" -mindepth 1 | wc -l)
	n_hv=$("$HARVEST" walk --format nul --sort none "$tree" | tr -cd '\0' | wc -c)
	printf '  corpus: %d entries (%d dirs, %d symlinks), generated in %.1f s\n' "$n_find" \
		"$(find "$tree" -mindepth 1 -type d | wc -l)" "$(find "$tree" -type l | wc -l)" \
		"$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
	[ "$n_find" -ge 200000 ] || [ "$HV_WALK_ENTRIES" -lt 200000 ] || die "corpus too small: $n_find"
	[ "$n_hv" -eq "$n_find" ] || die "harvest lists $n_hv entries, find $n_find: not the same work"

	HV_CMD_hv_none=("$HARVEST" walk --sort none --format jsonl "$tree")
	HV_CMD_hv_name=("$HARVEST" walk --format jsonl "$tree")
	HV_CMD_find=(find "$tree" -printf '%P\t%y\t%s\n')
	local names=(hv_none hv_name find)
	if command -v bfs >/dev/null; then
		HV_CMD_bfs=(bfs "$tree" -printf '%P\t%y\t%s\n')
		names+=(bfs)
	fi
	hv_time_rounds "${names[@]}"

	local f=${HV_MEDIAN[find]}
	ratio() { awk -v a="$1" -v b="$f" 'BEGIN { printf "%.2f", a / b }'; }
	hv_row "command" "median s" "÷ find" "CPU s"
	hv_row "harvest walk --sort none --format jsonl" "${HV_MEDIAN[hv_none]}" \
		"$(ratio "${HV_MEDIAN[hv_none]}")" "${HV_CPU[hv_none]}"
	hv_row "harvest walk --format jsonl (sorted)" "${HV_MEDIAN[hv_name]}" \
		"$(ratio "${HV_MEDIAN[hv_name]}")" "${HV_CPU[hv_name]}"
	hv_row "find -printf '%P\\t%y\\t%s\\n'" "$f" "1.00" "${HV_CPU[find]}"
	if [ -n "${HV_MEDIAN[bfs]:-}" ]; then
		hv_row "bfs -printf '%P\\t%y\\t%s\\n'" "${HV_MEDIAN[bfs]}" \
			"$(ratio "${HV_MEDIAN[bfs]}")" "${HV_CPU[bfs]}"
	else
		hv_row "bfs" "(not installed)" "-"
	fi

	local rss_none=0 rss_name=0 k i
	for ((i = 0; i < 3; i++)); do # the largest of 3 runs each
		k=$(hv_peak_kib "${HV_CMD_hv_none[@]}")
		if [ "$k" -gt "$rss_none" ]; then rss_none=$k; fi
		k=$(hv_peak_kib "${HV_CMD_hv_name[@]}")
		if [ "$k" -gt "$rss_name" ]; then rss_name=$k; fi
	done
	local mib_none mib_name
	mib_none=$(awk -v k="$rss_none" 'BEGIN { printf "%.1f", k / 1024 }')
	mib_name=$(awk -v k="$rss_name" 'BEGIN { printf "%.1f", k / 1024 }')
	hv_row "peak RSS, harvest walk --sort none (MiB)" "$mib_none" ""
	hv_row "peak RSS, harvest walk sorted (MiB)" "$mib_name" ""
	echo "  targets:"
	hv_target "unsorted time ÷ find" "$(ratio "${HV_MEDIAN[hv_none]}")" 0.75
	hv_target "sorted time ÷ find" "$(ratio "${HV_MEDIAN[hv_name]}")" 0.85
	hv_target "peak RSS, --sort none (MiB)" "$mib_none" 31.99
	hv_target "peak RSS, sorted (MiB)" "$mib_name" 31.99
}

# ---- main ----

hv_selected() {
	[ -z "$HV_ONLY" ] && return 0
	[[ ",$HV_ONLY," == *",$1,"* ]]
}

if [ -n "$HV_ONLY" ]; then
	IFS=, read -ra wanted <<<"$HV_ONLY"
	for s in "${wanted[@]}"; do
		[[ " ${HV_SECTIONS[*]} " == *" $s "* ]] || die "no section '$s' (sections: ${HV_SECTIONS[*]})"
	done
fi
hv_build
hv_setup_tmp
hv_header
for s in "${HV_SECTIONS[@]}"; do
	if hv_selected "$s"; then
		"bench_$s"
	fi
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$HV_MISSES" -eq 0 ]; then
	echo "all targets met"
else
	echo "$HV_MISSES target(s) missed"
fi

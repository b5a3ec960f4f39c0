# Sourced by setup.sh and test.sh: installs the Debian 12 packages harvest builds, tests and
# benchmarks with, when any is missing. Needs root (or sudo) the first time only.
# clang-tidy and cppcheck: scripts/lint.sh (run by scripts/test.sh); valgrind: scripts/test.sh
# --valgrind; lcov (with gcc's gcov): scripts/coverage.sh; python3-pytest: the Python adapter's
# tests (scripts/test.sh's adapters step); libarchive-tools (bsdtar) and unzip: the archive
# tests; chromium and python3-matplotlib: the page step (the HTML page in a real browser, with
# matplotlib's plots as artifacts); libacl1-dev, libzstd-dev and liblz4-dev: what a static link
# of libarchive needs (install_test builds the example against libharvest.a); libpq-dev and
# postgresql-15: the PostgreSQL history backend and the real server its tests start
# (scripts/pg_fixture.sh); strace: changes_rename_test counts the system calls that read
# directories in a run; g++: install_test compiles the installed headers as C++98 too. Node and npm (the TypeScript adapter) are installed
# only when neither is on PATH: a newer Node already there is kept.
HV_PACKAGES="cmake make gcc pkg-config libmagic-dev libmagic-mgc file libsqlite3-dev sqlite3
libcmocka-dev libssl-dev libseccomp-dev shared-mime-info bfs time python3 clang-tidy cppcheck
valgrind lcov python3-pytest libarchive-dev libarchive-tools unzip chromium python3-matplotlib
libacl1-dev libzstd-dev liblz4-dev libpq-dev postgresql-15 strace g++"

hv_install_deps() {
	local missing=()
	local p
	for p in $HV_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "harvest: installing ${missing[*]}" >&2
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" >/dev/null
}

#!/bin/sh
# install_test: libharvest as an installed library. Installs the build into a temporary prefix,
# moves the tree elsewhere (the CMake package and harvest.pc must find it from where they are),
# builds examples/walk_json against it with find_package(harvest) (shared and static) and with
# pkg-config (shared, and static from Libs.private/Requires.private), runs each on a fixture
# tree and compares their output with the expected FileInfo lines, and checks the shared
# library's boundary: its SONAME, and that `nm -D --defined-only` lists exactly the functions
# the installed headers declare (a function declared without HV_EXTERN, or an internal one
# exported, fails here), and that harvest.h includes every public header, compiles without a
# warning as C99 and as C++98 (-pedantic), and gives the library's version at compile time.
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR SONAME [EXTRA_FLAGS]
#   EXTRA_FLAGS: compiler and linker flags the library was built with that a program linking
#   it needs too (-fsanitize=..., --coverage).
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
soname=$3
extra=${4:-}
fail() {
	echo "install_test: FAIL: $*" >&2
	exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/harvest-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# ---- install, then move the whole tree ----
cmake --install "$build" --prefix "$tmp/first" >"$tmp/install.log" || {
	cat "$tmp/install.log" >&2
	fail "cmake --install"
}
mv "$tmp/first" "$tmp/prefix"
p=$tmp/prefix
pc=$(find "$p" -name harvest.pc)
[ -n "$pc" ] || fail "no harvest.pc installed"
libdir=$(dirname "$(dirname "$pc")")
cfgdir=$libdir/cmake/harvest
for f in harvestConfig.cmake harvestConfigVersion.cmake harvestTargets.cmake; do
	[ -f "$cfgdir/$f" ] || fail "$cfgdir/$f not installed"
done
[ -f "$libdir/libharvest.a" ] || fail "no libharvest.a in $libdir"
[ -f "$libdir/$soname" ] || fail "no $soname in $libdir"
# Nothing installed may remember where it was installed first.
if grep -rl "$tmp/first" "$p" >"$tmp/stale" 2>/dev/null; then
	cat "$tmp/stale" >&2
	fail "installed files name the install prefix"
fi

# ---- the shared library's boundary ----
got=$(objdump -p "$libdir/$soname" | awk '$1 == "SONAME" {print $2}')
[ "$got" = "$soname" ] || fail "SONAME is '$got', expected $soname"
inc=$p/include
for h in "$inc"/harvest/*.h; do
	name=harvest/${h##*/}
	grep -q "^#include \"$name\"" "$inc/harvest.h" || fail "harvest.h does not include $name"
done
# Every top-level function declaration of the public headers (one per line in harvest's style:
# the return type, the name and its '(' on the first line), with or without HV_EXTERN.
cat "$inc"/harvest/*.h "$inc"/harvest/*/*.h 2>/dev/null |
	grep -E '^[A-Za-z_][A-Za-z0-9_ *]*[ *][A-Za-z_][A-Za-z0-9_]*[ ]*\(' |
	grep -vE '^(typedef|extern|struct|enum|union|return)\b' |
	sed -E 's/^([^(]*[ *])([A-Za-z_][A-Za-z0-9_]*)[ ]*\(.*/\2/' | LC_ALL=C sort -u >"$tmp/declared"
[ -s "$tmp/declared" ] || fail "no function declarations found in $inc"
# Declarations lacking the macro are listed by name, so the message says what to fix.
cat "$inc"/harvest/*.h "$inc"/harvest/*/*.h 2>/dev/null |
	grep -E '^[A-Za-z_][A-Za-z0-9_ *]*[ *][A-Za-z_][A-Za-z0-9_]*[ ]*\(' |
	grep -vE '^(typedef|extern|struct|enum|union|return|HV_EXTERN)\b' >"$tmp/unmarked" || true
if [ -s "$tmp/unmarked" ]; then
	cat "$tmp/unmarked" >&2
	fail "public function declarations without HV_EXTERN (see above)"
fi
nm -D --defined-only "$libdir/$soname" | awk '{print $NF}' |
	grep -vxE '_init|_fini|_edata|_end|__bss_start' |
	# a --coverage build links gcov's runtime into the library, which exports its own
	grep -vxE '__gcov_[A-Za-z0-9_]+|mangle_path' | LC_ALL=C sort -u >"$tmp/exported"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
	echo "declared in the headers (<) vs exported by $soname (>):" >&2
	diff "$tmp/declared" "$tmp/exported" >&2 || true
	fail "the exported symbols are not the declared functions"
fi
grep -vq '^hv_' "$tmp/declared" && fail "a public function without the hv_ prefix"
# Test hooks are the library's own (src/lib/test_hook.h): no public struct member or function
# is there for the tests.
if grep -nE '\btest_[a-z_]+|[Tt]ests only' "$inc"/harvest.h "$inc"/harvest/*.h "$inc"/harvest/*/*.h \
	2>/dev/null >"$tmp/hooks"; then
	cat "$tmp/hooks" >&2
	fail "the public headers hold test hooks (see above)"
fi

# ---- the headers in another program's compiler: C99 and C++98, -pedantic, no warning ----
cat >"$tmp/hdr.c" <<-'SRC'
	#include <harvest.h>
	#include <stdio.h>
	#include <string.h>
	#if !defined(HV_VERSION_NUMBER) || HV_VERSION_NUMBER < 1000
	#error "no usable HV_VERSION_NUMBER"
	#endif
	int main(void)
	{
		/* The headers' version is the library's. */
		printf("%s %s\n", HV_VERSION, hv_version());
		return strcmp(HV_VERSION, hv_version()) != 0;
	}
SRC
cp "$tmp/hdr.c" "$tmp/hdr.cc"
cc -std=c99 -pedantic -Wall -Wextra -Werror $extra -I"$inc" -o "$tmp/hdr-c" "$tmp/hdr.c" \
	-L"$libdir" -Wl,-rpath,"$libdir" -lharvest >"$tmp/hdr.log" 2>&1 || {
	cat "$tmp/hdr.log" >&2
	fail "the installed headers as C99 (-pedantic -Werror)"
}
c++ -std=c++98 -pedantic -Wall -Wextra -Werror -I"$inc" -fsyntax-only "$tmp/hdr.cc" \
	>"$tmp/hdr.log" 2>&1 || {
	cat "$tmp/hdr.log" >&2
	fail "the installed headers as C++98 (-pedantic -Werror)"
}
got=$("$tmp/hdr-c") || fail "HV_VERSION and hv_version() differ: $got"
case $got in
[0-9]*.[0-9]*.[0-9]*" "[0-9]*.[0-9]*.[0-9]*) ;;
*) fail "the version is '$got', not X.Y.Z" ;;
esac

# ---- a fixture tree and what walk_json must print for it ----
t=$tmp/tree
mkdir -p "$t/sub/deeper"
printf 'hello\n' >"$t/a.txt"
printf '0123456789' >"$t/sub/b.bin"
printf '' >"$t/sub/deeper/empty"
ln -s nowhere "$t/dangling" # stat fails: is_dir and size are null, not guessed
dsize() { stat -c %s "$1"; }
cat >"$tmp/expected" <<-EXPECTED
{"name":"a.txt","path":"a.txt","is_dir":false,"size":6}
{"name":"dangling","path":"dangling","is_dir":null,"size":null}
{"name":"sub","path":"sub","is_dir":true,"size":$(dsize "$t/sub")}
{"name":"b.bin","path":"sub/b.bin","is_dir":false,"size":10}
{"name":"deeper","path":"sub/deeper","is_dir":true,"size":$(dsize "$t/sub/deeper")}
{"name":"empty","path":"sub/deeper/empty","is_dir":false,"size":0}
EXPECTED
check_run() { # LABEL PROGRAM: runs it on the tree and compares
	rc=0
	"$2" "$t" >"$tmp/out.$1" 2>"$tmp/err.$1" || rc=$?
	if [ $rc -ne 0 ]; then
		cat "$tmp/err.$1" >&2
		fail "$1: walk_json exited $rc"
	fi
	if ! cmp -s "$tmp/expected" "$tmp/out.$1"; then
		diff "$tmp/expected" "$tmp/out.$1" >&2 || true
		fail "$1: walk_json printed other records"
	fi
	# It fails cleanly, naming the path, on a directory that is not there.
	if "$2" "$t/missing" >/dev/null 2>"$tmp/err.$1"; then
		fail "$1: walk_json succeeded on a missing directory"
	fi
	grep -q "missing" "$tmp/err.$1" || fail "$1: the error does not name the path"
}
needs() { # LABEL PROGRAM SONAME-OR-EMPTY: the program links the shared library or not
	if [ -n "$3" ]; then
		objdump -p "$2" | grep -q "NEEDED *$3\$" || fail "$1: does not link $3"
	elif objdump -p "$2" | grep -q 'NEEDED *libharvest'; then
		fail "$1: links the shared libharvest"
	fi
}

# ---- find_package(harvest) ----
ex=$src/examples/walk_json
for kind in shared static; do
	b=$tmp/cmake-$kind
	static=OFF
	[ $kind = static ] && static=ON
	cmake -S "$ex" -B "$b" -DCMAKE_PREFIX_PATH="$p" -DWALK_JSON_STATIC=$static \
		-DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" >"$tmp/cmake.log" 2>&1 &&
		cmake --build "$b" >>"$tmp/cmake.log" 2>&1 || {
		cat "$tmp/cmake.log" >&2
		fail "cmake build of the example ($kind)"
	}
	if [ $kind = shared ]; then
		needs cmake-$kind "$b/walk_json" "$soname"
	else
		needs cmake-$kind "$b/walk_json" ""
	fi
	check_run cmake-$kind "$b/walk_json"
done

# ---- pkg-config ----
export PKG_CONFIG_PATH="$libdir/pkgconfig"
got=$(pkg-config --variable=prefix harvest)
[ "$(cd "$got" && pwd -P)" = "$(cd "$p" && pwd -P)" ] || fail "harvest.pc prefix is $got, not $p"
b=$tmp/pc-shared
mkdir "$b"
make -s -C "$b" -f "$ex/Makefile" VPATH="$ex" CFLAGS="-O2 -Wall $extra" LDFLAGS="$extra" \
	walk_json >"$tmp/make.log" 2>&1 || {
	cat "$tmp/make.log" >&2
	fail "pkg-config build of the example"
}
needs pc-shared "$b/walk_json" "$soname"
# The Makefile's -rpath: it starts with no LD_LIBRARY_PATH.
check_run pc-shared "$b/walk_json"
# Static: libharvest.a with the libraries harvest.pc names for static linking.
b=$tmp/pc-static
mkdir "$b"
# shellcheck disable=SC2046 # the flags are meant to be split
cc -O2 $extra $(pkg-config --cflags harvest) -o "$b/walk_json" "$ex/walk_json.c" \
	-Wl,-Bstatic -lharvest -Wl,-Bdynamic \
	$(pkg-config --static --libs harvest | sed 's/-lharvest//') >"$tmp/cc.log" 2>&1 || {
	cat "$tmp/cc.log" >&2
	fail "static pkg-config build of the example"
}
needs pc-static "$b/walk_json" ""
check_run pc-static "$b/walk_json"
echo "install_test: ok"

#!/usr/bin/env bash
# The install test (ctest install_consumer, registered by tests/install.cmake):
# install a build into a temporary prefix, check what is there, then build
# tests/install/app.c against the installed copy, and only against it:
#   1. with CMake: find_package(mpmd) in a separate project (this folder),
#      linking mpmd::mpmd (libmpmd.so) and mpmd::mpmd_static (libmpmd.a);
#   2. with pkg-config and a plain compiler command, shared and static.
# Every program runs; the shared ones must load the installed libmpmd.so,
# the static ones no libmpmd.so at all. No network; the prefix goes away at
# the end, pass or fail.
#
#   run.sh BUILD_DIR [--cmake CMAKE] [--cc CC] [--sanitize]
#
# --sanitize: the build is instrumented (MPMD_SANITIZE), so the programs
# are compiled and linked with -fsanitize=address,undefined too.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=""
cmake_cmd=cmake
cc_cmd=cc
san_flags=""
while [ $# -gt 0 ]; do
    case "$1" in
    --cmake) cmake_cmd=$2; shift 2 ;;
    --cc) cc_cmd=$2; shift 2 ;;
    --sanitize) san_flags="-fsanitize=address,undefined"; shift ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
    esac
done
if [ -z "$build" ] || [ ! -f "$build/CMakeCache.txt" ]; then
    echo "usage: run.sh BUILD_DIR [--cmake CMAKE] [--cc CC] [--sanitize] (BUILD_DIR: a configured and built mpmd build)" >&2
    exit 2
fi
for tool in pkg-config ldd readelf; do
    if ! command -v "$tool" >/dev/null; then
        echo "install test: '$tool' is missing (make deps installs pkg-config; ldd and readelf come with libc-bin and binutils)" >&2
        exit 1
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpmd-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
log=$tmp/log
fails=0

fail() {
    echo "install test: FAIL: $*" >&2
    fails=$((fails + 1))
}
# Run a command quietly; on failure show its output and stop.
quiet() {
    if ! "$@" >"$log" 2>&1; then
        echo "install test: command failed: $*" >&2
        cat "$log" >&2
        exit 1
    fi
}

# ---- install -------------------------------------------------------------
quiet "$cmake_cmd" --install "$build" --prefix "$prefix"

for f in include/mpmd.h lib/libmpmd.a lib/libmpmd.so bin/mpmd lib/cmake/mpmd/mpmdConfig.cmake \
    lib/cmake/mpmd/mpmdConfigVersion.cmake lib/cmake/mpmd/mpmdTargets.cmake lib/pkgconfig/mpmd.pc; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
done
# Every header the public headers include with quotes is installed too.
for h in "$prefix"/include/*.h; do
    for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$h"); do
        [ -f "$prefix/include/$inc" ] || fail "$(basename "$h") includes \"$inc\", which is not installed"
    done
done
# The soname link is there, and resolves to the real file.
soname=$(readelf -d "$prefix/lib/libmpmd.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ -z "$soname" ]; then
    fail "libmpmd.so has no soname"
elif [ ! -e "$prefix/lib/$soname" ]; then
    fail "the soname link lib/$soname is missing"
fi

# The tool runs from the prefix.
if ! "$prefix/bin/mpmd" schedule std1f1b --stages 2 --microbatches 2 >"$log" 2>&1; then
    fail "bin/mpmd schedule failed: $(cat "$log")"
elif ! grep -q "fwd_1__0" "$log"; then
    fail "bin/mpmd schedule printed no task list: $(cat "$log")"
fi

# ldd checks: which libmpmd a program loads, and which OpenBLAS. (ldd's
# output is taken whole first: grep -q stopping early under pipefail would
# read as a failure.)
uses_installed_so() { # program
    local deps
    deps=$(ldd "$1")
    grep -q "libmpmd\.so[^ ]* => $prefix/lib/libmpmd\.so" <<<"$deps" ||
        fail "$(basename "$1") does not load $prefix/lib/libmpmd.so: $(grep -i mpmd <<<"$deps" || echo 'no libmpmd')"
}
uses_no_so() { # program
    local deps
    deps=$(ldd "$1")
    if grep -q "libmpmd\.so" <<<"$deps"; then
        fail "$(basename "$1") is linked statically but loads $(grep libmpmd <<<"$deps")"
    fi
}
uses_openmp_blas() { # program
    local deps
    deps=$(ldd "$1")
    grep -q "libopenblas\.so[^ ]* => [^ ]*openblas-openmp/" <<<"$deps" ||
        fail "$(basename "$1") does not load OpenBLAS' OpenMP build: $(grep -i blas <<<"$deps" || echo 'no OpenBLAS')"
}
run_app() { # program
    if ! "$1" >"$log" 2>&1; then
        fail "$(basename "$1") failed: $(cat "$log")"
    else
        echo "$(basename "$1"): $(cat "$log")"
    fi
}

# ---- 1. CMake: find_package(mpmd) ------------------------------------------
quiet "$cmake_cmd" -S "$here" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc_cmd" \
    -DCMAKE_BUILD_TYPE=Release ${san_flags:+"-DCMAKE_C_FLAGS=$san_flags"} \
    ${san_flags:+"-DCMAKE_EXE_LINKER_FLAGS=$san_flags"}
found=$(sed -n 's/^mpmd_DIR:PATH=//p' "$tmp/consumer/CMakeCache.txt")
[ "$found" = "$prefix/lib/cmake/mpmd" ] || fail "find_package(mpmd) found '$found', not $prefix/lib/cmake/mpmd"
quiet "$cmake_cmd" --build "$tmp/consumer"
uses_installed_so "$tmp/consumer/app_shared"
uses_no_so "$tmp/consumer/app_static"
uses_openmp_blas "$tmp/consumer/app_shared"
uses_openmp_blas "$tmp/consumer/app_static"
run_app "$tmp/consumer/app_shared"
run_app "$tmp/consumer/app_static"

# ---- 2. pkg-config and a plain compiler command ----------------------------
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
want_version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
got_version=$(pkg-config --modversion mpmd)
[ "$got_version" = "$want_version" ] || fail "pkg-config --modversion mpmd says '$got_version', the build is $want_version"
cflags=$(pkg-config --cflags mpmd)
libs=$(pkg-config --libs mpmd)
static_libs=$(pkg-config --static --libs mpmd)
libdir=$(pkg-config --variable=libdir mpmd)
# Shared: exactly what pkg-config says (+ a run path, since the prefix is not
# a system directory).
# shellcheck disable=SC2086 # the flags are word lists
quiet "$cc_cmd" -std=c11 -Wall -Wextra $san_flags -o "$tmp/app_pc_shared" "$here/app.c" $cflags $libs -Wl,-rpath,"$libdir"
# Static: --static adds libmpmd.a's own dependencies; -l:libmpmd.a makes the
# linker take the archive where it would prefer the .so next to it.
# shellcheck disable=SC2086
quiet "$cc_cmd" -std=c11 -Wall -Wextra $san_flags -o "$tmp/app_pc_static" "$here/app.c" $cflags \
    ${static_libs//-lmpmd/-l:libmpmd.a}
uses_installed_so "$tmp/app_pc_shared"
uses_no_so "$tmp/app_pc_static"
uses_openmp_blas "$tmp/app_pc_shared"
uses_openmp_blas "$tmp/app_pc_static"
run_app "$tmp/app_pc_shared"
run_app "$tmp/app_pc_static"

if [ "$fails" -ne 0 ]; then
    echo "install test: $fails check(s) failed" >&2
    exit 1
fi
echo "install test: installed into a temporary prefix; find_package and pkg-config builds, shared and static, all pass"

#!/usr/bin/env bash
# Keep the documentation in step with the code (ctests docs_reference and
# docs_examples, registered by tests/install.cmake).
#
#   check_reference.sh SOURCE_DIR [--cc CC]
#       docs/reference.md restates every declaration of include/*.h: under
#       a "## ... `NAME.h` ..." heading, its ```c blocks hold exactly the
#       declarations of include/NAME.h, in the header's order (comments and
#       layout aside). A function, type, field or macro added, changed or
#       removed in a header without the same change in the reference fails,
#       with a diff. Also: every mpmd_/MPMD_ name that docs/*.md written for
#       users mention exists (in a header, or as a CMake option or target).
#
#   check_reference.sh SOURCE_DIR --examples LIBMPMD [--cc CC] [--sanitize]
#       The ```c blocks of docs/guide.md, and those of
#       docs/porting-from-jaxpp.md, put together in order, are each one
#       complete program: compile it (-Wall -Wextra -Werror) against
#       include/ and the library file LIBMPMD (libmpmd.so of the build), and
#       run it; it must exit 0.
#
# Needs gcc (its -fpreprocessed mode strips comments without expanding
# anything), awk, grep, diff.
set -euo pipefail
export LC_ALL=C

src=""
cc_cmd=cc
examples_lib=""
san_flags=""
while [ $# -gt 0 ]; do
    case "$1" in
    --cc) cc_cmd=$2; shift 2 ;;
    --examples) examples_lib=$2; shift 2 ;;
    --sanitize) san_flags="-fsanitize=address,undefined"; shift ;;
    -*) echo "check_reference.sh: unknown option $1" >&2; exit 2 ;;
    *) src=$1; shift ;;
    esac
done
if [ -z "$src" ] || [ ! -f "$src/include/mpmd.h" ]; then
    echo "usage: check_reference.sh SOURCE_DIR [--cc CC] [--examples LIBMPMD [--sanitize]]" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpmd-docs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
    echo "docs check: FAIL: $*" >&2
    fails=$((fails + 1))
}

# The ```c blocks of a Markdown file, concatenated (fences dropped).
c_blocks() { # file
    awk '/^```c[ \t]*$/ { inb = 1; next } /^```/ { inb = 0; next } inb { print }' "$1"
}

if [ -n "$examples_lib" ]; then
    # ---- the documents' programs ------------------------------------------
    libdir=$(dirname "$examples_lib")
    for doc in guide porting-from-jaxpp; do
        md="$src/docs/$doc.md"
        if [ ! -f "$md" ]; then
            fail "docs/$doc.md is missing"
            continue
        fi
        c_blocks "$md" >"$tmp/$doc.c"
        if [ ! -s "$tmp/$doc.c" ]; then
            fail "docs/$doc.md has no \`\`\`c blocks"
            continue
        fi
        # shellcheck disable=SC2086 # san_flags is a word list
        if ! "$cc_cmd" -std=c11 -Wall -Wextra -Werror $san_flags -I"$src/include" -o "$tmp/$doc" "$tmp/$doc.c" \
            "$examples_lib" -Wl,-rpath,"$libdir" -lm >"$tmp/log" 2>&1; then
            fail "the program of docs/$doc.md does not compile (its C blocks, in order, as $doc.c):"
            cat "$tmp/log" >&2
            continue
        fi
        if ! (cd "$tmp" && "./$doc") >"$tmp/log" 2>&1; then
            fail "the program of docs/$doc.md failed:"
            cat "$tmp/log" >&2
            continue
        fi
        echo "docs/$doc.md: its program builds and runs ($(wc -l <"$tmp/$doc.c") lines)"
    done
    [ "$fails" -eq 0 ] || exit 1
    exit 0
fi

# ---- docs/reference.md against include/*.h ---------------------------------

# Normalise C declarations: comments gone (gcc -fpreprocessed), continued
# lines joined, the include guard, #include lines and the extern "C"
# wrapper dropped, then one statement per line (split after ; { }, each
# preprocessor line alone), runs of blanks as one space and no blanks
# next to punctuation.
normalise() { # file with C text
    "$cc_cmd" -fpreprocessed -dD -E -P -x c "$1" 2>"$tmp/cpp.err" | awk '
        function squeeze(s) {
            gsub(/[ \t]+/, " ", s)
            gsub(/ ?\( ?/, "(", s); gsub(/ ?\) ?/, ")", s); gsub(/ ?, ?/, ",", s)
            gsub(/ ?; ?/, ";", s);  gsub(/ ?\* ?/, "*", s); gsub(/ ?\[ ?/, "[", s)
            gsub(/ ?\] ?/, "]", s); gsub(/ ?\{ ?/, "{", s); gsub(/ ?\} ?/, "}", s)
            gsub(/ ?= ?/, "=", s)
            sub(/^ /, "", s); sub(/ $/, "", s)
            return s
        }
        function out(s) { s = squeeze(s); if (s != "") lines[++n] = s }
        function flush(   i, c, cur) {
            cur = ""
            for (i = 1; i <= length(buf); i++) {
                c = substr(buf, i, 1)
                cur = cur c
                if (c == ";" || c == "{" || c == "}") { out(cur); cur = "" }
            }
            out(cur)
            buf = ""
        }
        {
            line = $0
            while (line ~ /\\$/ && (getline nxt) > 0) { sub(/\\$/, "", line); line = line " " nxt }
            t = line; sub(/^[ \t]+/, "", t)
            if (skip) { if (t ~ /^#[ \t]*endif/) skip = 0; next }
            if (t ~ /^MPMD_API_(BEGIN|END)[ \t]*$/) next  # export markers, not declarations
            if (substr(t, 1, 1) == "#") {
                flush()
                d = squeeze(t)
                if (d ~ /^#ifdef __cplusplus$/ || d ~ /^#if defined\(__GNUC__\)$/) { skip = 1; next }
                if (d ~ /^#include/) next
                if (guard == "" && d ~ /^#ifndef [A-Z0-9_]+_H$/) { guard = substr(d, 9); next }
                if (guard != "" && d == "#define " guard) next
                out(d)
                next
            }
            buf = buf " " line
        }
        END {
            flush()
            if (guard != "" && n > 0 && lines[n] ~ /^#endif/) n--
            for (i = 1; i <= n; i++) print lines[i]
        }'
}

ref="$src/docs/reference.md"
if [ ! -f "$ref" ]; then
    fail "docs/reference.md is missing"
    exit 1
fi

# Split the reference's ```c blocks by header section.
mkdir -p "$tmp/ref"
awk -v dir="$tmp/ref" '
    /^## / {
        cur = ""
        if (match($0, /`[A-Za-z0-9_]+\.h`/)) cur = substr($0, RSTART + 1, RLENGTH - 2)
        if (cur != "") printf "" > (dir "/" cur)
        next
    }
    /^```c[ \t]*$/ {
        inb = 1
        if (cur == "") { print "reference.md:" NR ": a ```c block outside a header section" > "/dev/stderr"; bad = 1 }
        next
    }
    /^```/ { inb = 0; next }
    inb && cur != "" { print >> (dir "/" cur) }
    END { exit bad }' "$ref" || fail "docs/reference.md: C blocks must sit under a \"## ... \`NAME.h\`\" heading"

for h in "$src"/include/*.h; do
    name=$(basename "$h")
    if [ ! -f "$tmp/ref/$name" ]; then
        fail "docs/reference.md has no section for include/$name (a \"## ... \`$name\` ...\" heading)"
        continue
    fi
    normalise "$h" >"$tmp/h.norm" || { fail "cannot read include/$name: $(cat "$tmp/cpp.err")"; continue; }
    normalise "$tmp/ref/$name" >"$tmp/r.norm" || { fail "reference.md's $name blocks: $(cat "$tmp/cpp.err")"; continue; }
    if ! diff -u --label "include/$name" --label "docs/reference.md ($name)" "$tmp/h.norm" "$tmp/r.norm" >"$tmp/diff"; then
        fail "docs/reference.md does not restate include/$name exactly (- only in the header, + only in the reference):"
        cat "$tmp/diff" >&2
    fi
done
for r in "$tmp"/ref/*.h; do
    [ -e "$r" ] || continue
    [ -f "$src/include/$(basename "$r")" ] || fail "docs/reference.md has a section for $(basename "$r"), which is not in include/"
done

# ---- names the documents mention must exist --------------------------------
{
    for h in "$src"/include/*.h; do "$cc_cmd" -fpreprocessed -dD -E -P -x c "$h" 2>/dev/null; done
    # CMake options and targets a document may name (MPMD_SANITIZE, mpmd_shared, ...)
    find "$src" -name CMakeLists.txt -not -path "*/build*" -exec \
        sed -n 's/^[ \t]*\(option\|add_library\|add_executable\)(\([A-Za-z0-9_]*\).*/\2/p' {} +
    # environment variables the tests read
    grep -rhoE 'getenv\("MPMD_[A-Z0-9_]+"' "$src/src" "$src/tests" "$src/tools" 2>/dev/null | grep -oE 'MPMD_[A-Z0-9_]+' || true
    # JaxPP's names, which the porting guide compares with ours
    echo "mpmd_dim mpmd_idxs mpmd_mesh"
} | grep -oE '\b(mpmd|MPMD)_[A-Za-z0-9_]+' | sort -u >"$tmp/known"
for doc in reference guide porting-from-jaxpp; do
    md="$src/docs/$doc.md"
    [ -f "$md" ] || { fail "docs/$doc.md is missing"; continue; }
    # names, but not file names (mpmd_schedule.h), link anchors
    # (#mpmd_errorh-...) or CMake's namespaced targets (mpmd::mpmd_static);
    # the documents' own programs name no helper mpmd_...
    grep -oE '(^|[^#:A-Za-z0-9_])(mpmd|MPMD)_[A-Za-z0-9_]+(\.[a-z]+)?' "$md" | sed 's/^[^A-Za-z]//' |
        grep -vE '\.[a-z]+$' | sort -u >"$tmp/used"
    unknown=$(comm -23 "$tmp/used" "$tmp/known" | tr '\n' ' ')
    [ -z "$unknown" ] || fail "docs/$doc.md names what no header declares: $unknown"
done

if [ "$fails" -ne 0 ]; then
    echo "docs check: $fails problem(s)" >&2
    exit 1
fi
echo "docs check: docs/reference.md restates every declaration of $(ls "$src"/include/*.h | wc -l) headers; every name the docs use exists"

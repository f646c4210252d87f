#!/usr/bin/env bash
# The shared library exports its API and nothing else: every dynamic symbol
# libmpmd.so defines is a function or variable its public headers declare
# (include/*.h), and every function they declare (but static inline ones) is
# exported.
#   exports.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
lib="$1/libmpmd.so" inc="$2/include"
if ! command -v nm >/dev/null; then echo "exports: skipped: no nm (binutils)"; exit 77; fi
[ -f "$lib" ] || { echo "FAIL: no $lib"; exit 1; }
nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$1/exports.txt"
python3 - "$1/exports.txt" "$inc" <<'PY'
import os, re, sys
exported = set(open(sys.argv[1]).read().split())
src = ""
for h in sorted(os.listdir(sys.argv[2])):
    if h.endswith(".h"):
        src += open(os.path.join(sys.argv[2], h)).read() + "\n"
src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)            # comments
src = re.sub(r"//[^\n]*", " ", src)
src = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", src, flags=re.M)  # preprocessor lines
# static inline functions: their bodies, braces balanced
out, i = [], 0
for m in re.finditer(r"static\s+inline[^;{]*\{", src):
    if m.start() < i:
        continue
    out.append(src[i:m.start()])
    depth, j = 1, m.end()
    while depth and j < len(src):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        j += 1
    i = j
out.append(src[i:])
src = "".join(out)
declared = set()
for stmt in src.split(";"):
    stmt = " ".join(stmt.split())
    if stmt.startswith("typedef") or "(*" in stmt.split("(")[0]:
        continue
    m = re.search(r"(?:^|[\s*}])(mpmd_[a-z0-9_]+)\s*\(", stmt)
    if m:
        declared.add(m.group(1))
leaked = sorted(exported - declared)
hidden = sorted(declared - exported)
for s in leaked:
    print("FAIL: exported but not declared in include/: " + s)
for s in hidden:
    print("FAIL: declared in include/ but not exported: " + s)
print(f"exports: {len(exported)} symbols exported, {len(declared)} functions declared; "
      f"{len(leaked)} leaked, {len(hidden)} hidden")
sys.exit(1 if leaked or hidden else 0)
PY

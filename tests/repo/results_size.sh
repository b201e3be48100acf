#!/usr/bin/env bash
# results/ stays small: the files git tracks under results/ may take at most 6.5 MiB together (raw files of 8 KiB or
# more compressed with xz, no profiler archives: results/README.md). Without git, or outside a git checkout
# (a source tarball), every file under results/ is counted instead.
#
#   tests/repo/results_size.sh [SOURCE_DIR] [LIMIT_BYTES]
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
limit=${2:-6815744}   # 6.5 MiB
cd "$src"
[ -d results ] || { echo "results_size: no folder $src/results" >&2; exit 1; }

# The counted files, NUL-separated (tracked files deleted in the work tree are left out: du would fail).
# (A source tree unpacked inside some other checkout has no tracked files there: it is counted as files.)
if command -v git >/dev/null 2>&1 && [ -n "$(git ls-files -- results 2>/dev/null | head -n 1)" ]; then
  what="files git tracks under results/"
  list() { git ls-files -z -- results | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done; }
else
  what="files under results/ (not a git checkout: every file counted)"
  list() { find results -type f -print0; }
fi
# xargs may run du more than once, each with its own total line.
total=$(list | xargs -0 -r du -cb | awk '$2 == "total" { sum += $1 } END { print sum + 0 }')

mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
if [ "$total" -gt "$limit" ]; then
  echo "results_size: FAIL: the $what take $total bytes ($(mib "$total")), over the limit of $limit bytes ($(mib "$limit"))." >&2
  echo "results_size: compress raw files of 8 KiB or more with 'xz -9e', remove superseded runs nothing quotes and keep profiler archives out of the tree (results/README.md). The largest:" >&2
  list | xargs -0 -r du -b | sort -rn | head -n 10 >&2
  exit 1
fi
echo "results_size: the $what take $total bytes ($(mib "$total")), within the limit of $limit bytes ($(mib "$limit"))"

#!/usr/bin/env bash
# The provisional search (src/search/provisional.rs: the answer before the line index exists)
# against `rg -F -c` on one tree, page cache warm, best of five runs each.
#
#   bench/provisional.sh TREE [QUERY ...]     # default queries: mutex, return, "user name"
#
# TREE is any directory (a git work tree lists its tracked files; anything else is walked with
# its .gitignore rules); bench/search.sh leaves the kernel in $SCRATCH/linux.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(realpath "${1:?usage: bench/provisional.sh TREE [QUERY ...]}")
shift
[ $# -gt 0 ] || set -- mutex return "user name"
bin=$(cargo test --release --lib --no-run 2>&1 | grep -o '[^ (]*release/deps/gm-[0-9a-f]*' | tail -1)
[ -x "$bin" ] || { echo "no test binary" >&2; exit 1; }
best_rg() { # the best wall time of five runs of rg, in ms
  local best=999999 t
  for _ in 1 2 3 4 5; do
    t=$( { /usr/bin/time -f %e rg -F -c "$@" "$tree" >/dev/null; } 2>&1 | tail -1)
    t=$(awk -v t="$t" 'BEGIN { printf "%d", t * 1000 }')
    [ "$t" -lt "$best" ] && best=$t
  done
  echo "$best"
}
rg -F -c warm "$tree" >/dev/null || true
for query in "$@"; do
  # rg gets each word of a query as a pattern of its own, as the search looks for each.
  args=()
  for word in $query; do args+=(-e "$word"); done
  rg_ms=$(best_rg "${args[@]}")
  line=$(GM_PROVISIONAL_TREE="$tree" GM_PROVISIONAL_WORDS="$query" "$bin" provisional::tests::time \
    --ignored --nocapture 2>&1 | grep '^"' || true)
  echo "$query: rg -F -c ${rg_ms} ms | provisional: ${line#*: }"
done

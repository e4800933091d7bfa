#!/usr/bin/env bash
# Every side-by-side comparison, in one run: builds gm in release mode, installs the peers from
# the package registries into a scratch folder, and prints each table with its ratios.
#
#   1. tools/call (stat_file) vs the echo floor and the Node reference filesystem server;
#      run_code vs `node -e`; run_shell vs `bash -c`; spawn time and idle RSS — unpinned and
#      pinned to one core (taskset -c 0); what gm adds to a child MCP server's tool call
#      (server-everything's echo and mcp-test-server's, direct and as gm.<server>_echo).
#   2. grep vs ripgrep and git grep, search and callers/impact (bench/search.sh: the Linux
#      kernel source and the typescript package; needs root for apt-get).
#   3. git_status and git_log vs the git CLI (bench/git_bench.py).
#
#   bench/compare.sh                 # SCRATCH=dir reuses a scratch folder; SEQ/PAR size part 1
#   ONLY=1 bench/compare.sh          # just part 1 (no kernel download)
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="${SCRATCH:-$(mktemp -d)}"
export SCRATCH="$scratch"
echo "scratch: $scratch" >&2

cargo build --release -p gm -p gm-bench >&2

if [ ! -f "$scratch/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
  mkdir -p "$scratch/node"
  npm install --silent --no-audit --no-fund --prefix "$scratch/node" @modelcontextprotocol/server-filesystem \
    @modelcontextprotocol/server-everything@2026.8.31 >&2
fi
everything="$scratch/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
node_fs="$scratch/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

ws="$scratch/ws"
mkdir -p "$ws"
head -c 4096 /dev/urandom | base64 > "$ws/target.txt"

args=(suite --gm "$PWD/target/release/gm" --echo "$PWD/target/release/echo-server" --node-fs "$node_fs"
      --file "$ws/target.txt" --seq "${SEQ:-2000}" --par "${PAR:-5000}")
echo "machine: $(nproc) cores, $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "## 1. protocol, run_code, run_shell"
./target/release/mcp-bench "${args[@]}" --label unpinned
if command -v taskset >/dev/null; then
  taskset -c 0 ./target/release/mcp-bench "${args[@]}" --label "taskset -c 0"
fi
echo "## 1b. child MCP server calls: direct, and through gm"
cargo build --release -p gm --bin mcp-test-server >&2
for pin in "" "taskset -c 0"; do
  echo "### ${pin:-unpinned}"
  $pin ./target/release/mcp-bench child --gm "$PWD/target/release/gm" --dir "$scratch/child-everything" --n 2000 \
    -- node "$everything" stdio
  $pin ./target/release/mcp-bench child --gm "$PWD/target/release/gm" --dir "$scratch/child-test" --n 3000 \
    -- "$PWD/target/release/mcp-test-server"
done
[ -n "${ONLY:-}" ] && exit 0

echo "## 2. grep, search, callers"
bench/search.sh
echo "## 3. git"
python3 bench/git_bench.py --gm "$PWD/target/release/gm" --scratch "$scratch"

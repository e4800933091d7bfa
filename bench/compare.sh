#!/usr/bin/env bash
# Side-by-side benchmarks in one run: gm against the echo floor, the Node reference filesystem
# MCP server, and `node -e`. Builds gm in release mode, installs the Node server from npm into a
# scratch folder, runs the suite unpinned and pinned to one core (taskset -c 0).
#
#   bench/compare.sh            # full run
#   SEQ=500 PAR=1000 bench/compare.sh   # quicker
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="${SCRATCH:-$(mktemp -d)}"
echo "scratch: $scratch" >&2

cargo build --release -p gm -p gm-bench >&2

if [ ! -f "$scratch/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ]; then
  mkdir -p "$scratch/node"
  npm install --silent --no-audit --no-fund --prefix "$scratch/node" @modelcontextprotocol/server-filesystem >&2
fi
node_fs="$scratch/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

ws="$scratch/ws"
mkdir -p "$ws"
head -c 4096 /dev/urandom | base64 > "$ws/target.txt"

args=(suite --gm "$PWD/target/release/gm" --echo "$PWD/target/release/echo-server" --node-fs "$node_fs"
      --file "$ws/target.txt" --seq "${SEQ:-2000}" --par "${PAR:-5000}")
echo "machine: $(nproc) cores, $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
./target/release/mcp-bench "${args[@]}" --label unpinned
if command -v taskset >/dev/null; then
  taskset -c 0 ./target/release/mcp-bench "${args[@]}" --label "taskset -c 0"
fi

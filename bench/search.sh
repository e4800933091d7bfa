#!/usr/bin/env bash
# The search benchmarks on two real corpora from the package registries: the Linux kernel
# source (Debian's linux-source) for grep and search, and the typescript npm package for
# callers and impact. Each is committed into a scratch git repository (the kernel's top-level
# .gitignore ignores everything, so its lines are dropped first). Needs root for apt-get.
#
#   bench/search.sh                      # SCRATCH=dir to reuse a scratch folder
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="${SCRATCH:-$(mktemp -d)}"
echo "scratch: $scratch" >&2
cargo build --release -p gm >&2
command -v rg >/dev/null && ls /usr/src/linux-source-*.tar.xz >/dev/null 2>&1 || {
  apt-get update -q >&2
  apt-get install -y -q linux-source ripgrep >&2
}
kernel="$scratch/linux"
if [ ! -d "$kernel/.git" ]; then
  mkdir -p "$kernel"
  tar -xJf /usr/src/linux-source-*.tar.xz -C "$kernel" --strip-components=1
  : > "$kernel/.gitignore"
  (cd "$kernel" && git init -q && git add -A && git -c user.name=b -c user.email=b@example.invalid commit -q -m kernel)
fi
# typescript@5: from 7.0 on the npm package is a launcher for a native compiler, with no JS sources.
ts="$scratch/typescript"
if [ ! -d "$ts/.git" ]; then
  mkdir -p "$ts"
  npm install --silent --no-audit --no-fund --prefix "$scratch/npm" typescript@5 >&2
  cp -r "$scratch/npm/node_modules/typescript/lib" "$ts/lib"
  (cd "$ts" && git init -q && git add -A && git -c user.name=b -c user.email=b@example.invalid commit -q -m ts)
fi
echo "machine: $(nproc) cores, $(uname -srm)"
python3 bench/search_bench.py --gm "$PWD/target/release/gm" --kernel "$kernel" --ts "$ts"

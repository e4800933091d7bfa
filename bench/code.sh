#!/usr/bin/env bash
# callers, impact and symbols on three corpora from the package registries, side by side with
# ripgrep (and jedi for Python): the Linux kernel source (Debian's linux-source, C), CPython's
# standard library (the machine's Python install), and the Rust crates in cargo's registry
# cache. Each is committed into a scratch git repository. Needs root for apt-get.
#
#   bench/code.sh                      # SCRATCH=dir to reuse a scratch folder
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="${SCRATCH:-$(mktemp -d)}"
echo "scratch: $scratch" >&2
cargo build --release -p gm >&2
commit() { (cd "$1" && git init -q && git add -A && git -c user.name=b -c user.email=b@example.invalid commit -q -m corpus); }
command -v rg >/dev/null && ls /usr/src/linux-source-*.tar.xz >/dev/null 2>&1 || {
  apt-get update -q >&2
  apt-get install -y -q linux-source ripgrep >&2
}
kernel="$scratch/linux"
if [ ! -d "$kernel/.git" ]; then
  mkdir -p "$kernel"
  tar -xJf /usr/src/linux-source-*.tar.xz -C "$kernel" --strip-components=1
  : > "$kernel/.gitignore"
  commit "$kernel"
fi
cpython="$scratch/cpython"
if [ ! -d "$cpython/.git" ]; then
  stdlib="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
  mkdir -p "$cpython/Lib"
  (cd "$stdlib" && find . -path ./site-packages -prune -o -name __pycache__ -prune -o -name '*.py' -type f -print0 \
    | cpio -0 -pdm --quiet "$cpython/Lib")
  commit "$cpython"
fi
crates="$scratch/crates"
if [ ! -d "$crates/.git" ]; then
  mkdir -p "$crates"
  (cd "$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ | head -1)" && find . -name '*.rs' -size -2M -print0 \
    | cpio -0 -pdm --quiet "$crates")
  commit "$crates"
fi
[ -x "$scratch/venv/bin/python" ] || { python3 -m venv "$scratch/venv" && "$scratch/venv/bin/pip" install -q jedi \
  "tree-sitter==0.25.*" "tree-sitter-c==0.24.*" "tree-sitter-python==0.25.*" "tree-sitter-rust==0.24.*"; }
echo "machine: $(nproc) cores, $(uname -srm); $(rg --version | head -1); jedi $("$scratch/venv/bin/python" -c 'import jedi; print(jedi.__version__)')"
# The floor: tree-sitter's own parse speed on the same sources, one core.
for spec in "c $kernel/drivers" "python $cpython" "rust $crates"; do
  set -- $spec
  "$scratch/venv/bin/python" bench/tree_sitter_floor.py "$1" "$2" 50
done
python3 bench/code_bench.py --gm "$PWD/target/release/gm" --jedi "$scratch/venv/bin/python" \
  --corpus "kernel=$kernel" --corpus "cpython=$cpython" --corpus "crates=$crates"

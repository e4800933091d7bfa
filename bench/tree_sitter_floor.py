#!/usr/bin/env python3
"""The floor under gm's cold parse: how fast tree-sitter itself parses a corpus on one core,
and how long one query pass over the trees takes, through the py-tree-sitter bindings (the
same C library gm links).

    python tree_sitter_floor.py c DIR [MAX_MB]    # also: python, rust

Needs `pip install tree-sitter tree-sitter-c tree-sitter-python tree-sitter-rust` (bench/code.sh
installs them into its venv). Prints MB per CPU second for the parse alone, for a pass of a
one-pattern query, and for the pass of gm's own query for that language (read from the
source file in src/search/calls/lang/).
"""
import glob
import importlib
import os
import re
import sys
import time

import tree_sitter as ts

GRAMMARS = {
    "c": ("tree_sitter_c", ["*.c", "*.h"], "c.rs", "(call_expression function: (identifier) @name) @reference.call"),
    "python": ("tree_sitter_python", ["*.py"], "python.rs", "(call function: (identifier) @name) @reference.call"),
    "rust": ("tree_sitter_rust", ["*.rs"], "rust.rs", "(call_expression function: (identifier) @name) @reference.call"),
}


def gm_query(file):
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "src", "search", "calls", "lang", file)).read()
    # The queries are the raw strings of the language's module.
    return "\n".join(re.findall(r'r#"(.*?)"#', text, re.S))


def main():
    lang, root = sys.argv[1], sys.argv[2]
    max_mb = float(sys.argv[3]) if len(sys.argv) > 3 else 50.0
    module, globs, source, one = GRAMMARS[lang]
    language = ts.Language(importlib.import_module(module).language())
    files = sorted(f for g in globs for f in glob.glob(os.path.join(root, "**", g), recursive=True))
    sources, total = [], 0
    for f in files:
        data = open(f, "rb").read()
        sources.append(data)
        total += len(data)
        if total > max_mb * 1e6:
            break
    mb = total / 1e6
    parser = ts.Parser(language)
    t = time.process_time()
    trees = [parser.parse(s) for s in sources]
    parse = time.process_time() - t
    print(f"{lang}: {len(sources)} files, {mb:.1f} MB")
    print(f"| tree-sitter parse alone | {mb / parse:.1f} MB per CPU s |")
    for name, text in [("one-pattern query pass", one), ("gm's query pass", gm_query(source))]:
        query = ts.Query(language, text)
        t = time.process_time()
        for tree in trees:
            ts.QueryCursor(query).matches(tree.root_node)
        spent = time.process_time() - t
        print(f"| {name} | {mb / spent:.1f} MB per CPU s |")
    print(f"| parse + gm's query, the floor of gm's cold parse | {mb / (parse + spent):.1f} MB per CPU s |")


if __name__ == "__main__":
    sys.exit(main())

//! Precision in mixed repositories: an import path names files of the importer's own
//! language only (a Go import is not a Python module of the same name), a Go import inside the
//! module resolves by `go.mod`'s module path, C++ namespace aliases, using-declarations and
//! using-directives reach their namespace — and a restarted gm answers exactly as before.
//! The real binary, through a run_code body.

mod common;

use std::path::Path;

use common::{git, write, Gm};
use serde_json::Value;

/// `path:line enclosing` per call site of `symbol`, and how many were excluded.
fn callers(gm: &mut Gm, symbol: &str) -> (Vec<String>, u64) {
    let r = gm.js(&format!("return await gm.callers({{ symbol: {} }})", serde_json::json!(symbol)));
    let sites = r["callers"]
        .as_array()
        .unwrap_or_else(|| panic!("callers: {r}"))
        .iter()
        .map(|c| {
            format!("{}:{} {}", c["path"].as_str().unwrap_or(""), c["line"], c["enclosing"].as_str().unwrap_or(""))
        })
        .collect();
    (sites, r["excluded"].as_u64().unwrap_or(0))
}

fn repo(files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    git(&root, &["init", "-q"]);
    for (rel, text) in files {
        write(&root, rel, text);
    }
    git(&root, &["add", "."]);
    (dir, root)
}

fn serve(root: &Path) -> Gm {
    let mut gm = Gm::start_in(root, &[], &[]);
    gm.ready();
    gm
}

const GO_BESIDE_PYTHON: &[(&str, &str)] = &[
    ("go.mod", "module example.com/app\n\ngo 1.21\n"),
    ("config/config.go", "package config\n\nfunc ParseConfig(s string) int { return len(s) }\n\nfunc Load() int { return ParseConfig(\"a\") + ParseConfig(\"b\") }\n"),
    (
        "main.go",
        "package main\n\nimport (\n\tcfg \"example.com/app/config\"\n\ttcfg \"example.com/app/tools/app/config\"\n)\n\nfunc main() {\n\tcfg.ParseConfig(\"x\")\n\t_ = cfg.ParseConfig(\"y\")\n}\n\nfunc right() { tcfg.Only() }\n\nfunc wrong() { cfg.Only() }\n",
    ),
    // A file of another language whose path ends like the Go import path.
    ("app/config.py", "def ParseConfig(s):\n    return s\n\ndef use():\n    return ParseConfig('z')\n"),
    // Another Go package named config, whose directory also ends in the import's tail.
    ("tools/app/config/config.go", "package config\n\nfunc Only() {}\n"),
];

#[test]
fn a_go_import_goes_by_go_mod_whatever_other_languages_share_the_tree() {
    let (_dir, root) = repo(GO_BESIDE_PYTHON);
    let mut gm = serve(&root);
    let (sites, _) = callers(&mut gm, "config.ParseConfig");
    for site in ["config/config.go:5 Load", "main.go:9 main", "main.go:10 main"] {
        assert!(sites.iter().any(|s| s == site), "{site} missing from {sites:?}");
    }
    // `cfg` is example.com/app/config, the directory config/ by go.mod, not tools/app/config
    // (whose path also ends in app/config) nor app/config.py.
    let (sites, excluded) = callers(&mut gm, "Only");
    assert_eq!(sites, ["main.go:13 right"], "only the call through tcfg: {sites:?}");
    assert_eq!(excluded, 1, "cfg.Only() names a package without Only");
    common::shut_down(gm);
}

#[test]
fn the_callers_cache_after_a_restart_answers_exactly_as_before_in_a_mixed_repository() {
    let (_dir, root) = repo(GO_BESIDE_PYTHON);
    let mut gm = serve(&root);
    let before: Vec<(Vec<String>, u64)> =
        ["config.ParseConfig", "ParseConfig", "use", "Load"].iter().map(|s| callers(&mut gm, s)).collect();
    common::shut_down(gm);
    common::stop_worker(&root);
    let mut gm = serve(&root);
    let after: Vec<(Vec<String>, u64)> =
        ["config.ParseConfig", "ParseConfig", "use", "Load"].iter().map(|s| callers(&mut gm, s)).collect();
    assert_eq!(before, after, "a restarted gm (its callers cache read back) answers the same");
    assert!(before[0].0.len() >= 4, "{before:?}");
    common::shut_down(gm);
}

#[test]
fn cpp_namespace_aliases_using_declarations_and_directives_reach_their_namespace() {
    let (_dir, root) = repo(&[
        ("cfg.hpp", "namespace cfg {\nint parse_config(const char* s);\n}\n"),
        ("cfg.cpp", "#include \"cfg.hpp\"\nnamespace cfg {\nint parse_config(const char* s) { return 1; }\nint reload() { return parse_config(\"again\"); }\n}\n"),
        (
            "main.cpp",
            "#include \"cfg.hpp\"\nnamespace c = cfg;\nint direct() { return cfg::parse_config(\"a\"); }\nint aliased() { return c::parse_config(\"b\"); }\nint declared() {\n    using cfg::parse_config;\n    return parse_config(\"c\");\n}\nint directive() {\n    using namespace cfg;\n    return parse_config(\"d\");\n}\nnamespace other { int parse_config(const char*) { return 0; } }\nint unrelated() { return other::parse_config(\"e\"); }\n",
        ),
    ]);
    let mut gm = serve(&root);
    let (sites, excluded) = callers(&mut gm, "cfg::parse_config");
    assert_eq!(
        sites,
        ["cfg.cpp:4 reload", "main.cpp:3 direct", "main.cpp:4 aliased", "main.cpp:7 declared", "main.cpp:11 directive"],
        "every form, and not other::parse_config"
    );
    assert_eq!(excluded, 1, "other::parse_config is excluded: {sites:?}");
    let r: Value = gm.js("return await gm.callers({ symbol: 'other::parse_config' })");
    assert_eq!(r["callers"].as_array().map(Vec::len), Some(1), "{r}");
    common::shut_down(gm);
}

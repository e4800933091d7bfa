//! The `symbols` verb, the languages' shared parse cache across restarts and outside edits,
//! and the code verbs inside run_code bodies: the real binary over MCP.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{git, Gm};
use serde_json::{json, Value};

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A workspace in several languages, committed to git.
fn polyglot() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = &dir.path().canonicalize().expect("canonical");
    write(
        d,
        "users/service.py",
        "class UserService:\n    def get_user_name(self, uid):\n        return lookup(uid)\n\n\ndef lookup(uid):\n    return str(uid)\n",
    );
    write(
        d,
        "users/src/lib.rs",
        "pub struct UserCache;\n\nimpl UserCache {\n    pub fn user_name(&self) -> String {\n        lookup()\n    }\n}\n\npub fn lookup() -> String {\n    String::new()\n}\n",
    );
    write(d, "web/users.go", "package web\n\nfunc GetUserName(id int) string {\n\treturn Lookup(id)\n}\n\nfunc Lookup(id int) string { return \"\" }\n");
    write(
        d,
        "web/App.java",
        "class App {\n    String getUserNameOf(int id) { return \"\"; }\n    void main() { getUserNameOf(1); }\n}\n",
    );
    git(d, &["init", "-q"]);
    git(d, &["add", "."]);
    dir
}

fn serve(dir: &Path, args: &[&str]) -> Gm {
    Gm::ready_in(dir, args)
}

/// `kind owner.name path:line match` per symbol.
fn found(r: &Value) -> Vec<String> {
    r["symbols"]
        .as_array()
        .expect("symbols")
        .iter()
        .map(|x| {
            let owner = x["owner"].as_str().map(|o| format!("{o}.")).unwrap_or_default();
            format!(
                "{} {}{} {}:{} {}",
                x["kind"].as_str().unwrap_or(""),
                owner,
                x["name"].as_str().unwrap_or(""),
                x["path"].as_str().unwrap_or(""),
                x["line"],
                x["match"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn symbols_finds_definitions_by_exact_name_prefix_and_identifier_parts_across_languages() {
    let dir = polyglot();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let r = gm.call_ok("symbols", json!({ "query": "lookup" }));
    assert_eq!(
        found(&r),
        [
            "function lookup users/service.py:6 exact",
            "function lookup users/src/lib.rs:9 exact",
            "function Lookup web/users.go:7 exact"
        ],
        "exact before its other case, then by path: {r}"
    );
    let r = gm.call_ok("symbols", json!({ "query": "user name" }));
    assert_eq!(
        found(&r),
        [
            "method UserService.get_user_name users/service.py:2 parts",
            "method UserCache.user_name users/src/lib.rs:4 parts",
            "method App.getUserNameOf web/App.java:2 parts",
            "function GetUserName web/users.go:3 parts",
        ],
        "by the words search splits identifiers into: {r}"
    );
    let r = gm.call_ok("symbols", json!({ "query": "User" }));
    assert_eq!(
        found(&r),
        [
            "class UserService users/service.py:1 prefix",
            "struct UserCache users/src/lib.rs:1 prefix",
            "impl UserCache users/src/lib.rs:3 prefix",
            "method UserCache.user_name users/src/lib.rs:4 prefix",
            "method UserService.get_user_name users/service.py:2 parts",
            "method App.getUserNameOf web/App.java:2 parts",
            "function GetUserName web/users.go:3 parts",
        ],
        "the query's case first (types first, then by path), then any case, then by words: {r}"
    );
    assert_eq!(r["symbols"][1]["signature"], "pub struct UserCache;");
    assert_eq!((r["symbols"][0]["line"].as_u64(), r["symbols"][0]["endLine"].as_u64()), (Some(1), Some(3)));
    let r = gm.call_ok("symbols", json!({ "query": "user name", "kind": "function", "under": "web" }));
    assert_eq!(found(&r), ["function GetUserName web/users.go:3 parts"], "{r}");
    let r = gm.call_ok("symbols", json!({ "query": "UserCache.user_name" }));
    assert_eq!(found(&r), ["method UserCache.user_name users/src/lib.rs:4 exact"], "{r}");

    let first = gm.call_ok("symbols", json!({ "query": "user name", "limit": 3 }));
    assert_eq!((first["total"].as_u64(), first["next"].as_u64()), (Some(4), Some(3)), "{first}");
    let rest = gm.call_ok("symbols", json!({ "query": "user name", "limit": 3, "offset": 3 }));
    assert_eq!(found(&rest), ["function GetUserName web/users.go:3 parts"], "{rest}");
    assert!(rest.get("next").is_none(), "{rest}");
}

#[test]
fn symbols_outlines_a_file_in_pages_keeping_the_nesting() {
    let dir = polyglot();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let r = gm.call_ok("symbols", json!({ "path": "users/src/lib.rs" }));
    // The name every other file verb uses and the older `file` give the same outline, also
    // from a run_code body.
    assert_eq!(gm.call_ok("symbols", json!({ "file": "users/src/lib.rs" })), r);
    let mut code = serve(dir.path(), &[]);
    code.read_skill();
    let body = code.call_ok("run_code", json!({ "code": "return await gm.symbols({ path: 'users/src/lib.rs' })" }));
    assert_eq!(body["result"], r, "{body}");
    assert_eq!(
        r["symbols"],
        json!([
            { "name": "UserCache", "kind": "struct", "line": 1, "endLine": 1, "signature": "pub struct UserCache;" },
            { "name": "UserCache", "kind": "impl", "line": 3, "endLine": 7, "signature": "impl UserCache {", "children": [
                { "name": "user_name", "kind": "method", "line": 4, "endLine": 6, "signature": "pub fn user_name(&self) -> String {" }
            ] },
            { "name": "lookup", "kind": "function", "line": 9, "endLine": 11, "signature": "pub fn lookup() -> String {" }
        ]),
        "{r}"
    );
    let page = gm.call_ok("symbols", json!({ "file": "users/src/lib.rs", "offset": 2, "limit": 1 }));
    assert_eq!(
        page["symbols"],
        json!([{ "name": "user_name", "kind": "method", "line": 4, "endLine": 6, "signature": "pub fn user_name(&self) -> String {", "within": "UserCache" }]),
        "a method whose impl is on an earlier page says where it is: {page}"
    );
    assert_eq!((page["total"].as_u64(), page["next"].as_u64()), (Some(4), Some(3)));
}

#[test]
fn symbols_refuses_bad_arguments_with_a_clear_error_and_writes_nothing() {
    let dir = polyglot();
    let d = dir.path();
    write(d, "notes.md", "# notes\n");
    write(d, "blob.py", "");
    std::fs::write(d.join("blob.py"), [0xff, 0xfe, 0x00, 0x41]).expect("write");
    let mut gm = serve(d, &["--surface", "tools"]);
    for (args, code, says) in [
        (json!({}), "invalid_args", "give path"),
        (json!({ "file": "web/users.go", "query": "x" }), "invalid_args", "not both"),
        (json!({ "path": "web/users.go", "query": "x" }), "invalid_args", "under narrows"),
        (json!({ "path": "web/users.go", "file": "users/src/lib.rs" }), "invalid_args", "give one"),
        (json!({ "query": "  " }), "invalid_args", "empty"),
        (json!({ "query": "x", "kind": "widget" }), "invalid_args", "kind 'widget'"),
        (json!({ "file": "web/users.go", "kind": "function" }), "invalid_args", "narrow a query"),
        (json!({ "file": "../outside.py" }), "invalid_args", "outside the workspace"),
        (json!({ "file": "nope.py" }), "not_found", "nope.py"),
        (json!({ "file": "web" }), "is_a_directory", "web"),
        (json!({ "file": "notes.md" }), "invalid_args", "not in a language gm reads"),
        (json!({ "file": "blob.py" }), "not_text", "blob.py"),
        (json!({ "query": "x", "limit": 0 }), "invalid_args", "limit"),
    ] {
        let e = gm.call_err("symbols", args.clone());
        assert_eq!(e["code"], code, "{args}: {e}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(says)), "{args}: {e}");
    }
    assert!(!d.join(".gm/calls").exists(), "a refused call reads nothing and saves nothing");
}

/// The cache is written off the reply's path: waits until it is there.
fn wait_for_cache(dir: &Path) {
    let file = dir.join(".gm/calls/cache.bin");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no call-site cache at {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut gm: Gm) {
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(10)).expect("gm exits");
}

#[test]
fn every_language_s_parse_results_are_reused_after_a_restart_and_refreshed_after_outside_edits() {
    let dir = polyglot();
    let d = dir.path();
    let mut gm = serve(d, &["--surface", "tools"]);
    let r = gm.call_ok("callers", json!({ "symbol": "lookup" }));
    assert_eq!((r["filesParsed"].as_u64(), r["filesScanned"].as_u64()), (Some(4), Some(4)), "{r}");
    // Edited outside gm while it runs: the watcher says which file to parse again.
    write(
        d,
        "users/src/lib.rs",
        "pub struct UserCache;\n\nimpl UserCache {\n    pub fn user_name(&self) -> String {\n        lookup()\n    }\n}\n\npub fn lookup() -> String {\n    String::new()\n}\n\npub fn again() -> String {\n    lookup()\n}\n",
    );
    let r = gm.call_ok("callers", json!({ "symbol": "lookup", "path": "users/src" }));
    assert_eq!(r["filesParsed"], 1, "{r}");
    let lines: Vec<u64> = r["callers"].as_array().expect("callers").iter().filter_map(|c| c["line"].as_u64()).collect();
    assert_eq!(lines, [5, 14], "{r}");
    wait_for_cache(d);
    stop(gm);

    let mut gm = serve(d, &["--surface", "tools"]);
    let r = gm.call_ok("symbols", json!({ "query": "again" }));
    assert_eq!((r["filesParsed"].as_u64(), r["total"].as_u64()), (Some(0), Some(1)), "from the saved cache: {r}");
    stop(gm);

    // Edited while no gm runs: the next one parses that file only.
    write(d, "web/users.go", "package web\n\nfunc GetUserName(id int) string {\n\treturn Lookup(id) + Lookup(id)\n}\n\nfunc Lookup(id int) string { return \"\" }\n");
    let mut gm = serve(d, &["--surface", "tools"]);
    let r = gm.call_ok("callers", json!({ "symbol": "Lookup", "path": "web" }));
    assert_eq!((r["filesParsed"].as_u64(), r["total"].as_u64()), (Some(1), Some(2)), "{r}");
}

#[test]
fn the_code_verbs_answer_inside_a_run_code_body() {
    let dir = polyglot();
    let mut gm = serve(dir.path(), &[]);
    gm.read_skill();
    let r = gm.js("const outline = await gm.symbols({ file: 'users/service.py' });\n\
         const found = await gm.symbols({ query: 'getUserName' });\n\
         const callers = await gm.callers({ symbol: 'UserService.get_user_name' });\n\
         const lookups = await gm.callers({ symbol: 'lookup', path: 'users/service.py' });\n\
         const impact = await gm.impact({ symbol: 'lookup', depth: 1 });\n\
         const bad = await gm.try(() => gm.symbols({ file: 'nope.rs' }));\n\
         return {\n\
           outline: outline.symbols.map(s => [s.kind, s.name, (s.children || []).map(c => c.name)]),\n\
           found: found.symbols.map(s => s.path),\n\
           callers: callers.total,\n\
           lookups: lookups.callers.map(c => [c.line, c.enclosing, c.enclosingType, c.resolution]),\n\
           edges: impact.edges.map(e => e.from + ' -> ' + e.to),\n\
           bad: bad.error.code,\n\
         };");
    assert_eq!(
        r,
        json!({
            "outline": [["class", "UserService", ["get_user_name"]], ["function", "lookup", []]],
            "found": ["web/users.go", "web/App.java", "users/service.py"],
            "callers": 0,
            "lookups": [[3, "get_user_name", "UserService", "exact"]],
            "edges": ["UserService.get_user_name -> lookup", "UserCache.user_name -> lookup"],
            "bad": "not_found",
        })
    );
}

#[test]
fn a_query_over_many_names_in_a_run_code_body_finds_every_match_once() {
    // More names than one batch of the parallel match, spread over every shard, through the
    // default surface.
    let dir = tempfile::tempdir().expect("tempdir");
    let src: String =
        (0..500).map(|i| format!("def item_{i}():\n    pass\n\ndef other_{i}_thing():\n    pass\n\n")).collect();
    write(dir.path(), "lib/many.py", &src);
    let mut gm = Gm::start_in(dir.path(), &[], &[]);
    gm.ready();
    let r = gm.js("const p = await gm.symbols({ query: 'item_4', limit: 1000 });
         const w = await gm.symbols({ query: 'thing other', limit: 1000 });
         return { prefix: p.symbols.map(s => s.name + ' ' + s.match), parts: w.total,
                  partNames: new Set(w.symbols.map(s => s.name)).size };");
    let prefix: Vec<&str> = r["prefix"].as_array().expect("prefix").iter().filter_map(Value::as_str).collect();
    // item_4 itself, then item_40..49 and item_400..499 by prefix, then every other item_ by
    // its word `item` (the number is no word); each once.
    assert_eq!(prefix.len(), 500, "{r}");
    assert_eq!(prefix[0], "item_4 exact", "{r}");
    assert!(prefix[1..111].iter().all(|s| s.ends_with(" prefix")), "{r}");
    assert!(prefix[111..].iter().all(|s| s.ends_with(" parts")), "{r}");
    let distinct: std::collections::BTreeSet<&str> = prefix.iter().copied().collect();
    assert_eq!(distinct.len(), 500, "{r}");
    assert_eq!((r["parts"].as_u64(), r["partNames"].as_u64()), (Some(500), Some(500)), "{r}");
}

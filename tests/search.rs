//! grep, search and the wiki on real git repositories made in the test.

mod common;

use std::path::Path;
use std::process::Command;

use common::Gm;
use serde_json::{json, Value};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn write(dir: &Path, rel: &str, text: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// gm serving the tools surface in `dir`, initialized.
fn serve(dir: &Path) -> Gm {
    let mut gm = Gm::start_in(dir, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm
}

/// Stops `gm` and its worker (the host leaves, the worker is stopped), lets `between` change
/// the workspace, starts a new one.
fn restart(gm: Gm, dir: &Path, between: impl FnOnce(&Path)) -> Gm {
    common::shut_down(gm);
    between(dir);
    serve(dir)
}

/// A repository whose files `fill` writes, all committed, with gm serving the tools surface.
fn committed_repo(fill: impl FnOnce(&Path)) -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q"]);
    fill(d);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "init"]);
    let gm = serve(d);
    (dir, gm)
}

/// A repository with tracked, untracked, ignored and binary files.
fn repo() -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, ".gitignore", b"ignored.txt\n");
    write(d, "src/user.ts", b"export function getUserName(id) {\n  return lookupUser(id).name;\n}\n");
    write(d, "src/main.rs", b"fn main() {\n    let max_line_bytes = 3;\n    println!(\"needle\");\n}\n");
    write(d, "docs/guide.md", b"# Guide\nThe needle is here.\nNEEDLE shouting.\nneedles plural.\n");
    write(d, "data.bin", b"needle\0\x01\x02binary");
    write(d, "untracked.txt", b"needle untracked\n");
    write(d, "ignored.txt", b"needle ignored\n");
    git(d, &["add", ".gitignore", "src", "docs", "data.bin"]);
    git(d, &["commit", "-q", "-m", "init"]);
    let gm = serve(d);
    (dir, gm)
}

fn paths(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .expect("list")
        .iter()
        .map(|h| format!("{}:{}", h["path"].as_str().unwrap_or(""), h["line"]))
        .collect()
}

#[test]
fn grep_covers_tracked_text_files_only_and_counts_binary_skips() {
    let (_dir, mut gm) = repo();
    let r = gm.call_ok("grep", json!({ "pattern": "needle" }));
    assert_eq!(paths(&r, "matches"), ["docs/guide.md:2", "docs/guide.md:4", "src/main.rs:3"]);
    assert_eq!(r["binarySkipped"], 1);
    assert_eq!(r["total"], 3);
    assert_eq!(r["leftOut"], 0);
    let r = gm.call_ok("grep", json!({ "pattern": "needle", "mode": "word", "ignoreCase": true }));
    assert_eq!(paths(&r, "matches"), ["docs/guide.md:2", "docs/guide.md:3", "src/main.rs:3"]);
    let r = gm.call_ok("grep", json!({ "pattern": "get\\w+Name", "mode": "regex", "context": 1 }));
    assert_eq!(r["matches"][0]["path"], "src/user.ts");
    assert_eq!(r["matches"][0]["after"], json!(["  return lookupUser(id).name;"]));
    let r = gm.call_ok("grep", json!({ "pattern": "e", "limit": 2 }));
    assert_eq!(r["matches"].as_array().expect("list").len(), 2);
    assert_eq!(r["leftOut"].as_u64().expect("n") + 2, r["total"].as_u64().expect("n"));
    let r = gm.call_ok("grep", json!({ "pattern": "needle", "glob": "**/*.rs" }));
    assert_eq!(paths(&r, "matches"), ["src/main.rs:3"]);
    let r = gm.call_ok("grep", json!({ "pattern": "needle", "path": "docs" }));
    assert_eq!(r["filesSearched"], 1);
}

#[test]
fn grep_over_many_files_returns_the_first_matches_in_file_and_line_order_with_context() {
    // Uneven sizes, so that the threads finish files at different times.
    let (_dir, mut gm) = committed_repo(|d| {
        for i in 0..300 {
            let filler = "filler line\n".repeat(if i % 7 == 0 { 2000 } else { 3 });
            write(d, &format!("f{i:03}.txt"), format!("before\nmark {i} a\n{filler}mark {i} b\nafter\n").as_bytes());
        }
    });
    let r = gm.call_ok("grep", json!({ "pattern": "mark", "limit": 101, "context": 1 }));
    assert_eq!((r["total"].as_u64(), r["leftOut"].as_u64()), (Some(600), Some(499)), "{r}");
    let matches = r["matches"].as_array().expect("matches");
    let expected: Vec<String> = (0..51)
        .flat_map(|i| [format!("f{i:03}.txt:2"), format!("f{i:03}.txt:{}", if i % 7 == 0 { 2003 } else { 6 })])
        .take(101)
        .collect();
    assert_eq!(paths(&r, "matches"), expected);
    assert_eq!(matches[0]["before"], json!(["before"]));
    assert_eq!(matches[1]["after"], json!(["after"]));
    assert_eq!(matches[0]["text"], "mark 0 a");
}

#[test]
fn bad_grep_and_search_input_is_refused() {
    let (_dir, mut gm) = repo();
    let e = gm.call_err("grep", json!({ "pattern": "(", "mode": "regex" }));
    assert_eq!(e["code"], "invalid_args");
    assert!(e["message"].as_str().expect("message").contains("invalid pattern"));
    assert_eq!(gm.call_err("grep", json!({ "pattern": "" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("grep", json!({ "pattern": "x", "path": "/etc" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("grep", json!({ "pattern": "x", "path": "../x" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("grep", json!({ "pattern": "x", "mode": "fuzzy" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("grep", json!({ "pattern": "x", "glob": "a{" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("search", json!({ "query": "  " }))["code"], "invalid_args");
    assert_eq!(gm.call_err("search", json!({ "query": "x", "path": "/abs" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("search", json!({ "query": "x", "limit": 0 }))["code"], "invalid_args");
}

#[test]
fn search_ranks_lines_and_splits_identifiers() {
    let (_dir, mut gm) = repo();
    let r = gm.call_ok("search", json!({ "query": "user name" }));
    let mut top: Vec<String> = paths(&r, "hits").into_iter().take(2).collect();
    top.sort();
    assert_eq!(top, ["src/user.ts:1", "src/user.ts:2"], "getUserName and lookupUser(id).name both match by parts");
    assert!(r["refreshed"]["indexed"].as_u64().expect("n") >= 3, "{r}");
    let r = gm.call_ok("search", json!({ "query": "line bytes" }));
    assert_eq!(paths(&r, "hits")[0], "src/main.rs:2");
    assert_eq!(r["hits"][0]["before"], "fn main() {");
    let r = gm.call_ok("search", json!({ "query": "needle" }));
    let found = paths(&r, "hits");
    assert!(
        found.iter().all(|p| !p.starts_with("untracked") && !p.starts_with("ignored") && !p.starts_with("data.bin")),
        "{found:?}"
    );
    let r = gm.call_ok("search", json!({ "query": "needle", "path": "src" }));
    assert_eq!(paths(&r, "hits"), ["src/main.rs:3"]);
}

#[test]
fn a_whole_identifier_pasted_as_the_query_finds_its_line_with_the_line_text() {
    // Regression: a query word that splits into parts (getUserName, max_line_bytes) was parsed
    // as a phrase the index cannot answer, and found nothing; and hits came with an empty text.
    let (_dir, mut gm) = repo();
    let r = gm.call_ok("search", json!({ "query": "getUserName" }));
    assert_eq!(paths(&r, "hits")[0], "src/user.ts:1", "{r}");
    assert_eq!(r["hits"][0]["text"], "export function getUserName(id) {");
    assert_eq!(r["hits"][0]["after"], "  return lookupUser(id).name;");
    let r = gm.call_ok("search", json!({ "query": "max_line_bytes" }));
    assert_eq!(paths(&r, "hits")[0], "src/main.rs:2", "{r}");
    assert_eq!(r["hits"][0]["text"], "    let max_line_bytes = 3;");
    let r = gm.call_ok("search", json!({ "query": "println!(\"needle\");" }));
    assert_eq!(paths(&r, "hits")[0], "src/main.rs:3", "query syntax is not interpreted: {r}");
}

#[test]
fn a_query_without_a_searchable_word_is_refused_with_the_reason() {
    let (_dir, mut gm) = repo();
    for query in ["()", "x = 1;", "{ }"] {
        let e = gm.call_err("search", json!({ "query": query }));
        assert_eq!(e["code"], "invalid_args", "{query}: {e}");
        assert!(e["message"].as_str().unwrap_or("").contains("grep"), "{e}");
    }
    assert_eq!(gm.call_err("wiki_search", json!({ "query": "--" }))["code"], "invalid_args");
}

#[test]
fn a_path_filter_fills_the_page_however_many_better_lines_are_elsewhere() {
    // 60 files outside the prefix whose lines match better (the word twice, short lines) than
    // the three lines under it.
    let (_dir, mut gm) = committed_repo(|d| {
        for i in 0..60 {
            write(d, &format!("other/f{i}.txt"), b"zebra zebra\n");
        }
        write(d, "inside/a.txt", b"one line with a zebra among many other words here\n");
        write(
            d,
            "inside/b.txt",
            b"two\nanother zebra line with quite a few words in it\nthird zebra line, long as well\n",
        );
    });
    let r = gm.call_ok("search", json!({ "query": "zebra", "limit": 3 }));
    assert!(paths(&r, "hits").iter().all(|p| p.starts_with("other/")), "{r}");
    let r = gm.call_ok("search", json!({ "query": "zebra", "limit": 3, "path": "inside" }));
    let mut found = paths(&r, "hits");
    found.sort();
    assert_eq!(found, ["inside/a.txt:1", "inside/b.txt:2", "inside/b.txt:3"]);
    let r = gm.call_ok("search", json!({ "query": "zebra", "path": "nowhere" }));
    assert_eq!(r["hits"], json!([]));
}

#[test]
fn the_index_survives_a_restart_and_reindexes_only_what_changed_meanwhile() {
    let (dir, mut gm) = repo();
    gm.call_ok("search", json!({ "query": "needle" }));
    // Reindexed through gm: the saved manifest lags the index until the next scan that finds
    // a change, so the next start must reindex this file again rather than trust it.
    gm.call_ok("edit_file", json!({ "path": "src/main.rs", "old": "needle", "new": "walrusWord" }));
    assert_eq!(paths(&gm.call_ok("search", json!({ "query": "walrus" })), "hits"), ["src/main.rs:3"]);
    // Changed while gm was not running.
    let mut gm = restart(gm, dir.path(), |d| write(d, "docs/guide.md", b"# Guide\nThe pelican is here.\n"));
    let r = gm.call_ok("search", json!({ "query": "pelican" }));
    assert_eq!(paths(&r, "hits"), ["docs/guide.md:2"], "{r}");
    let indexed = r["refreshed"]["indexed"].as_u64().expect("indexed");
    assert!((1..=2).contains(&indexed), "only the changed files are reindexed: {r}");
    assert_eq!(paths(&gm.call_ok("search", json!({ "query": "walrus" })), "hits"), ["src/main.rs:3"]);
    assert_eq!(gm.call_ok("search", json!({ "query": "shouting" }))["hits"], json!([]), "old text is gone");
    assert_eq!(paths(&gm.call_ok("search", json!({ "query": "user name" })), "hits").len(), 2);
}

#[test]
fn an_index_with_unreadable_files_is_rebuilt_instead_of_failing_searches() {
    let (dir, mut gm) = repo();
    gm.call_ok("search", json!({ "query": "needle" }));
    let gm = restart(gm, dir.path(), |d| {
        let mut damaged = 0;
        for entry in std::fs::read_dir(d.join(".gm/index")).expect("index dir").flatten() {
            if entry.path().extension().is_some_and(|x| x == "term") {
                std::fs::write(entry.path(), b"not a term dictionary").expect("damage");
                damaged += 1;
            }
        }
        assert!(damaged > 0, "the index has term dictionaries");
    });
    assert_rebuilt_from_scratch(gm);
}

#[test]
fn an_index_written_by_an_earlier_format_is_rebuilt_on_the_next_start() {
    let (dir, mut gm) = repo();
    gm.call_ok("search", json!({ "query": "needle" }));
    let gm = restart(gm, dir.path(), |d| {
        let path = d.join(".gm/index/manifest.json");
        let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
        let format = manifest["format"].as_u64().expect("format number");
        manifest["format"] = json!(format - 1);
        std::fs::write(&path, manifest.to_string()).expect("write manifest");
    });
    assert_rebuilt_from_scratch(gm);
}

/// The first search of `gm`, started on the `repo()` workspace, reindexes every file and finds
/// the needle.
fn assert_rebuilt_from_scratch(mut gm: Gm) {
    let r = gm.call_ok("search", json!({ "query": "needle" }));
    assert!(paths(&r, "hits").iter().any(|p| p == "src/main.rs:3"), "{r}");
    assert!(r["refreshed"]["indexed"].as_u64().is_some_and(|n| n >= 3), "rebuilt from scratch: {r}");
}

#[test]
fn a_search_right_after_write_file_sees_the_new_text_and_a_git_mv_at_once() {
    let (dir, mut gm) = repo();
    gm.call_ok("search", json!({ "query": "needle" }));
    gm.call_ok("edit_file", json!({ "path": "src/main.rs", "old": "needle", "new": "haystackTerm" }));
    let r = gm.call_ok("search", json!({ "query": "haystack term" }));
    assert_eq!(paths(&r, "hits"), ["src/main.rs:3"]);
    let r = gm.call_ok("search", json!({ "query": "needle" }));
    assert!(paths(&r, "hits").iter().all(|p| p.starts_with("docs/")), "the old line is deleted: {r}");
    git(dir.path(), &["mv", "docs/guide.md", "docs/manual.md"]);
    let r = gm.call_ok("search", json!({ "query": "shouting" }));
    assert_eq!(paths(&r, "hits"), ["docs/manual.md:3"], "{r}");
    assert_eq!(r["fresh"], "watch");
}

#[test]
fn search_works_outside_a_git_repository_by_the_gitignore_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), ".gitignore", b"skip.txt\n");
    write(dir.path(), "keep.txt", b"findable words\n");
    write(dir.path(), "skip.txt", b"findable words\n");
    let mut gm = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    let r = gm.call_ok("grep", json!({ "pattern": "findable" }));
    assert_eq!(paths(&r, "matches"), ["keep.txt:1"]);
}

#[test]
fn wiki_pages_are_written_atomically_and_ranked() {
    let (dir, mut gm) = repo();
    let w = gm.call_ok(
        "wiki_write",
        json!({ "page": "design/cache", "text": "# Cache\nEntries are evicted least recently used first.\n" }),
    );
    assert_eq!(w["created"], true);
    gm.call_ok("wiki_write", json!({ "page": "log", "text": "# Log\nAppend only. The cache is not here.\n" }));
    assert!(dir.path().join(".gm/wiki/design/cache.md").is_file());
    let r = gm.call_ok("wiki_search", json!({ "query": "evicted entries" }));
    assert_eq!(r["pages"], 2);
    assert_eq!(r["hits"][0]["page"], "design/cache");
    assert_eq!(r["hits"][0]["line"], "Entries are evicted least recently used first.");
    assert_eq!(gm.call_err("wiki_write", json!({ "page": "../escape", "text": "x" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("wiki_search", json!({ "query": "" }))["code"], "invalid_args");
    assert_eq!(gm.events_of("wiki").len(), 2);
    // A symlink loop in the wiki (a page folder linked to its parent) does not hang the search.
    std::os::unix::fs::symlink(dir.path().join(".gm/wiki"), dir.path().join(".gm/wiki/design/loop")).expect("link");
    let r = gm.call_ok("wiki_search", json!({ "query": "evicted entries" }));
    assert_eq!(r["pages"], 2);
}

#[test]
fn run_code_reaches_the_search_verbs() {
    let (dir, tools) = repo();
    drop(tools);
    let mut gm = Gm::start_in(dir.path(), &[], &[]);
    gm.ready();
    let r = gm.js("const g = await gm.grep({ pattern: 'fn main' }); const s = await gm.search({ query: 'guide' }); return [g.total, s.hits[0].path];");
    assert_eq!(r, json!([1, "docs/guide.md"]));
}

/// A small TypeScript project with known call sites: a function, a method call, an arrow
/// function, an import alias and a re-export.
fn ts_project() -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(
        d,
        "src/db.ts",
        b"export function query(sql: string) {\n  return run(sql);\n}\nfunction run(s: string) { return s; }\n",
    );
    write(d, "src/index.ts", b"export { query as select } from './db';\n");
    write(
        d,
        "src/users.ts",
        b"import { select } from './index';\nimport { query } from './db';\n\nexport class Users {\n  find(id: number) {\n    return select(`id=${id}`);\n  }\n}\n\nexport const all = () => query('*');\n",
    );
    write(
        d,
        "src/app.tsx",
        b"import { Users } from './users';\nconst users = new Users();\nexport function App() {\n  return <div>{users.find(1)}</div>;\n}\nfunction boot() { return App(); }\n",
    );
    write(d, "src/other.js", b"function query() {}\nquery();\n");
    git(d, &["add", "."]);
    let gm = serve(d);
    (dir, gm)
}

#[test]
fn callers_finds_calls_through_aliases_and_says_a_name_is_ambiguous() {
    let (_dir, mut gm) = ts_project();
    let r = gm.call_ok("callers", json!({ "symbol": "query" }));
    let sites: Vec<String> = r["callers"]
        .as_array()
        .expect("callers")
        .iter()
        .map(|c| {
            format!(
                "{}:{} {} in {}",
                c["path"].as_str().unwrap_or(""),
                c["line"],
                c["callee"].as_str().unwrap_or(""),
                c["enclosing"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        sites,
        ["src/other.js:2 query in <top level>", "src/users.ts:6 select in find", "src/users.ts:10 query in all"]
    );
    assert_eq!(r["ambiguous"], true, "query is defined in db.ts and other.js");
    assert_eq!(r["definitions"].as_array().expect("defs").len(), 2);
    assert_eq!(r["aliases"], json!(["select"]));
    let m = gm.call_ok("callers", json!({ "symbol": "Users.find" }));
    assert_eq!(m["callers"][0]["kind"], "method");
    assert_eq!(m["callers"][0]["path"], "src/app.tsx");
    assert_eq!(m["callers"][0]["enclosing"], "App");
    assert_eq!(gm.call_err("callers", json!({ "symbol": "a b" }))["code"], "invalid_args");
}

#[test]
fn impact_walks_callers_transitively_as_a_graph() {
    let (_dir, mut gm) = ts_project();
    let r = gm.call_ok("impact", json!({ "symbol": "run" }));
    let nodes: Vec<(String, u64)> = r["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["name"].as_str().unwrap_or("").to_owned(), n["level"].as_u64().unwrap_or(99)))
        .collect();
    assert_eq!(
        nodes,
        [
            ("run".to_owned(), 0),
            ("query".to_owned(), 1),
            ("all".to_owned(), 2),
            ("find".to_owned(), 2),
            ("App".to_owned(), 3)
        ]
    );
    assert!(r["files"].as_array().expect("files").contains(&json!("src/app.tsx")));
    let shallow = gm.call_ok("impact", json!({ "symbol": "run", "depth": 1 }));
    assert_eq!(shallow["nodes"].as_array().expect("nodes").len(), 2);
    assert_eq!(gm.call_err("impact", json!({ "symbol": "run", "depth": 0 }))["code"], "invalid_args");
}

#[test]
fn callers_sees_an_edit_made_through_gm() {
    let (_dir, mut gm) = ts_project();
    assert_eq!(gm.call_ok("callers", json!({ "symbol": "boot" }))["total"], 0);
    gm.call_ok(
        "edit_file",
        json!({ "path": "src/app.tsx", "old": "function boot()", "new": "boot();\nfunction boot()" }),
    );
    let r = gm.call_ok("callers", json!({ "symbol": "boot" }));
    assert_eq!(r["total"], 1);
    assert_eq!(r["callers"][0]["line"], 6);
}

#[test]
fn a_search_after_the_index_folder_was_deleted_rebuilds_it_instead_of_failing() {
    let (dir, mut gm) = repo();
    let r = gm.call_ok("search", json!({ "query": "user name" }));
    assert!(!paths(&r, "hits").is_empty(), "{r}");
    // Wait for the first index to be on disk, so there is something to delete.
    let index = dir.path().join(".gm/index");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !index.join("meta.json").exists() {
        assert!(std::time::Instant::now() < deadline, "no index was built");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for round in 0..3 {
        std::fs::remove_dir_all(&index).expect("delete the index");
        write(dir.path(), "src/user.ts", format!("export function getUserName(id) {{ return {round}; }}\n").as_bytes());
        let r = gm.call("search", json!({ "query": "user name" }));
        assert_ne!(r["isError"], true, "round {round}: {r}");
        assert_eq!(paths(&r["structuredContent"], "hits").first().map(String::as_str), Some("src/user.ts:1"), "{r}");
        let body = gm.call("grep", json!({ "pattern": "getUserName" }));
        assert_ne!(body["isError"], true, "{body}");
    }
}

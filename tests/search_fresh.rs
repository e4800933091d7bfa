//! Search is never stale: every change made before a call is in its answer, whoever made it
//! (a write outside gm, a shell's `sed -i`, a branch switch, `git add`, a deletion), on both
//! surfaces; and without a watcher it says it rescans.

mod common;

use std::path::Path;

use common::Gm;
use serde_json::{json, Value};

fn git(dir: &Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@example.invalid"];
    all.extend_from_slice(args);
    common::git(dir, &all);
}

use common::{search_hits as hits, write};

/// A committed repository with a few files, and gm serving it (`args`, `env`), ready.
fn repo(args: &[&str], env: &[(&str, &str)]) -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d, "src/alpha.rs", "fn alpha() {\n    let oldWord = 1;\n}\n");
    write(d, "src/beta.rs", "fn beta() {\n    let steady = 2;\n}\n");
    write(d, "docs/notes.md", "# Notes\nnothing special here\n");
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "init"]);
    let mut gm = Gm::start_in(d, args, env);
    gm.ready();
    (dir, gm)
}

#[test]
fn a_file_written_outside_gm_is_found_by_the_next_search_at_once() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[]);
    let r = gm.call_ok("search", json!({ "query": "old word" }));
    assert_eq!(hits(&r), ["src/alpha.rs:2"]);
    // Many rounds with no pause: each write lands just before the search that must see it.
    for i in 0..25 {
        write(dir.path(), "src/alpha.rs", &format!("fn alpha() {{\n    let freshTerm{i} = 1;\n}}\n"));
        let r = gm.call_ok("search", json!({ "query": format!("freshTerm{i}") }));
        assert_eq!(hits(&r), ["src/alpha.rs:2"], "round {i}: {r}");
        assert_eq!(r["fresh"], "watch");
        let r = gm.call_ok("search", json!({ "query": "old word" }));
        assert!(hits(&r).is_empty(), "round {i}: the old text is gone: {r}");
    }
}

#[test]
fn a_write_outside_gm_is_found_by_a_search_inside_run_code() {
    let (dir, mut gm) = repo(&[], &[]);
    gm.js("return await gm.search({ query: 'steady' })");
    write(dir.path(), "src/beta.rs", "fn beta() {\n    let movedOn = 2;\n}\n");
    let r = gm.js("return await gm.search({ query: 'moved on' })");
    assert_eq!(hits(&r), ["src/beta.rs:2"], "{r}");
    let r = gm.js("return await gm.search({ query: 'steady' })");
    assert!(hits(&r).is_empty(), "{r}");
}

#[test]
fn a_shell_sed_edit_is_found_at_once() {
    let (_dir, mut gm) = repo(&[], &[]);
    let r = gm.js(r#"await gm.search({ query: 'steady' });
           await gm.run_shell({ command: "sed -i 's/steady/shellEdited/' src/beta.rs" });
           return await gm.search({ query: 'shell edited' });"#);
    assert_eq!(hits(&r), ["src/beta.rs:2"], "{r}");
}

#[test]
fn a_branch_switch_from_a_shell_is_reflected_at_once() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[]);
    let d = dir.path();
    git(d, &["checkout", "-q", "-b", "feature"]);
    write(d, "src/alpha.rs", "fn alpha() {\n    let featureOnly = 1;\n}\n");
    write(d, "src/gamma.rs", "fn gamma() { branchFile(); }\n");
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "feature"]);
    let r = gm.call_ok("search", json!({ "query": "feature only" }));
    assert_eq!(hits(&r), ["src/alpha.rs:2"]);
    // The switch happens in a shell gm does not see: files change and git's index moves.
    git(d, &["checkout", "-q", "main"]);
    let r = gm.call_ok("search", json!({ "query": "feature only" }));
    assert!(hits(&r).is_empty(), "main has no featureOnly: {r}");
    assert!(r["refreshed"]["indexed"].as_u64().is_some_and(|n| n >= 1), "the reply says what it refreshed: {r}");
    let r = gm.call_ok("search", json!({ "query": "branch file" }));
    assert!(hits(&r).is_empty(), "gamma.rs is not on main: {r}");
    let r = gm.call_ok("search", json!({ "query": "old word" }));
    assert_eq!(hits(&r), ["src/alpha.rs:2"], "{r}");
    assert!(r.get("refreshed").is_none(), "nothing changed since: {r}");
}

#[test]
fn git_add_of_a_new_file_and_a_deletion_are_reflected_at_once() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[]);
    let d = dir.path();
    gm.call_ok("search", json!({ "query": "notes" }));
    write(d, "src/delta.rs", "fn delta() { newlyAdded(); }\n");
    let r = gm.call_ok("search", json!({ "query": "newly added" }));
    assert!(hits(&r).is_empty(), "an untracked file is not searched: {r}");
    git(d, &["add", "src/delta.rs"]);
    let r = gm.call_ok("search", json!({ "query": "newly added" }));
    assert_eq!(hits(&r), ["src/delta.rs:1"], "{r}");
    std::fs::remove_file(d.join("src/beta.rs")).expect("rm");
    let r = gm.call_ok("search", json!({ "query": "steady" }));
    assert!(hits(&r).is_empty(), "a deleted file's lines are gone: {r}");
    std::fs::remove_dir_all(d.join("docs")).expect("rm -r");
    let r = gm.call_ok("search", json!({ "query": "special" }));
    assert!(hits(&r).is_empty(), "a deleted directory's files are gone: {r}");
}

#[test]
fn without_a_watcher_search_says_it_rescans_and_sees_a_change_at_once() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[("GM_WATCH", "0")]);
    let r = gm.call_ok("search", json!({ "query": "old word" }));
    assert_eq!(r["fresh"], "rescan");
    write(dir.path(), "src/alpha.rs", "fn alpha() {\n    let rescanned = 1;\n}\n");
    let found = hits(&gm.call_ok("search", json!({ "query": "rescanned" })));
    assert_eq!(found, ["src/alpha.rs:2"], "checked before the answer, not in the background");
    let events = gm.events_of("watch");
    assert!(events.is_empty(), "a watcher turned off by the user is not an event: {events:?}");
}

#[test]
fn the_watcher_says_how_it_went_in_the_log() {
    let (_dir, mut gm) = repo(&["--surface", "tools"], &[]);
    gm.call_ok("search", json!({ "query": "steady" }));
    let events = gm.events_of("watch");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["state"], "watching");
    assert!(events[0]["dirs"].as_u64().is_some_and(|n| n >= 3), "{events:?}");
}

#[test]
fn a_wiki_page_edited_by_hand_is_found_at_once() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[]);
    gm.call_ok("wiki_write", json!({ "page": "design/cache", "text": "# Cache\nThe cache evicts.\n" }));
    assert_eq!(gm.call_ok("wiki_search", json!({ "query": "evicts" }))["hits"][0]["page"], "design/cache");
    write(dir.path(), ".gm/wiki/design/cache.md", "# Cache\nRewritten by hand: sharding.\n");
    let r = gm.call_ok("wiki_search", json!({ "query": "sharding" }));
    assert_eq!(r["hits"][0]["page"], "design/cache", "{r}");
    assert!(r["hits"][0]["line"].as_str().is_some_and(|l| l.contains("sharding")), "{r}");
}

/// A git repository where b.ts calls a.ts's `target` once, and gm serving it (`args`), ready.
fn ts_repo(args: &[&str]) -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, "a.ts", "export function target() {}\n");
    write(d, "b.ts", "import { target } from './a';\nfunction one() { target(); }\n");
    git(d, &["add", "."]);
    let mut gm = Gm::start_in(d, args, &[]);
    gm.ready();
    (dir, gm)
}

#[test]
fn callers_sees_a_call_added_outside_gm_at_once() {
    let (dir, mut gm) = ts_repo(&["--surface", "tools"]);
    let d = dir.path();
    let r = gm.call_ok("callers", json!({ "symbol": "target" }));
    assert_eq!(r["callers"].as_array().map(Vec::len), Some(1), "{r}");
    write(d, "b.ts", "import { target } from './a';\nfunction one() { target(); }\nfunction two() { target(); }\n");
    let r = gm.call_ok("callers", json!({ "symbol": "target" }));
    assert_eq!(r["callers"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(r["filesParsed"], 1, "only the changed file is parsed again: {r}");
    std::fs::remove_file(d.join("b.ts")).expect("rm");
    let r = gm.call_ok("impact", json!({ "symbol": "target" }));
    assert_eq!(r["edges"].as_array().map(Vec::len), Some(0), "a deleted file's calls are gone: {r}");
}

/// Searches until the answer comes from the built index, returning it.
fn until_built(gm: &mut Gm, query: &str) -> Value {
    for _ in 0..500 {
        let r = gm.call_ok("search", json!({ "query": query }));
        if r.get("provisional").is_none() {
            return r;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the index was never built");
}

#[test]
fn a_big_tree_without_an_index_gets_a_provisional_answer_then_the_built_one() {
    // Every tree counts as big here, so that a small one takes the provisional path.
    let big = [("GM_SEARCH_SYNC_BYTES", "0")];
    let (dir, mut gm) = repo(&["--surface", "tools"], &big);
    let first = gm.call_ok("search", json!({ "query": "old word" }));
    assert_eq!(first["provisional"], true, "{first}");
    assert_eq!(first["fresh"], "scan");
    assert_eq!(hits(&first), ["src/alpha.rs:2"]);
    let built = until_built(&mut gm, "old word");
    assert_eq!(hits(&built), hits(&first));
    assert_eq!(built["fresh"], "watch");
    // A damaged index is set aside: the next gm answers provisionally again, then rebuilds.
    common::shut_down(gm);
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir.path().join(".gm/index")).expect("index dir").flatten() {
        if entry.path().extension().is_some_and(|x| x == "term") {
            std::fs::write(entry.path(), b"not a term dictionary").expect("damage");
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the index has term dictionaries");
    let mut gm = Gm::start_in(dir.path(), &["--surface", "tools"], &big);
    gm.ready();
    let r = gm.call_ok("search", json!({ "query": "steady" }));
    assert_eq!(r["provisional"], true, "{r}");
    assert_eq!(hits(&r), ["src/beta.rs:2"]);
    // A change made while the index builds is in the first answer from the built index.
    write(dir.path(), "src/beta.rs", "fn beta() {\n    let duringBuild = 2;\n}\n");
    let r = until_built(&mut gm, "during build");
    assert_eq!(hits(&r), ["src/beta.rs:2"], "{r}");
}

#[test]
fn a_provisional_answer_comes_through_run_code_too() {
    let (_dir, mut gm) = repo(&[], &[("GM_SEARCH_SYNC_BYTES", "0")]);
    let r = gm.js("return await gm.search({ query: 'steady' })");
    assert_eq!(r["provisional"], true, "{r}");
    assert_eq!(hits(&r), ["src/beta.rs:2"]);
}

#[test]
fn a_file_changed_outside_gm_ranks_with_the_index_scores_before_it_is_reindexed() {
    let (dir, mut gm) = repo(&["--surface", "tools"], &[]);
    let d = dir.path();
    write(d, "src/alpha.rs", "fn alpha() {\n    let sharedWord = 1;\n}\n");
    write(d, "src/beta.rs", "fn beta() {\n    let sharedWord = 1;\n}\n");
    git(d, &["add", "."]);
    let r = gm.call_ok("search", json!({ "query": "shared word" }));
    assert_eq!(hits(&r).len(), 2, "{r}");
    // Rounds of an edit outside gm and a search at once: the edited file is read as it is
    // now and scored with the index's statistics, so the same line scores the same.
    for i in 0..10 {
        write(d, "src/alpha.rs", &format!("fn alpha{i}() {{\n    let sharedWord = 1;\n}}\n"));
        let r = gm.call_ok("search", json!({ "query": "shared word" }));
        assert_eq!(hits(&r), ["src/alpha.rs:2", "src/beta.rs:2"], "round {i}: {r}");
        let (a, b) = (r["hits"][0]["score"].as_f64().expect("score"), r["hits"][1]["score"].as_f64().expect("score"));
        assert!((a - b).abs() <= 1e-4 * b, "round {i}: {a} vs {b}");
        let r = gm.call_ok("search", json!({ "query": format!("alpha{i}") }));
        assert_eq!(hits(&r), ["src/alpha.rs:1"], "round {i}: {r}");
    }
}

#[test]
fn callers_inside_run_code_sees_an_outside_edit_at_once() {
    let (dir, mut gm) = ts_repo(&[]);
    let d = dir.path();
    let r = gm.js("return (await gm.callers({ symbol: 'target' })).total");
    assert_eq!(r, 1);
    write(d, "b.ts", "import { target } from './a';\nfunction one() { target(); target(); }\n");
    let r = gm.js("return (await gm.callers({ symbol: 'target' })).total");
    assert_eq!(r, 2);
}

#[test]
fn searches_while_the_index_builds_reuse_an_earlier_scan_until_something_changes() {
    // Every tree counts as big, and this one takes the debug build a while to index.
    let big = [("GM_SEARCH_SYNC_BYTES", "0")];
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d, "src/alpha.rs", "fn alpha() {\n    let quokka = 1;\n}\n");
    for i in 0..150 {
        let text: String =
            (0..1000).map(|n| format!("let filler_{i}_{n} = compute_value({n}, \"row {i}\");\n")).collect();
        write(d, &format!("gen/f{i:03}.rs"), &text);
    }
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "init"]);
    // Through bodies, the default surface.
    let mut gm = Gm::start_in(d, &[], &big);
    gm.ready();
    let first = gm.js("return await gm.search({ query: 'quokka' })");
    assert_eq!(first["provisional"], true, "{first}");
    assert!(first.get("reused").is_none(), "{first}");
    // Asked again with nothing changed: the earlier scan's answer, not another scan.
    let again = gm.js("return await gm.search({ query: 'quokka' })");
    assert_eq!(again["provisional"], true, "the index built too soon for this test: {again}");
    assert_eq!(again["reused"], true, "{again}");
    assert_eq!(hits(&again), hits(&first));
    // A change makes the earlier answers stale: scanned again, and it shows.
    write(d, "src/alpha.rs", "fn alpha() {\n    let wombat = 1;\n}\n");
    let changed = gm.js("return await gm.search({ query: 'quokka' })");
    if changed["provisional"] == true {
        assert!(changed.get("reused").is_none(), "{changed}");
        assert!(hits(&changed).is_empty(), "{changed}");
    }
    // The change made during the build is in the built index's first answer.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let built = loop {
        let r = gm.js("return await gm.search({ query: 'wombat' })");
        if r.get("provisional").is_none() {
            break r;
        }
        assert!(std::time::Instant::now() < until, "the index was never built");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(hits(&built), ["src/alpha.rs:2"], "{built}");
    let events = gm.events_of("search-index");
    assert_eq!(events.first().map(|e| e["state"].clone()), Some(json!("building")), "{events:?}");
    let done = events.iter().find(|e| e["state"] == "built").expect("a built event");
    assert_eq!(done["files"], 151, "{done}");
}

/// Searches sent one after another through a run_code body while the index builds are
/// answered by the build (what it has committed plus a scan of the rest), each exactly as the
/// built index answers it, up to and across the moment the build hands the index back.
#[test]
fn searches_during_the_build_through_run_code_answer_what_the_built_index_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    // 150 words, each on one line of 20 files spread over the tree (letters only: a word with
    // digits is also indexed by its parts, and would match the others).
    let word = |k: usize| format!("wombat{}{}", (b'a' + (k / 26) as u8) as char, (b'a' + (k % 26) as u8) as char);
    for i in 0..3000 {
        let body: String = (0..20).map(|j| format!("fn f{j}() {{ let filler{j} = {i}; }}\n")).collect();
        write(d, &format!("src/m{:02}/f{i}.rs", i % 50), &format!("{body}let {} = {i};\n", word(i % 150)));
    }
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "init"]);
    let mut gm = Gm::start_in(d, &[], &[("GM_SEARCH_SYNC_BYTES", "0")]);
    gm.ready();
    let words: Vec<String> = (0..150).map(word).collect();
    let body = format!(
        "const words = {};
         const seen = [];
         for (let n = 0; n < 400; n++) {{
           const query = words[n % words.length];
           const r = await gm.search({{ query, limit: 50 }});
           seen.push({{ query, provisional: !!r.provisional, hits: r.hits.map(h => h.path + ':' + h.line).sort() }});
           if (!r.provisional) break;
         }}
         return seen;",
        json!(words)
    );
    let during = gm.js(&body);
    let seen = during.as_array().expect("answers");
    let provisional = seen.iter().filter(|s| s["provisional"] == true).count();
    assert!(provisional >= 3, "the build ended before the searches could ask it: {provisional}");
    for (n, s) in seen.iter().enumerate() {
        let query = s["query"].as_str().expect("query");
        let built = gm.js(&format!("return await gm.search({{ query: '{query}', limit: 50 }})"));
        assert!(built.get("provisional").is_none(), "{built}");
        let mut want = hits(&built);
        want.sort();
        assert_eq!(want.len(), 20, "{built}");
        let got: Vec<String> =
            s["hits"].as_array().expect("hits").iter().map(|h| h.as_str().unwrap_or("").to_owned()).collect();
        assert_eq!(got, want, "search {n}, {query} (provisional: {})", s["provisional"]);
    }
}

//! The call-site index's cache outlives gm: the real binary, restarted over the same workspace.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{git, Gm};
use serde_json::json;

fn serve(dir: &Path) -> Gm {
    let mut gm = Gm::start_in(dir, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm
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

#[test]
fn callers_after_a_restart_answers_from_the_saved_cache_and_sees_what_changed_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = &dir.path().canonicalize().expect("canonical");
    std::fs::write(d.join("db.ts"), "export function query(s: string) { return s; }\nquery('a');\n").expect("write");
    std::fs::write(d.join("app.ts"), "import { query } from './db';\nexport const all = () => query('*');\n")
        .expect("write");
    std::fs::write(d.join("old.js"), "query();\n").expect("write");
    git(d, &["init", "-q"]);
    git(d, &["add", "."]);

    let mut gm = serve(d);
    let r = gm.call_ok("callers", json!({ "symbol": "query" }));
    assert_eq!((r["filesParsed"].as_u64(), r["total"].as_u64()), (Some(3), Some(3)));
    wait_for_cache(d);
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(10)).expect("gm exits");

    let mut gm = serve(d);
    let r = gm.call_ok("callers", json!({ "symbol": "query" }));
    assert_eq!((r["filesParsed"].as_u64(), r["total"].as_u64()), (Some(0), Some(3)), "{r}");
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(10)).expect("gm exits");

    // While no gm runs: one file gains a call, one is deleted.
    std::fs::write(
        d.join("app.ts"),
        "import { query } from './db';\nexport const all = () => query('*');\nquery('b');\n",
    )
    .expect("write");
    git(d, &["rm", "-q", "-f", "old.js"]);
    let mut gm = serve(d);
    let r = gm.call_ok("callers", json!({ "symbol": "query" }));
    assert_eq!(r["filesParsed"], 1, "{r}");
    let sites: Vec<String> =
        r["callers"].as_array().expect("callers").iter().map(|c| format!("{}:{}", c["path"], c["line"])).collect();
    assert_eq!(sites, ["\"app.ts\":2", "\"app.ts\":3", "\"db.ts\":2"]);
}

/// A worker stopped (SIGTERM) right after a parse still leaves its cache: the next gm reads
/// it instead of parsing the tree again (a kernel's parse is two minutes). The tree is big
/// enough that writing its cache takes a while after the reply.
#[test]
fn a_worker_stopped_right_after_a_parse_keeps_the_parse_for_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = &dir.path().canonicalize().expect("canonical");
    for i in 0..3000 {
        let body: String =
            (0..20).map(|j| format!("export function f{i}_{j}(x: number) {{ return query(x + {j}); }}\n")).collect();
        std::fs::write(d.join(format!("m{i}.ts")), body).expect("write");
    }
    std::fs::write(d.join("db.ts"), "export function query(s: number) { return s; }\n").expect("write");
    git(d, &["init", "-q"]);
    git(d, &["add", "."]);

    let mut gm = serve(d);
    let r = gm.call_ok("callers", json!({ "symbol": "query", "limit": 1 }));
    assert_eq!(r["filesParsed"], 3001, "{r}");
    common::stop_worker(d);
    drop(gm);
    assert!(d.join(".gm/calls/cache.bin").exists(), "the worker left without writing its cache");

    let mut gm = serve(d);
    let r = gm.call_ok("callers", json!({ "symbol": "query", "limit": 1 }));
    assert_eq!((r["filesParsed"].as_u64(), r["total"].as_u64()), (Some(0), Some(60_000)), "{r}");
}

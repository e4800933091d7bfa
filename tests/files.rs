//! File verbs through `--surface tools` and through the CLI.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{gm_command, Gm};
use serde_json::{json, Value};

fn tools() -> Gm {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    gm
}

#[test]
fn write_then_read_round_trips_and_creates_parent_directories() {
    let mut gm = tools();
    let w = gm.call_ok("write_file", json!({ "path": "deep/er/x.txt", "content": "héllo\nworld\n" }));
    assert_eq!(w["created"], true);
    assert_eq!(w["bytes"], 13);
    let r = gm.call_ok("read_file", json!({ "path": "deep/er/x.txt" }));
    assert_eq!(r["content"], "héllo\nworld\n");
    assert_eq!(r["totalLines"], 2);
    assert!(r.get("next").is_none());
    let again = gm.call_ok("write_file", json!({ "path": "deep/er/x.txt", "content": "" }));
    assert_eq!(again["created"], false);
}

#[test]
fn long_files_are_paged_never_silently_cut() {
    let mut gm = tools();
    let text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(gm.workspace.join("big.txt"), &text).expect("write");
    let first = gm.call_ok("read_file", json!({ "path": "big.txt" }));
    assert_eq!(first["startLine"], 1);
    assert_eq!(first["endLine"], 2000);
    assert_eq!(first["totalLines"], 5000);
    assert_eq!(first["next"], 2001);
    let mut all = first["content"].as_str().expect("content").to_owned();
    let mut next = first["next"].clone();
    while let Some(offset) = next.as_u64() {
        let page = gm.call_ok("read_file", json!({ "path": "big.txt", "offset": offset }));
        all.push_str(page["content"].as_str().expect("content"));
        next = page.get("next").cloned().unwrap_or(Value::Null);
    }
    assert_eq!(all, text);
    let slice = gm.call_ok("read_file", json!({ "path": "big.txt", "offset": 10, "limit": 2 }));
    assert_eq!(slice["content"], "line 10\nline 11\n");
}

#[test]
fn reading_bad_targets_gives_structured_errors() {
    let mut gm = tools();
    std::fs::write(gm.workspace.join("bin.dat"), [0xff, 0xfe, 0x00, 0x01]).expect("write");
    std::fs::create_dir(gm.workspace.join("d")).expect("mkdir");
    assert_eq!(gm.call_err("read_file", json!({ "path": "missing" }))["code"], "not_found");
    assert_eq!(gm.call_err("read_file", json!({ "path": "bin.dat" }))["code"], "not_text");
    assert_eq!(gm.call_err("read_file", json!({ "path": "d" }))["code"], "is_a_directory");
    assert_eq!(gm.call_err("read_file", json!({ "path": "" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("read_file", json!({ "path": 5 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("read_file", json!({ "path": "x", "offset": 0 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("read_file", json!({ "path": "x", "bogus": 1 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("write_file", json!({ "path": "d", "content": "x" }))["code"], "is_a_directory");
}

#[test]
fn a_refused_edit_changes_nothing_and_says_why() {
    let mut gm = tools();
    let path = gm.workspace.join("f.rs");
    std::fs::write(&path, "fn a() {}\nfn a() {}\nfn  b() {}\n").expect("write");
    let none = gm.call_err("edit_file", json!({ "path": "f.rs", "old": "fn c", "new": "x" }));
    assert_eq!(none["code"], "no_match");
    let many = gm.call_err("edit_file", json!({ "path": "f.rs", "old": "fn a() {}", "new": "x" }));
    assert_eq!(many["code"], "ambiguous_match");
    assert_eq!(many["count"], 2);
    assert_eq!(many["lines"], json!([1, 2]));
    let ws = gm.call_err("edit_file", json!({ "path": "f.rs", "old": "fn b() {}", "new": "x" }));
    assert!(ws["message"].as_str().expect("message").contains("whitespace"));
    assert_eq!(gm.call_err("edit_file", json!({ "path": "f.rs", "old": "", "new": "x" }))["code"], "invalid_args");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "fn a() {}\nfn a() {}\nfn  b() {}\n");
    let all = gm.call_ok("edit_file", json!({ "path": "f.rs", "old": "fn a() {}", "new": "fn z() {}", "all": true }));
    assert_eq!(all["replacements"], 2);
    assert!(all["diff"].as_str().expect("diff").contains("-fn a() {}\n+fn z() {}"));
}

#[test]
fn writes_keep_the_file_mode_and_write_through_symlinks() {
    let mut gm = tools();
    let target = gm.workspace.join("real.sh");
    std::fs::write(&target, "old").expect("write");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink(&target, gm.workspace.join("alias.sh")).expect("symlink");
    gm.call_ok("write_file", json!({ "path": "alias.sh", "content": "new" }));
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
    assert!(std::fs::symlink_metadata(gm.workspace.join("alias.sh")).expect("meta").file_type().is_symlink());
    assert_eq!(std::fs::metadata(&target).expect("meta").permissions().mode() & 0o777, 0o755);
    let st = gm.call_ok("stat_file", json!({ "path": "alias.sh" }));
    assert_eq!(
        (st["type"].as_str(), st["symlink"].as_bool(), st["mode"].as_str()),
        (Some("file"), Some(true), Some("755"))
    );
}

#[test]
fn paths_outside_the_workspace_work_when_absolute() {
    let mut gm = tools();
    let outside = tempfile::tempdir().expect("tempdir");
    let file = outside.path().join("o.txt");
    gm.call_ok("write_file", json!({ "path": file, "content": "out" }));
    assert_eq!(gm.call_ok("read_file", json!({ "path": file }))["content"], "out");
    let rel = format!("../{}/o.txt", outside.path().file_name().expect("name").to_string_lossy());
    // A relative path with .. is followed from the workspace, not refused.
    let st = gm.call_ok("stat_file", json!({ "path": rel }));
    let expected = gm.workspace.parent().expect("parent") == outside.path().parent().expect("parent");
    assert_eq!(st["exists"], expected);
}

#[test]
fn same_file_calls_through_a_hard_link_run_in_arrival_order() {
    let mut gm = tools();
    let a = gm.workspace.join("a.txt");
    std::fs::write(&a, "0").expect("write");
    std::fs::hard_link(&a, gm.workspace.join("b.txt")).expect("link");
    // Alternate writes through one name and reads through the other, all sent at once.
    let n = 40;
    for i in 0..n {
        let (tool, args) = if i % 2 == 0 {
            ("write_file", json!({ "path": "a.txt", "content": format!("{i}") }))
        } else {
            ("read_file", json!({ "path": "b.txt" }))
        };
        gm.send(&json!({ "jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": { "name": tool, "arguments": args } }));
    }
    for i in (1..n).step_by(2) {
        let r = gm.recv_id(&json!(1000 + i));
        assert_eq!(
            r["result"]["structuredContent"]["content"],
            format!("{}", i - 1),
            "read {i} saw the write before it"
        );
    }
    // The link still names one file.
    assert_eq!(std::fs::read_to_string(gm.workspace.join("b.txt")).expect("read"), format!("{}", n - 2));
}

#[test]
fn list_dir_pages_with_prefix_offset_and_limit() {
    let mut gm = tools();
    for name in ["b1", "a1", "a3", "a2", "c"] {
        std::fs::write(gm.workspace.join(name), name).expect("write");
    }
    std::fs::create_dir(gm.workspace.join("a4")).expect("mkdir");
    let p1 = gm.call_ok("list_dir", json!({ "prefix": "a", "limit": 3 }));
    let names =
        |v: &Value| v["entries"].as_array().expect("entries").iter().map(|e| e["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(&p1), [json!("a1"), json!("a2"), json!("a3")]);
    assert_eq!(p1["total"], 4);
    assert_eq!(p1["next"], 3);
    let p2 = gm.call_ok("list_dir", json!({ "prefix": "a", "offset": 3, "limit": 3 }));
    assert_eq!(p2["entries"], json!([{ "name": "a4", "type": "dir" }]));
    assert!(p2.get("next").is_none());
    assert_eq!(gm.call_err("list_dir", json!({ "path": "a1" }))["code"], "not_a_directory");
    assert_eq!(gm.call_err("list_dir", json!({ "limit": 0 }))["code"], "invalid_args");
}

#[test]
fn stat_of_a_missing_path_says_it_does_not_exist() {
    let mut gm = tools();
    let st = gm.call_ok("stat_file", json!({ "path": "nothing/here" }));
    assert_eq!(st["exists"], false);
    std::os::unix::fs::symlink(gm.workspace.join("gone"), gm.workspace.join("dangling")).expect("symlink");
    let st = gm.call_ok("stat_file", json!({ "path": "dangling" }));
    assert_eq!((st["exists"].as_bool(), st["symlink"].as_bool()), (Some(false), Some(true)));
}

#[test]
fn query_log_filters_by_kind_and_seq() {
    let mut gm = tools();
    gm.call_ok("stat_file", json!({ "path": "." }));
    gm.call_ok("stat_file", json!({ "path": "." }));
    let all = gm.call_ok("query_log", json!({ "kind": "action" }));
    let events = all["events"].as_array().expect("events");
    assert_eq!(events.len(), 2);
    let first = events[0]["seq"].as_u64().expect("seq");
    let later = gm.call_ok("query_log", json!({ "kind": "action", "since_seq": first, "limit": 1 }));
    assert_eq!(later["events"].as_array().expect("events").len(), 1);
    assert_eq!(later["events"][0]["seq"], events[1]["seq"]);
    assert!(later["more"].as_u64().expect("more") <= 1);
    assert_eq!(gm.call_err("query_log", json!({ "limit": 0 }))["code"], "invalid_args");
}

#[test]
fn skill_files_are_readable_through_read_file() {
    let mut gm = tools();
    let r = gm.call_ok("read_file", json!({ "path": "skill://gm/WORKFLOWS.md" }));
    assert!(r["content"].as_str().expect("content").contains("stepsLeft"));
    assert_eq!(gm.call_err("read_file", json!({ "path": "skill://gm/../../etc/passwd" }))["code"], "not_found");
}

#[test]
fn the_cli_runs_one_verb_and_prints_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = gm_command()
        .args(["write_file", r#"{"path":"c.txt","content":"cli"}"#])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["bytes"], 3);
    let out =
        gm_command().args(["read_file", r#"{"path":"c.txt"}"#, "--workspace"]).arg(dir.path()).output().expect("run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["content"], "cli");
    let out = gm_command().args(["read_file", r#"{"path":"nope"}"#]).current_dir(dir.path()).output().expect("run");
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["error"]["code"], "not_found");
    let out = gm_command().args(["read_file", "{not json"]).current_dir(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn gm_help_lists_serve_and_every_verb() {
    let out = gm_command().arg("--help").output().expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for name in ["serve", "read_file", "write_file", "edit_file", "stat_file", "list_dir", "query_log"] {
        assert!(help.contains(name), "{name} in --help");
    }
    let out = gm_command().args(["stat_file", "--schema"]).output().expect("run");
    let schema: Value = serde_json::from_slice(&out.stdout).expect("schema");
    assert_eq!(schema["type"], "object");
}

#[test]
fn a_large_file_is_paged_from_disk_to_its_last_page_and_a_change_is_seen_at_once() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    // 400,000 lines, about 6 MB: past the size read whole.
    let text: String = (1..=400_000).map(|i| format!("row {i:07} {}\n", "y".repeat(i % 7))).collect();
    std::fs::write(gm.workspace.join("big.txt"), &text).expect("write");
    let r = gm.js("const first = await gm.read_file({ path: 'big.txt', limit: 2 });
         const last = await gm.read_file({ path: 'big.txt', offset: first.totalLines - 1 });
         const middle = await gm.read_file({ path: 'big.txt', offset: 123457, limit: 1 });
         return { first, last, middle };");
    assert_eq!(r["first"]["content"], "row 0000001 y\nrow 0000002 yy\n");
    assert_eq!(r["first"]["totalLines"], 400_000);
    assert_eq!(r["first"]["next"], 3);
    assert_eq!(r["first"]["bytes"], text.len());
    assert_eq!(r["last"]["content"], text.lines().skip(399_998).map(|l| format!("{l}\n")).collect::<String>());
    assert_eq!((r["last"]["startLine"].as_u64(), r["last"]["endLine"].as_u64()), (Some(399_999), Some(400_000)));
    assert!(r["last"].get("next").is_none());
    assert_eq!(r["middle"]["content"], format!("{}\n", text.lines().nth(123_456).expect("line")));
    // A change to the file is seen at once: the line index is for one version of it.
    std::fs::write(gm.workspace.join("big.txt"), format!("new first\n{text}")).expect("rewrite");
    let again = gm.js("return await gm.read_file({ path: 'big.txt', offset: 400001 });");
    assert_eq!(again["totalLines"], 400_001);
    assert_eq!(again["content"], text.lines().last().map(|l| format!("{l}\n")).expect("last"));
}

#[test]
fn the_first_page_of_a_2_gb_file_reads_only_the_page_and_says_more_instead_of_counting() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    // 3000 lines, then a hole to 2 GB (sparse: instant to make, and all of it reads as NULs).
    let head: String = (1..=3000).map(|i| format!("entry {i}\n")).collect();
    let path = gm.workspace.join("huge.log");
    std::fs::write(&path, &head).expect("write");
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(2 << 30).expect("grow");
    let started = std::time::Instant::now();
    let r = gm.js("const first = await gm.read_file({ path: 'huge.log' });
         const second = await gm.read_file({ path: 'huge.log', offset: first.next, limit: 2 });
         return { first, second };");
    let took = started.elapsed();
    let first = &r["first"];
    assert_eq!((first["startLine"].as_u64(), first["endLine"].as_u64()), (Some(1), Some(2000)), "{first}");
    assert!(first["content"].as_str().expect("content").starts_with("entry 1\nentry 2\n"));
    assert_eq!(first["more"], true, "{first}");
    assert!(first.get("totalLines").is_none(), "the whole file was counted: {first}");
    assert_eq!(first["next"], 2001);
    assert_eq!(first["bytes"], 2u64 << 30);
    assert_eq!(r["second"]["content"], "entry 2001\nentry 2002\n");
    assert_eq!(r["second"]["more"], true);
    // Counting 2 GB took 2.8 s in a release build; two pages read a few megabytes.
    assert!(took < std::time::Duration::from_secs(2), "two pages of a 2 GB file took {took:?}");
}

#[test]
fn a_large_file_pages_as_text_where_the_page_is_text() {
    let mut gm = tools();
    let mut bytes: Vec<u8> = (0..200_000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
    bytes.extend_from_slice(b"\xff\xfe binary tail\n");
    std::fs::write(gm.workspace.join("mixed.log"), &bytes).expect("write");
    let r = gm.call_ok("read_file", json!({ "path": "mixed.log", "limit": 1 }));
    assert_eq!(r["content"], "line 0\n");
    let e = gm.call_err("read_file", json!({ "path": "mixed.log", "offset": 200_001 }));
    assert_eq!(e["code"], "not_text");
}

#[test]
fn an_edit_of_a_large_file_diffs_only_around_the_change_and_saves_a_long_diff_whole() {
    let mut gm = tools();
    let text: String = (1..=300_000).map(|i| format!("row {i:07}\n")).collect();
    std::fs::write(gm.workspace.join("big.txt"), &text).expect("write");
    let one = gm.call_ok("edit_file", json!({ "path": "big.txt", "old": "row 0150000\n", "new": "row 150k\n" }));
    let diff = one["diff"].as_str().expect("diff");
    assert!(diff.contains("@@ -149997,7 +149997,7 @@\n row 0149997\n"), "{diff}");
    assert!(diff.contains("-row 0150000\n+row 150k\n"), "{diff}");
    assert!(one.get("diffCut").is_none());
    // Every line changed: a diff far past the inline size.
    let all = gm.call_ok("edit_file", json!({ "path": "big.txt", "old": "row ", "new": "ROW ", "all": true }));
    assert_eq!(all["replacements"], 300_000);
    let inline = all["diff"].as_str().expect("diff");
    let cut = all["diffCut"].as_u64().expect("diffCut") as usize;
    let whole = std::fs::read_to_string(all["diffFile"].as_str().expect("diffFile")).expect("the whole diff");
    assert_eq!(whole.len(), inline.len() + cut);
    assert!(whole.starts_with(inline));
    assert_eq!(whole.lines().filter(|l| l.starts_with("-row ")).count(), 300_000);
    assert_eq!(whole.lines().filter(|l| l.starts_with("+ROW ")).count(), 300_000);
}

//! The watcher never goes blind: not after the kernel's queue overflowed (a directory made
//! while events were lost is watched afterwards), and not because of one directory it may not
//! watch (that one is skipped, named in the `watch` event, and its files are checked at each
//! search, while the rest stays watched).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use common::Gm;
use gm_actors::mcp_client::stdio::{Stderr, StdioClient};
use serde_json::{json, Value};

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn hit_paths(r: &Value) -> Vec<String> {
    r["hits"].as_array().expect("hits").iter().map(|h| h["path"].as_str().unwrap_or("").to_owned()).collect()
}

fn worker_pid(workspace: &Path) -> i32 {
    let holder: Value =
        serde_json::from_slice(&std::fs::read(workspace.join(".gm/worker.pid")).expect("a worker runs")).expect("pid");
    holder["pid"].as_i64().expect("pid") as i32
}

/// What a body sees of `query` and of the callers of `target`, and how fresh search said it was.
fn search_and_callers(gm: &mut Gm, query: &str) -> Value {
    gm.js(&format!(
        "const s = await gm.search({{ query: '{query}' }});
         const c = await gm.callers({{ symbol: 'target' }});
         return {{ hits: s.hits, fresh: s.fresh, callers: c.callers.map(x => x.path + ':' + x.line) }};"
    ))
}

#[test]
fn a_directory_made_while_the_watchers_queue_overflowed_is_watched_after_it() {
    // Outside git, so that every file counts and nothing but the watcher says what changed.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    write(&ws, "lib/a.js", "export function target() {}\n");
    write(&ws, "notes.txt", "nothing here yet\n");
    std::fs::create_dir(ws.join("bulk")).expect("mkdir");
    let mut gm = Gm::start_in(&ws, &[], &[]);
    gm.ready();
    let r = search_and_callers(&mut gm, "nothing here");
    assert_eq!(r["fresh"], "watch", "{r}");
    // The worker stops reading while far more events than the kernel queues (16384 by default)
    // happen; the new directory comes last, when its events are already dropped.
    let pid = worker_pid(&ws);
    // SAFETY: kill(2) on the worker's pid, read from its own file.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let queue: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(16384);
    for i in 0..queue {
        std::fs::write(ws.join(format!("bulk/f{i}.txt")), "x").expect("write");
    }
    write(&ws, "fresh/c.js", "import { target } from '../lib/a.js';\nfunction one() { target(); }\n");
    write(&ws, "fresh/words.txt", "overflowWord\n");
    std::fs::remove_dir_all(ws.join("bulk")).expect("rm");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // The overflow says to rescan everything; a reader whose cookie was lost in the full queue
    // rescans too. Either way the new files are found, until the watcher's word comes back.
    let mut r = Value::Null;
    for _ in 0..20 {
        r = search_and_callers(&mut gm, "overflow word");
        if r["fresh"] == "watch" {
            break;
        }
    }
    assert_eq!(r["fresh"], "watch", "{r}");
    assert_eq!(hit_paths(&r), ["fresh/words.txt"], "{r}");
    assert_eq!(r["callers"], json!(["fresh/c.js:2"]), "{r}");
    // Edits inside the directory made during the overflow are seen: it is watched now. Three
    // rounds, so that no rescan started before them (one that answered while the cookie was
    // lost) can pass for the watcher.
    let mut calls = String::from("import { target } from '../lib/a.js';\nfunction one() { target(); }\n");
    for (round, word) in ["ibis", "kiwi", "emu"].into_iter().enumerate() {
        write(&ws, "fresh/words.txt", &format!("{word}\n"));
        calls.push_str(&format!("function more{round}() {{ target(); }}\n"));
        write(&ws, "fresh/c.js", &calls);
        let r = search_and_callers(&mut gm, word);
        assert_eq!(r["fresh"], "watch", "{r}");
        assert_eq!(
            hit_paths(&r),
            ["fresh/words.txt"],
            "round {round}: an edit under the new directory was missed: {r}"
        );
        let expected: Vec<String> = (2..=round + 3).map(|line| format!("fresh/c.js:{line}")).collect();
        assert_eq!(r["callers"], json!(expected), "round {round}: {r}");
    }
}

#[test]
fn the_first_walk_on_every_core_watches_every_directory_gitignore_keeps_and_no_other() {
    // Wide and deep, so that the walk's threads share the work; outside git, so that only the
    // watcher says what changed.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    write(&ws, ".gitignore", "ignored/\n");
    write(&ws, "lib/a.js", "export function target() {}\n");
    write(&ws, "notes.txt", "nothing here yet\n");
    for i in 0..120 {
        write(&ws, &format!("wide{i}/sub/w.txt"), "wide\n");
    }
    let deep: String = (0..30).map(|d| format!("d{d}/")).collect();
    write(&ws, &format!("{deep}x.txt"), "deep\n");
    write(&ws, "ignored/a/b/i.txt", "ignoredWord\n");
    let mut gm = Gm::start_in(&ws, &[], &[]);
    gm.ready();
    let r = search_and_callers(&mut gm, "nothing here");
    assert_eq!(r["fresh"], "watch", "{r}");
    // The workspace, lib, 120 × 2 wide ones and 30 deep ones; not `ignored/` nor under it,
    // not `.gm`.
    let events = gm.events_of("watch");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["dirs"], 1 + 1 + 240 + 30, "{events:?}");
    // Edits in the deepest, the first and the last wide directory, made after the walk, are
    // the watcher's news: each of them is watched.
    for (round, word) in ["heron", "stork", "crane"].into_iter().enumerate() {
        let places = [format!("{deep}x"), "wide0/sub/w".to_owned(), "wide119/sub/w".to_owned()];
        for place in &places {
            write(&ws, &format!("{place}.txt"), &format!("{word}\n"));
            let up = "../".repeat(place.matches('/').count());
            write(
                &ws,
                &format!("{place}.js"),
                &format!("import {{ target }} from '{up}lib/a.js';\nfunction r{round}() {{ target(); }}\n"),
            );
        }
        let r = search_and_callers(&mut gm, word);
        assert_eq!(r["fresh"], "watch", "{r}");
        let mut hits = hit_paths(&r);
        hits.sort();
        let mut expected: Vec<String> = places.iter().map(|p| format!("{p}.txt")).collect();
        expected.sort();
        assert_eq!(hits, expected, "round {round}: {r}");
        let mut callers: Vec<String> = places.iter().map(|p| format!("{p}.js:2")).collect();
        callers.sort();
        assert_eq!(r["callers"], json!(callers), "round {round}: {r}");
    }
}

#[test]
fn directories_made_while_the_first_walk_runs_are_watched() {
    // The race between the walk's threads and directories appearing under them, run at several
    // starts: a directory made before its parent was read is walked, one made after is an
    // event; none may be missed.
    for start in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        write(&ws, "lib/a.js", "export function target() {}\n");
        for i in 0..300 {
            write(&ws, &format!("wide{i}/sub/w.txt"), "wide\n");
        }
        // Directories keep appearing, one a millisecond, from before the worker starts until
        // well after its walk (a few tens of milliseconds, right after `initialize`), so that
        // some are made while the walk's threads run.
        let maker = {
            let ws = ws.clone();
            std::thread::spawn(move || {
                for k in 0..300 {
                    write(&ws, &format!("race/r{k}/s/f.txt"), "early\n");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                300
            })
        };
        let mut gm = Gm::start_in(&ws, &[], &[]);
        gm.ready();
        let made = maker.join().expect("maker");
        // The index is built now; only the watcher can tell it of the writes that follow.
        let r = gm
            .js("const s = await gm.search({ query: 'early', limit: 500 }); return { fresh: s.fresh, hits: s.hits };");
        assert_eq!(hit_paths(&r).len(), made, "start {start}: {r}");
        for k in 0..made {
            write(&ws, &format!("race/r{k}/s/f.txt"), "lateWord\n");
        }
        let r = gm.js(
            "const s = await gm.search({ query: 'late word', limit: 500 }); return { fresh: s.fresh, hits: s.hits };",
        );
        assert_eq!(r["fresh"], "watch", "start {start}: {r}");
        let hits = hit_paths(&r);
        let missed: Vec<String> =
            (0..made).map(|k| format!("race/r{k}/s/f.txt")).filter(|p| !hits.contains(p)).collect();
        assert!(
            missed.is_empty(),
            "start {start}: edits under directories made around the walk were missed: {missed:?}"
        );
        assert_eq!(hits.len(), made, "start {start}: {hits:?}");
    }
}

/// The uid that gm runs as in the refused-directory test: `nobody` when the tests run as root
/// (root may watch any directory), else the tests' own.
fn unprivileged() -> Option<u32> {
    (gm_actors::sys::current_uid() == 0).then_some(65534)
}

/// `gm serve` in `ws` as `uid` (when set), with a HOME of its own that it may write.
fn serve_as(ws: &Path, uid: Option<u32>, home: &Path) -> Gm {
    let mut cmd = common::gm_command();
    cmd.arg("serve").current_dir(ws).env("HOME", home).env_remove("XDG_RUNTIME_DIR");
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let client = StdioClient::spawn(cmd, Stderr::Inherit).expect("spawn gm");
    Gm::from_client(client, ws)
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).expect("chown");
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read_dir").flatten() {
            chown_tree(&entry.path(), uid);
        }
    }
}

#[test]
fn a_directory_the_watcher_may_not_watch_is_skipped_named_and_checked_at_each_search() {
    // A directory gm may enter but not list (mode 0711, another owner; as the owner, 0311):
    // inotify refuses to watch it with EACCES, while its tracked files can still be read.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let git = |args: &[&str]| {
        let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@example.invalid"];
        all.extend_from_slice(args);
        common::git(&ws, &all);
    };
    git(&["init", "-q"]);
    write(&ws, "src/open.txt", "plain\n");
    write(&ws, "locked/kept.txt", "steady\n");
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "init"]);
    let home = tempfile::tempdir().expect("home");
    let uid = unprivileged();
    if let Some(uid) = uid {
        chown_tree(&ws, uid);
        chown_tree(home.path(), uid);
        std::os::unix::fs::chown(ws.join("locked"), Some(0), Some(0)).expect("chown");
        std::os::unix::fs::chown(ws.join("locked/kept.txt"), Some(0), Some(0)).expect("chown");
    }
    let mode = if uid.is_some() { 0o711 } else { 0o311 };
    std::fs::set_permissions(ws.join("locked"), std::fs::Permissions::from_mode(mode)).expect("chmod");
    let mut gm = serve_as(&ws, uid, home.path());
    gm.ready();
    let r = gm.js("return await gm.search({ query: 'steady' })");
    assert_eq!(hit_paths(&r), ["locked/kept.txt"], "{r}");
    // The rest is watched: an edit is seen at once, by the watcher's word.
    write(&ws, "src/open.txt", "edited\n");
    let r = gm.js("return await gm.search({ query: 'edited' })");
    assert_eq!(r["fresh"], "watch", "one directory turned watching off: {r}");
    assert_eq!(hit_paths(&r), ["src/open.txt"], "{r}");
    // The skipped directory is named, with why.
    let events = gm.events_of("watch");
    let unwatched: Vec<&Value> = events.iter().filter_map(|e| e["unwatched"].as_array()).flatten().collect();
    assert_eq!(unwatched.len(), 1, "{events:?}");
    assert_eq!(unwatched[0]["dir"], "locked", "{events:?}");
    assert!(unwatched[0]["why"].as_str().is_some_and(|w| w.contains("ermission denied")), "{events:?}");
    assert!(events.iter().all(|e| e["state"] == "watching"), "{events:?}");
    // Its files are checked at each search: an edit there is found too.
    for (round, word) in ["ibis", "kiwi", "emu"].into_iter().enumerate() {
        std::fs::write(ws.join("locked/kept.txt"), format!("{word}\n")).expect("write");
        let r = gm.js(&format!("return await gm.search({{ query: '{word}' }})"));
        assert_eq!(hit_paths(&r), ["locked/kept.txt"], "round {round}: {r}");
        assert_eq!(r["fresh"], "watch", "{r}");
    }
    gm.close_stdin();
    gm.wait_exit(common::TIMEOUT).expect("the relay exits");
    common::stop_worker(&ws);
    // The temporary directory is removed by its owner (this test), whatever the modes.
    std::fs::set_permissions(ws.join("locked"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn callers_right_after_a_start_misses_no_edit_made_while_the_first_walk_runs() {
    // A first `callers` after a start checks every file itself rather than wait for the
    // watcher's first walk. Edits made after that check and before the walk reached their
    // directories are no events: the first call after the watcher is ready must check every
    // file again, not take the watcher's word. The edits and the walk race: several starts,
    // and a tree of 12,000 directories, so that the walk is still running when they are made.
    const SITES: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let defs: String = (0..6).map(|k| format!("export function t{k}() {{}}\n")).collect();
    write(&ws, "lib/a.js", &defs);
    write(&ws, "pad.txt", "pad\n");
    for i in 0..12_000 {
        std::fs::create_dir_all(ws.join(format!("pad{}/p{i}", i % 40))).expect("mkdir");
    }
    let site = |i: usize| format!("s{i}/deep/c{i}.js");
    let call =
        |i: usize, k: usize| format!("import {{ t{k} }} from '../../lib/a.js';\nfunction f{i}() {{ t{k}(); }}\n");
    for i in 0..SITES {
        write(&ws, &site(i), &call(i, 0));
    }
    let callers = |gm: &mut Gm, k: usize| -> Vec<String> {
        let r = gm.js(&format!("const c = await gm.callers({{ symbol: 't{k}' }}); return c.callers.map(x => x.path);"));
        let mut paths: Vec<String> =
            r.as_array().expect("paths").iter().map(|p| p.as_str().unwrap_or("").to_owned()).collect();
        paths.sort();
        paths
    };
    let mut all: Vec<String> = (0..SITES).map(site).collect();
    all.sort();
    // In git, as most workspaces are: a first call then reads the file list from the cache,
    // not from a walk of its own, and is done long before the watcher's walk.
    let git = |args: &[&str]| {
        common::git(&ws, &[&["-c", "user.name=t", "-c", "user.email=t@example.invalid"], args].concat())
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "the tree"]);
    // The cache on disk, as a restart finds it.
    let mut gm = Gm::start_in(&ws, &[], &[]);
    gm.ready();
    assert_eq!(callers(&mut gm, 0), all);
    common::shut_down(gm);
    for start in 1..6 {
        let mut gm = Gm::start_in(&ws, &[], &[]);
        gm.ready();
        assert_eq!(callers(&mut gm, start - 1), all, "start {start}: the first call");
        for i in 0..SITES {
            write(&ws, &site(i), &call(i, start));
        }
        // A search waits for the watcher's first watches: they are in place after it.
        let fresh = gm.js("const s = await gm.search({ query: 'pad' }); return s.fresh;");
        assert_eq!(fresh, "watch", "start {start}");
        assert_eq!(callers(&mut gm, start), all, "start {start}: edits made while the first walk ran were missed");
        common::shut_down(gm);
    }
}

/// How many inotify instances process `pid` holds.
fn inotify_instances(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn an_idle_worker_gives_its_inotify_instance_back_and_the_next_call_sees_what_changed_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    common::git(&ws, &["init", "-q"]);
    write(&ws, "lib/a.js", "export function target() {}\nexport function caller() { target(); }\n");
    write(&ws, "notes.txt", "nothing here yet\n");
    common::git(&ws, &["add", "."]);
    let mut gm = Gm::start_in(&ws, &[], &[("GM_WATCH_IDLE_MS", "1500")]);
    gm.ready();
    let r = search_and_callers(&mut gm, "nothing");
    assert_eq!(r["fresh"], "watch", "{r}");
    assert_eq!(r["callers"], json!(["lib/a.js:2"]), "{r}");
    let pid = worker_pid(&ws);
    assert_eq!(inotify_instances(pid), 1, "watching");
    for round in 0..3 {
        // Idle: the instance (and every watch with it) is given back.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while inotify_instances(pid) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(inotify_instances(pid), 0, "round {round}: an idle worker holds no inotify instance");
        // Changed while nobody watched: the next call sees it, and watches again.
        write(&ws, "notes.txt", &format!("changed meanwhile round{round}\n"));
        write(
            &ws,
            "lib/a.js",
            &format!(
                "export function target() {{}}\nfunction c{round}() {{}}\nexport function caller() {{ target(); }}\n"
            ),
        );
        let r = search_and_callers(&mut gm, &format!("meanwhile round{round}"));
        assert_eq!(hit_paths(&r), ["notes.txt"], "round {round}: {r}");
        assert_eq!(r["callers"], json!(["lib/a.js:3"]), "round {round}: the moved call site: {r}");
        assert_eq!(r["fresh"], "watch", "round {round}: watching again: {r}");
        assert_eq!(inotify_instances(pid), 1, "round {round}: the instance is back");
    }
    let events = gm.events_of("watch");
    assert!(events.iter().any(|e| e["state"] == "released"), "{events:?}");
    common::shut_down(gm);
}

//! Fresh without a watcher: with the user's inotify instances used up (many editors, or a
//! hundred idle workers), gm's watcher cannot start — and a search right after an edit made
//! outside gm must still see it, every time, through the default surface and through tools.
//! Its own test binary: holding every inotify instance would starve the watchers of tests
//! running beside it, and cargo runs test binaries one at a time.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};

use common::Gm;
use serde_json::json;

use common::{search_hits as hits, write};

/// Every inotify instance this user may still make, held until dropped.
fn hold_every_inotify_instance() -> Vec<OwnedFd> {
    let mut held = Vec::new();
    while held.len() < 1 << 16 {
        // SAFETY: inotify_init1 returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            break;
        }
        // SAFETY: a descriptor just made and owned by nothing else.
        held.push(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // SAFETY: as above; this one must fail, or the limit was not reached.
    let spare = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    assert!(spare < 0, "inotify instances could not be used up");
    held
}

#[test]
fn with_the_users_inotify_instances_used_up_a_search_right_after_an_outside_edit_sees_it_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    common::git(d, &["init", "-q", "-b", "main"]);
    write(d, "src/alpha.rs", "fn alpha() {\n    let oldWord = 1;\n}\n");
    write(d, "src/beta.rs", "fn beta() {\n    let steady = 2;\n}\n");
    write(d, "lib/a.js", "export function target() {}\nexport function first() { target(); }\n");
    common::git(d, &["add", "."]);
    common::git(d, &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "init"]);

    let held = hold_every_inotify_instance();
    let mut gm = Gm::start_in(d, &[], &[]);
    gm.ready();
    let first = gm.js("return await gm.search({ query: 'old word' })");
    assert_eq!(first["fresh"], "rescan", "no watcher could be had: {first}");
    assert_eq!(hits(&first), ["src/alpha.rs:2"], "{first}");
    let watch = gm.events_of("watch");
    assert!(watch.iter().any(|e| e["state"] == "failed"), "the watcher says it failed: {watch:?}");

    for round in 0..6 {
        // gm writes the file, then something outside gm writes it again, another size.
        let ours = format!("fn alpha() {{\n    let ours{round} = 1;\n}}\n");
        gm.js(&format!("return await gm.write_file({{ path: 'src/alpha.rs', content: {} }})", json!(ours)));
        let theirs = format!("fn alpha() {{\n    let x = 0;\n    let outsideEdit{round} = 1;\n}}\n");
        write(d, "src/alpha.rs", &theirs);
        let r = gm.js(&format!("return await gm.search({{ query: 'outside edit{round}' }})"));
        assert_eq!(hits(&r), ["src/alpha.rs:3"], "round {round}: the outside edit is found at once: {r}");
        let r = gm.js(&format!("return await gm.search({{ query: 'ours{round}' }})"));
        assert!(hits(&r).is_empty(), "round {round}: gm's own, overwritten, is gone: {r}");
    }
    // A file replaced by another of the same size and mtime (a rename over it) is seen too.
    let before = std::fs::metadata(d.join("src/beta.rs")).expect("stat");
    write(d, "src/gamma.tmp", "fn beta() {\n    let stormy = 2;\n}\n");
    let tmp = d.join("src/gamma.tmp");
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .and_then(|f| f.set_modified(before.modified().expect("mtime")))
        .expect("set mtime");
    std::fs::rename(&tmp, d.join("src/beta.rs")).expect("rename");
    let r = gm.js("return await gm.search({ query: 'stormy' })");
    assert_eq!(hits(&r), ["src/beta.rs:2"], "same size and mtime, another inode: {r}");
    // callers too: the call moved to another function, in a file of the same size and mtime.
    let before = gm.js("return (await gm.callers({ symbol: 'target' })).callers.map(c => c.enclosing)");
    assert_eq!(before, json!(["first"]));
    let old = std::fs::metadata(d.join("lib/a.js")).expect("stat");
    write(d, "lib/a.tmp", "export function target() {}\nexport function other() { target(); }\n");
    std::fs::File::options()
        .write(true)
        .open(d.join("lib/a.tmp"))
        .and_then(|f| f.set_modified(old.modified().expect("mtime")))
        .expect("set mtime");
    std::fs::rename(d.join("lib/a.tmp"), d.join("lib/a.js")).expect("rename");
    let after = gm.js("return (await gm.callers({ symbol: 'target' })).callers.map(c => c.enclosing)");
    assert_eq!(after, json!(["other"]), "same size and mtime, another inode");
    drop(held);
    common::shut_down(gm);
}

//! The worker follows its inputs: a child server added to, changed in or removed from the
//! workspace's `.gm/mcp.json` while a session is connected is started (once approved),
//! asked about again, or stopped, with no worker restart. Through the real binary, with a HOME
//! of the test's own (approvals live in `~/.gmnew/trust.json`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::{json, Value};

fn test_server() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-test-server")
}

/// Writes the workspace's config with one server `late` whose command records its pid in
/// `late.pid` and writes `word` into `late.word`; `None` writes no server.
fn configure(ws: &Path, word: Option<&str>) {
    let servers = match word {
        Some(word) => json!({ "late": { "command": "sh", "args": ["-c",
            format!("echo $$ > late.pid; echo {word} > late.word; exec {} --name late", test_server())] } }),
        None => json!({}),
    };
    // Written beside and renamed, as editors do: a reader never sees half a file.
    let tmp = ws.join(".gm/mcp.json.tmp");
    std::fs::write(&tmp, json!({ "mcpServers": servers }).to_string()).expect("write");
    std::fs::rename(&tmp, ws.join(".gm/mcp.json")).expect("rename");
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn late_events(gm: &mut Gm) -> Vec<Value> {
    gm.events_of("mcp-server").into_iter().filter(|e| e["name"] == "late").collect()
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for this purpose: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

fn trust_yes(ws: &Path, home: &Path) {
    let out = common::gm_command()
        .args(["trust", "--yes"])
        .current_dir(ws)
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .expect("gm trust");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_server_added_while_a_session_is_connected_starts_once_approved_and_a_removed_one_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws: PathBuf = dir.path().canonicalize().expect("canonical");
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    configure(&ws, None);
    let env = [("HOME", home.path().to_str().expect("utf-8")), ("GM_CONFIG_POLL_MS", "100")];
    let mut gm = Gm::start_in(&ws, &[], &env);
    gm.ready();
    let err = gm.call_err("run_code", json!({ "code": "return await gm.late_echo({ x: 1 })" }));
    assert_eq!(err["details"]["code"], "unknown_verb", "{err}");

    // Added: the worker sees it, asks for approval (nothing runs), and starts it once approved.
    configure(&ws, Some("one"));
    wait_for("the new entry to wait for approval", Duration::from_secs(5), || {
        late_events(&mut gm).iter().any(|e| e["state"] == "untrusted").then_some(())
    });
    assert!(!ws.join("late.pid").exists(), "an unapproved server ran");
    let approved_at = Instant::now();
    trust_yes(&ws, home.path());
    wait_for("the approved server to start", Duration::from_secs(5), || {
        late_events(&mut gm).iter().any(|e| e["state"] == "approved" && e["how"] == "gm-trust").then_some(())
    });
    wait_for("its pid", Duration::from_secs(5), || std::fs::read_to_string(ws.join("late.pid")).ok());
    assert!(approved_at.elapsed() < Duration::from_secs(2), "started {:?} after approval", approved_at.elapsed());
    // The connected session hears that run_code's tools changed, with no call of its own.
    wait_for("tools/list_changed", Duration::from_secs(5), || {
        let m = gm.recv(Duration::from_millis(200))?;
        (m["method"] == "notifications/tools/list_changed").then_some(())
    });
    let r = gm.js("return await gm.late_echo({ x: 1 })");
    assert!(r.to_string().contains('1'), "{r}");
    let first: i32 = std::fs::read_to_string(ws.join("late.pid")).expect("pid").trim().parse().expect("a pid");
    assert!(alive(first));

    // A half-written or broken file changes nothing: the running server stays.
    std::fs::write(ws.join(".gm/mcp.json"), "{ \"mcpServers\": { \"late\": ").expect("write");
    wait_for("the problem to be logged", Duration::from_secs(5), || {
        gm.events_of("mcp-config").iter().any(|e| e["kept"].is_string()).then_some(())
    });
    assert!(alive(first), "a broken config stopped a running server");
    assert!(!late_events(&mut gm).iter().any(|e| e["state"] == "removed"));

    // Changed: the old process ends, and the new form waits for approval again.
    configure(&ws, Some("two"));
    wait_for("the changed entry to be stopped", Duration::from_secs(5), || {
        late_events(&mut gm).iter().any(|e| e["state"] == "changed").then_some(())
    });
    wait_for("the old process to end", Duration::from_secs(5), || (!alive(first)).then_some(()));
    let untrusted = late_events(&mut gm).iter().filter(|e| e["state"] == "untrusted").count();
    assert_eq!(untrusted, 2, "the changed workspace entry is shown as untrusted again");
    assert_eq!(std::fs::read_to_string(ws.join("late.word")).expect("word").trim(), "one", "nothing new ran");
    trust_yes(&ws, home.path());
    wait_for("the new form to run", Duration::from_secs(5), || {
        std::fs::read_to_string(ws.join("late.word")).ok().filter(|w| w.trim() == "two")
    });
    let second: i32 = wait_for("its pid", Duration::from_secs(5), || {
        std::fs::read_to_string(ws.join("late.pid")).ok()?.trim().parse().ok().filter(|p| *p != first)
    });

    // Removed: its process ends and its tools are gone.
    configure(&ws, None);
    wait_for("the removed server's process to end", Duration::from_secs(5), || (!alive(second)).then_some(()));
    assert!(late_events(&mut gm).iter().any(|e| e["state"] == "removed"));
    let err = gm.call_err("run_code", json!({ "code": "return await gm.late_echo({ x: 1 })" }));
    assert_eq!(err["details"]["code"], "unknown_verb", "{err}");
    common::shut_down(gm);
}

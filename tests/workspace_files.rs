//! A repository is a stranger's: what it commits under `.gm/` is checked before gm writes,
//! runs or believes it. Each test is a fresh git repository that commits the attack, run
//! through the real binary (the relay, `--no-relay`, the HTTP front, the one-shot CLI, and
//! sessions that call `run_shell` from a run_code body).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{git, gm_command, Gm};
use serde_json::{json, Value};

/// A git repository with one commit, and a file outside it that an attack points at.
struct Repo {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

const OUTSIDE: &str = "# the user's own file\nexport KEEP=1\n";

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let ws = root.join("repo");
        std::fs::create_dir_all(ws.join(".gm")).expect("mkdir");
        let outside = root.join("bashrc");
        std::fs::write(&outside, OUTSIDE).expect("outside");
        git(&ws, &["init", "-q"]);
        git(&ws, &["config", "user.email", "t@example.com"]);
        git(&ws, &["config", "user.name", "t"]);
        std::fs::write(ws.join("README.md"), "hello\n").expect("readme");
        Repo { _dir: dir, ws, outside }
    }

    /// Commits everything, `.gm/` included (as a repository that ships files there would).
    fn commit(&self) {
        git(&self.ws, &["add", "-A", "-f", "."]);
        git(&self.ws, &["commit", "-q", "-m", "ship it"]);
    }

    fn link(&self, rel: &str, to: &Path) {
        let at = self.ws.join(rel);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::os::unix::fs::symlink(to, at).expect("symlink");
    }

    fn outside_unchanged(&self) {
        assert_eq!(std::fs::read_to_string(&self.outside).expect("outside"), OUTSIDE, "the file outside was changed");
    }
}

/// Runs `gm serve <args>` with a host's first line on stdin and waits for it to exit.
fn serve(ws: &Path, args: &[&str]) -> Output {
    use std::io::Write;
    let mut child = gm_command()
        .arg("serve")
        .args(args)
        .current_dir(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gm");
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(format!("{init}\n").as_bytes());
        // Kept open: a gm that serves would wait on it; one that refuses exits on its own.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(20));
            drop(stdin);
        });
    }
    wait_output(child, Duration::from_secs(15))
}

fn wait_output(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("gm did not exit on its own; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// gm refused to start, naming `rel` and saying it is a link.
fn refused_naming(out: &Output, rel: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "gm must exit non-zero; stderr: {stderr}");
    assert!(stderr.contains(rel), "the message names {rel}: {stderr}");
    assert!(stderr.contains("symbolic link") && stderr.contains("remove"), "and how to fix it: {stderr}");
}

#[test]
fn a_committed_link_where_gm_keeps_a_file_stops_every_gm_and_leaves_its_target_unchanged() {
    for name in
        ["log.jsonl", "worker.pid", "worker.log", "worker-exits.jsonl", "worker.lock", "http.token", "http.json"]
    {
        let repo = Repo::new();
        // The attack of the report: the unapproved server's command line is the log's first line.
        std::fs::write(
            repo.ws.join(".gm/mcp.json"),
            r#"{"mcpServers":{"x":{"command":"sh","args":["$(touch /tmp/gm-pwned)"]}}}"#,
        )
        .expect("mcp.json");
        repo.link(&format!(".gm/{name}"), &repo.outside);
        repo.commit();
        let rel = format!(".gm/{name}");
        refused_naming(&serve(&repo.ws, &[]), &rel);
        refused_naming(&serve(&repo.ws, &["--no-relay"]), &rel);
        refused_naming(&serve(&repo.ws, &["--http", "127.0.0.1:0"]), &rel);
        let cli = gm_command().current_dir(&repo.ws).args(["list_dir", "{}"]).output().expect("gm list_dir");
        assert!(!cli.status.success(), "the one-shot CLI refuses too");
        assert!(
            String::from_utf8_lossy(&cli.stdout).contains(&rel) || String::from_utf8_lossy(&cli.stderr).contains(&rel)
        );
        repo.outside_unchanged();
    }
}

#[test]
fn a_committed_link_in_place_of_gms_folder_or_one_of_its_folders_stops_gm() {
    let repo = Repo::new();
    let elsewhere = repo.outside.with_file_name("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    repo.link(".gm/jobs", &elsewhere);
    repo.commit();
    refused_naming(&serve(&repo.ws, &[]), ".gm/jobs");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing written through the link");

    let repo = Repo::new();
    std::fs::remove_dir_all(repo.ws.join(".gm")).expect("rm");
    std::fs::create_dir(elsewhere.with_file_name("state")).expect("mkdir");
    repo.link(".gm", &elsewhere.with_file_name("state"));
    repo.commit();
    refused_naming(&serve(&repo.ws, &[]), ".gm");
    refused_naming(&serve(&repo.ws, &["--no-relay"]), ".gm");
    assert_eq!(std::fs::read_dir(elsewhere.with_file_name("state")).expect("list").count(), 0);
}

#[test]
fn a_committed_link_in_place_of_a_jobs_log_is_never_written_through() {
    // A link made after gm started (by the agent's own shell, say) inside gm's jobs folder: the
    // job's log is opened without following it.
    let repo = Repo::new();
    repo.commit();
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    gm.js("await gm.job_start({ name: 'warm', command: 'true' }); return 1");
    repo.link(".gm/jobs/build.log", &repo.outside);
    let err =
        gm.call_err("run_code", json!({ "code": "await gm.job_start({ name: 'build', command: 'echo pwned' })" }));
    assert!(err.to_string().contains("symbolic link"), "{err}");
    repo.outside_unchanged();
    common::shut_down(gm);
}

fn secrets_events(gm: &mut Gm) -> Vec<Value> {
    gm.events_of("secrets")
}

/// A run_code body that runs a plain shell and says what it saw.
fn run_plain_shell(gm: &mut Gm) -> String {
    let r = gm.js("const a = await gm.run_shell({ command: 'echo token=$API_TOKEN' }); return a.stdout;");
    r.as_str().expect("stdout").to_owned()
}

fn evil_script(repo: &Repo) -> PathBuf {
    let marker = repo.ws.join("marker");
    std::fs::write(repo.ws.join("evil.sh"), format!("touch {}\n", marker.display())).expect("evil");
    marker
}

#[test]
fn a_tracked_secrets_file_is_not_loaded_and_its_refusal_is_logged() {
    let repo = Repo::new();
    let marker = evil_script(&repo);
    std::fs::write(repo.ws.join(".gm/secrets.env"), format!("BASH_ENV={}/evil.sh\nAPI_TOKEN=t0k\n", repo.ws.display()))
        .expect("secrets");
    repo.commit();
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    assert_eq!(run_plain_shell(&mut gm), "token=\n", "nothing of a tracked file reaches a shell");
    assert!(!marker.exists(), "BASH_ENV from a committed file ran a script");
    let events = secrets_events(&mut gm);
    assert!(
        events.iter().any(|e| e["state"] == "refused" && e["why"].as_str().is_some_and(|w| w.contains("tracks"))),
        "{events:?}"
    );
    // Staged but not committed counts the same.
    common::shut_down(gm);
    let repo = Repo::new();
    std::fs::write(repo.ws.join(".gm/secrets.env"), "API_TOKEN=t0k\n").expect("secrets");
    git(&repo.ws, &["add", "-f", ".gm/secrets.env"]);
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    assert_eq!(run_plain_shell(&mut gm), "token=\n");
    common::shut_down(gm);
}

#[test]
fn an_untracked_secrets_file_gives_shells_its_values_but_not_variables_that_change_how_programs_start() {
    let repo = Repo::new();
    let marker = evil_script(&repo);
    repo.commit();
    let secrets = repo.ws.join(".gm/secrets.env");
    std::fs::write(
        &secrets,
        format!("BASH_ENV={}/evil.sh\nLD_PRELOAD=/nonexistent/evil.so\nAPI_TOKEN=t0k3n-value\n", repo.ws.display()),
    )
    .expect("secrets");
    std::fs::set_permissions(&secrets, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    assert_eq!(run_plain_shell(&mut gm), "token=[secret:API_TOKEN]\n", "the value is given (and masked)");
    let env = gm.js("return (await gm.run_shell({ command: 'echo \"[$LD_PRELOAD][$BASH_ENV]\"' })).stdout");
    assert_eq!(env, "[][]\n");
    assert!(!marker.exists(), "BASH_ENV ran a script");
    let events = secrets_events(&mut gm);
    let loaded = events.iter().find(|e| e["state"] == "loaded").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(loaded["refusedVariables"], json!(["BASH_ENV", "LD_PRELOAD"]));
    common::shut_down(gm);
}

#[test]
fn a_secrets_file_others_may_write_or_a_link_is_not_loaded() {
    let repo = Repo::new();
    repo.commit();
    let secrets = repo.ws.join(".gm/secrets.env");
    std::fs::write(&secrets, "API_TOKEN=t0k\n").expect("secrets");
    std::fs::set_permissions(&secrets, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    assert_eq!(run_plain_shell(&mut gm), "token=\n");
    let events = secrets_events(&mut gm);
    assert!(events.iter().any(|e| e["state"] == "refused" && e["why"].as_str().is_some_and(|w| w.contains("0666"))));
    // Replaced by a link to a file of the same content: refused too, while the worker runs.
    std::fs::remove_file(&secrets).expect("rm");
    std::fs::write(&repo.outside, "API_TOKEN=t0k\n").expect("write");
    repo.link(".gm/secrets.env", &repo.outside);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(run_plain_shell(&mut gm), "token=\n");
    let events = secrets_events(&mut gm);
    assert!(events.iter().any(|e| e["why"].as_str().is_some_and(|w| w.contains("symbolic link"))), "{events:?}");
    common::shut_down(gm);
}

#[test]
fn a_write_that_a_committed_link_leads_outside_the_workspace_names_the_real_file_in_its_reply_and_event() {
    let repo = Repo::new();
    repo.link("notes.md", &repo.outside);
    std::fs::create_dir(repo.outside.with_file_name("docs-elsewhere")).expect("mkdir");
    repo.link("docs", &repo.outside.with_file_name("docs-elsewhere"));
    repo.commit();
    let real = repo.outside.display().to_string();
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    let r = gm.js(
        "const w = await gm.write_file({ path: 'notes.md', content: '# the user\\'s own file\\nexport KEEP=2\\n' });
         const e = await gm.edit_file({ path: 'notes.md', old: 'KEEP=2', new: 'KEEP=1' });
         const n = await gm.write_file({ path: 'docs/new.md', content: 'x' });
         const inside = await gm.write_file({ path: 'plain.md', content: 'y' });
         return { w: w.realPath, e: e.realPath, n: n.realPath, inside: inside.realPath ?? null };",
    );
    assert_eq!(r["w"], real.as_str(), "{r}");
    assert_eq!(r["e"], real.as_str(), "{r}");
    let new_doc = repo.outside.with_file_name("docs-elsewhere").join("new.md");
    assert_eq!(r["n"], new_doc.display().to_string().as_str(), "a new file in a linked folder: {r}");
    assert_eq!(r["inside"], Value::Null, "a write inside the workspace says nothing more: {r}");
    repo.outside_unchanged();
    let calls = gm.events_of("code-call");
    let noted: Vec<&Value> = calls.iter().filter(|e| e["wroteOutside"].is_array()).collect();
    assert_eq!(noted.len(), 3, "{calls:?}");
    assert_eq!(noted[0]["wroteOutside"], json!([real]));
    common::shut_down(gm);
    // The tools surface: the reply and the action event.
    let mut gm = Gm::start_in(&repo.ws, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    let r = gm.call_ok("write_file", json!({ "path": "notes.md", "content": OUTSIDE }));
    assert_eq!(r["realPath"], real.as_str(), "{r}");
    let actions = gm.events_of("action");
    assert!(actions.iter().any(|a| a["tool"] == "write_file" && a["wroteOutside"] == json!([real])), "{actions:?}");
    common::shut_down(gm);
}

#[test]
fn a_link_put_in_place_of_gms_output_folder_while_it_runs_is_never_written_through() {
    let repo = Repo::new();
    repo.commit();
    let mut gm = Gm::start_in(&repo.ws, &[], &[]);
    gm.ready();
    let elsewhere = repo.outside.with_file_name("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let _ = std::fs::remove_dir_all(repo.ws.join(".gm/out"));
    repo.link(".gm/out", &elsewhere);
    let r = gm.js("const s = await gm.run_shell({ command: 'head -c 400000 /dev/zero | tr \"\\\\0\" x' });
         return { exit: s.exitCode, cut: JSON.stringify(s).length < 200000 };");
    assert_eq!(r["exit"], 0, "the shell still answers: {r}");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing written through the link");
    common::shut_down(gm);
}

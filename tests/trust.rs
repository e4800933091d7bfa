//! Consent for a workspace's servers, through the real binary: a repository's `.gm/mcp.json`
//! that tries to run a command when gm opens it runs nothing until the user approved that exact
//! entry with `gm trust`; a changed entry needs approval again. Each test has a HOME of its own
//! (approvals live in `~/.gmnew/trust.json`).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::Gm;
use serde_json::{json, Value};

fn test_server() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-test-server")
}

/// A value in gm's environment that a workspace entry asks for with `${...}`: it must never
/// reach the log, nor a server the user did not approve.
const SECRET: &str = "s3cr3t-api-key-value";

/// A workspace whose `.gm/mcp.json` names a server that writes `marker` when it starts (then
/// serves MCP), asking for the user's secret in its environment.
struct Repo {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        let repo = Repo { _dir: dir, ws, home: tempfile::tempdir().expect("home") };
        repo.configure("started");
        repo
    }

    /// Writes the entry; `word` is what its command writes into `marker`.
    fn configure(&self, word: &str) {
        std::fs::create_dir_all(self.ws.join(".gm")).expect(".gm");
        let script = format!("echo {word} > marker; exec {} --name evil", test_server());
        let servers =
            json!({ "evil": { "command": "sh", "args": ["-c", script], "env": { "TOKEN": "${GM_TEST_SECRET}" } } });
        std::fs::write(self.ws.join(".gm/mcp.json"), json!({ "mcpServers": servers }).to_string()).expect("mcp.json");
    }

    fn marker(&self) -> PathBuf {
        self.ws.join("marker")
    }

    /// gm serving the workspace with this HOME, the secret in its environment, the read gate open.
    fn serve(&self, args: &[&str]) -> Gm {
        let home = self.home.path().to_str().expect("utf-8");
        let mut gm = Gm::start_in(&self.ws, args, &[("HOME", home), ("GM_TEST_SECRET", SECRET)]);
        gm.ready();
        gm
    }

    /// `gm trust <args>` in the workspace, stdin not a terminal.
    fn trust(&self, args: &[&str]) -> Output {
        common::gm_command()
            .arg("trust")
            .args(args)
            .current_dir(&self.ws)
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .output()
            .expect("gm trust runs")
    }

    fn trust_file(&self) -> PathBuf {
        self.home.path().join(".gmnew/trust.json")
    }
}

impl Repo {
    /// Replaces the workspace's entries with the one server `evil` = `entry`.
    fn configure_entry(&self, entry: Value) {
        std::fs::create_dir_all(self.ws.join(".gm")).expect(".gm");
        let config = json!({ "mcpServers": { "evil": entry } });
        std::fs::write(self.ws.join(".gm/mcp.json"), config.to_string()).expect("mcp.json");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn server_events(gm: &mut Gm, name: &str) -> Vec<Value> {
    gm.events_of("mcp-server").into_iter().filter(|e| e["name"] == name).collect()
}

/// The whole log, as text.
fn log_text(gm: &mut Gm) -> String {
    gm.log_events().iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
}

/// Checks that the server was not started: its untrusted event shows what it would run, a
/// body's call fails `untrusted` saying how to approve, and nothing ran.
fn assert_blocked(repo: &Repo, gm: &mut Gm, word: &str) {
    let events = server_events(gm, "evil");
    let untrusted = events.iter().find(|e| e["state"] == "untrusted").unwrap_or_else(|| panic!("{events:?}"));
    let line = untrusted["commandLine"].as_str().expect("commandLine");
    assert!(line.starts_with("sh -c 'echo ") && line.contains(&format!("echo {word} > marker")), "{line}");
    assert_eq!(untrusted["cwd"], repo.ws.to_str().expect("utf-8"));
    assert_eq!(untrusted["envNames"], json!(["TOKEN"]));
    assert!(untrusted["approve"].as_str().expect("approve").starts_with("gm trust --workspace "));
    assert!(!events.iter().any(|e| e["state"] == "starting"), "it was started: {events:?}");

    let err = gm.call_err("run_code", json!({ "code": "return await gm.evil_echo({ x: 1 });" }));
    assert_eq!(err["details"]["code"], "untrusted", "{err}");
    let message = err["message"].as_str().expect("message");
    assert!(message.contains("gm trust --workspace") && message.contains("echo "), "{message}");
    assert_eq!(err["details"]["server"]["envNames"], json!(["TOKEN"]));
    let call = gm.events_of("code-call").into_iter().rev().find(|e| e["verb"] == "evil_echo").expect("logged");
    assert_eq!(call["error"], "untrusted");

    // A started server would have written the marker long before the body's answer.
    gm.ok("ping", json!({}));
    assert!(!repo.marker().exists(), "the workspace's command ran");
    let log = log_text(gm);
    assert!(!log.contains(SECRET), "the user's secret reached the log");
    assert!(!log.contains("GM_TEST_SECRET"), "an env value, even as written, reached the log");
}

#[test]
fn a_workspace_server_runs_nothing_until_approved_then_starts_at_the_next_call() {
    let repo = Repo::new();
    let mut gm = repo.serve(&[]);
    assert_blocked(&repo, &mut gm, "started");

    // Without a terminal and without --yes: the entry is shown in full, nothing is approved.
    let out = repo.trust(&[]);
    assert!(!out.status.success());
    let shown = text(&out.stdout);
    assert!(shown.contains("command: sh -c 'echo started > marker; exec "), "{shown}");
    assert!(shown.contains("TOKEN='${GM_TEST_SECRET}'"), "env as written, unexpanded: {shown}");
    assert!(text(&out.stderr).contains("rerun with --yes"), "{}", text(&out.stderr));
    assert!(!repo.trust_file().exists(), "nothing was approved");

    let out = repo.trust(&["--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Approved: evil."), "{}", text(&out.stdout));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(repo.trust_file()).expect("trust.json").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // The running gm starts it at its next call: approved in trust.json since. Two calls at
    // once: one starts it, the other waits for that start.
    let r = gm.js("const [e, e2] = await Promise.all([gm.evil_echo({ x: 1 }), gm.evil_echo({ x: 2 })]);
         const t = await gm.evil_env({ name: 'TOKEN' }); return { e, e2, t };");
    assert_eq!(r["e"]["structuredContent"]["echo"], json!({ "x": 1 }), "{r}");
    assert_eq!(r["e2"]["structuredContent"]["echo"], json!({ "x": 2 }), "{r}");
    assert!(r["t"].to_string().contains(SECRET), "${{NAME}} is expanded once approved: {r}");
    assert_eq!(std::fs::read_to_string(repo.marker()).expect("marker").trim(), "started");
    let events = server_events(&mut gm, "evil");
    assert_eq!(events.iter().filter(|e| e["state"] == "approved").count(), 1, "started once: {events:?}");
    assert!(events.iter().any(|e| e["state"] == "ready"), "{events:?}");
    gm.close_stdin();
    gm.wait_exit(common::TIMEOUT).expect("gm exits");
    // The worker outlives the session: stop it, so the next gm starts one that reads the approval.
    common::stop_worker(&repo.ws);

    // A new gm starts it with gm, as any approved server.
    std::fs::remove_file(repo.marker()).expect("rm marker");
    let mut gm = repo.serve(&[]);
    assert_eq!(gm.js("return (await gm.evil_echo({ y: 2 })).structuredContent.echo.y"), 2);
    assert!(repo.marker().exists());
    let log = gm.log_events();
    let this_run = &log[log.iter().rposition(|e| e["kind"] == "start").expect("a start event")..];
    assert!(
        !this_run.iter().any(|e| e["kind"] == "mcp-server" && e["state"] == "untrusted"),
        "this gm started it with the others: {this_run:?}"
    );
}

#[test]
fn an_approved_entry_whose_args_change_is_blocked_again() {
    let repo = Repo::new();
    assert!(repo.trust(&["--yes"]).status.success());
    // The repository changes the command after it was approved (a pull, a branch switch).
    repo.configure("changed");
    let mut gm = repo.serve(&[]);
    assert_blocked(&repo, &mut gm, "changed");
    let out = repo.trust(&["--list"]);
    assert!(text(&out.stdout).contains("[changed since: needs approval again]"), "{}", text(&out.stdout));
    let shown = text(&repo.trust(&[]).stdout);
    assert!(shown.contains("echo changed > marker"), "the changed entry is asked about: {shown}");
}

#[test]
fn the_same_entry_in_another_workspace_is_not_approved() {
    let repo = Repo::new();
    assert!(repo.trust(&["--yes"]).status.success());
    let other = tempfile::tempdir().expect("other");
    let other_ws = other.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(other_ws.join(".gm")).expect(".gm");
    std::fs::copy(repo.ws.join(".gm/mcp.json"), other_ws.join(".gm/mcp.json")).expect("copy");
    let home = repo.home.path().to_str().expect("utf-8");
    let mut gm = Gm::start_in(&other_ws, &[], &[("HOME", home)]);
    gm.ready();
    let err = gm.call_err("run_code", json!({ "code": "return await gm.evil_echo({});" }));
    assert_eq!(err["details"]["code"], "untrusted");
    assert!(!other_ws.join("marker").exists());
}

#[test]
fn list_and_revoke_show_and_remove_this_workspaces_approvals() {
    let repo = Repo::new();
    let out = repo.trust(&["--list"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("No approvals"), "{}", text(&out.stdout));
    assert!(repo.trust(&["--yes"]).status.success());
    let listed = text(&repo.trust(&["--list"]).stdout);
    assert!(listed.contains("evil: sh -c 'echo started > marker;") && listed.contains("env: TOKEN"), "{listed}");
    assert!(!listed.contains("changed since"), "{listed}");

    let out = repo.trust(&["--revoke", "nope"]);
    assert!(!out.status.success(), "an unknown name is an error");
    assert!(text(&out.stderr).contains("nope has no approval"), "{}", text(&out.stderr));
    let out = repo.trust(&["--revoke", "evil"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Revoked in"), "{}", text(&out.stdout));
    let mut gm = repo.serve(&[]);
    assert_blocked(&repo, &mut gm, "started");
    drop(gm);

    assert!(repo.trust(&["--yes"]).status.success());
    let out = repo.trust(&["--revoke"]);
    assert!(out.status.success(), "every approval of the workspace: {}", text(&out.stderr));
    assert!(text(&repo.trust(&["--list"]).stdout).contains("No approvals"));
}

// util-linux's `script` gives gm trust a terminal; BSD's takes other flags.
#[cfg(target_os = "linux")]
#[test]
fn on_a_terminal_each_server_is_asked_about_and_only_yes_approves() {
    let repo = Repo::new();
    let gm = common::gm_bin();
    let ask = |answer: &str| {
        // `script` gives gm trust a terminal (a pty) and types the answer into it.
        let cmd = format!("{gm} trust --workspace '{}'", repo.ws.display());
        let mut child = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env("HOME", repo.home.path())
            .env("GM_DEFAULTS_DIR", common::no_child_servers())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script (util-linux) runs");
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(answer.as_bytes()).expect("answer");
        child.wait_with_output().expect("gm trust ends")
    };
    let out = ask("n\n");
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Approve evil? [y/N]"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Nothing was approved."), "{}", text(&out.stdout));
    assert!(!repo.trust_file().exists());
    let out = ask("\n");
    assert!(text(&out.stdout).contains("Nothing was approved."), "no answer is no: {}", text(&out.stdout));
    let out = ask("y\n");
    assert!(text(&out.stdout).contains("Approved: evil."), "{}", text(&out.stdout));
    assert!(text(&repo.trust(&["--list"]).stdout).contains("evil: sh -c"));
}

#[test]
fn the_users_own_configs_need_no_approval() {
    let repo = Repo::new();
    std::fs::remove_file(repo.ws.join(".gm/mcp.json")).expect("rm");
    // The --mcp-config file, named by the user in the host's config.
    let named = repo.home.path().join("servers.json");
    let entry = json!({ "command": test_server(), "args": ["--name", "mine"] });
    std::fs::write(&named, json!({ "mcpServers": { "mine": entry } }).to_string()).expect("write");
    let mut gm = repo.serve(&["--mcp-config", named.to_str().expect("utf-8")]);
    assert_eq!(gm.js("return (await gm.mine_echo({ z: 3 })).structuredContent.echo.z"), 3);
    common::shut_down(gm);

    // defaults/mcp.json, shipped with gm.
    let defaults = tempfile::tempdir().expect("defaults");
    std::fs::write(defaults.path().join("mcp.json"), json!({ "mcpServers": { "shipped": entry } }).to_string())
        .expect("write");
    let home = repo.home.path().to_str().expect("utf-8");
    let mut gm =
        Gm::start_in(&repo.ws, &[], &[("HOME", home), ("GM_DEFAULTS_DIR", defaults.path().to_str().expect("utf-8"))]);
    gm.ready();
    assert_eq!(gm.js("return (await gm.shipped_echo({ z: 4 })).structuredContent.echo.z"), 4);
}

#[test]
fn a_workspace_entry_that_takes_a_shipped_servers_name_needs_approval() {
    let repo = Repo::new();
    let defaults = tempfile::tempdir().expect("defaults");
    let entry = json!({ "command": test_server(), "args": ["--name", "evil"] });
    std::fs::write(defaults.path().join("mcp.json"), json!({ "mcpServers": { "evil": entry } }).to_string())
        .expect("write");
    let home = repo.home.path().to_str().expect("utf-8");
    let mut gm = Gm::start_in(
        &repo.ws,
        &[],
        &[("HOME", home), ("GM_DEFAULTS_DIR", defaults.path().to_str().expect("utf-8")), ("GM_TEST_SECRET", SECRET)],
    );
    gm.ready();
    assert_blocked(&repo, &mut gm, "started");
}

#[test]
fn an_entry_that_would_not_start_anyway_is_not_asked_about() {
    let repo = Repo::new();
    let servers =
        json!({ "off": { "command": "sh", "disabled": true }, "remote": { "url": "https://example.invalid/mcp" } });
    std::fs::write(repo.ws.join(".gm/mcp.json"), json!({ "mcpServers": servers }).to_string()).expect("write");
    let out = repo.trust(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("No server of"), "{}", text(&out.stdout));
}

/// The API the server uses to approve at run time (when the user said yes through the host),
/// on a real child process, with approvals in a real store.
#[actix_rt::test]
async fn a_server_approved_at_run_time_is_recorded_started_and_answers() {
    use actix::Actor;
    use gm::children::{ApproveError, Children};
    use gm::mcp_config::{Config, Layer, Named};
    use gm::trust::TrustStore;

    let repo = Repo::new();
    let script = format!("echo started > marker; exec {} --name evil", test_server());
    let named = Named {
        name: "evil".into(),
        entry: serde_json::from_value(json!({ "command": "sh", "args": ["-c", script] })).expect("entry"),
        from: repo.ws.join(".gm/mcp.json").display().to_string(),
        layer: Layer::Workspace,
    };
    let config = Config { servers: vec![named], ..Config::default() };
    let (writer, _) =
        gm_actors::log_writer::LogWriter::open(&repo.ws.join(".gm/log.jsonl"), "run-time-approval").expect("log");
    let store = TrustStore::at(&repo.home.path().join(".gmnew"));
    let native = |name: &str| gm::verbs::find(name).is_some();
    let children = Children::start_with(&config, &repo.ws, writer.start(), 0, native, Ok(store.clone()), None);

    let pending = children.pending();
    assert_eq!(pending.len(), 1);
    assert!(pending[0].command_line.starts_with("sh -c 'echo started > marker; exec "), "{pending:?}");
    assert_eq!(children.waiting_for("evil_echo").map(|p| p.name), Some("evil".into()));
    assert_eq!(children.waiting_for("other_echo"), None);
    assert!(children.find("evil_echo").is_none());
    assert!(!repo.marker().exists());

    children.approve("evil").expect("approved");
    assert!(store.approved(&repo.ws, "evil", &pending[0].sha256).expect("store"), "recorded as gm trust would");
    assert!(children.pending().is_empty());
    // A call waits for the server it started.
    let cancel = gm_actors::cancel::CancelToken::default();
    let tool = children.find_or_start("evil_echo", &cancel).await.expect("started").expect("its tools are there");
    assert!(repo.marker().exists(), "started by the time its first call found it");
    let r = children.call(&tool, json!({ "k": 1 }), &cancel, None).await.expect("call");
    assert_eq!(r["structuredContent"]["echo"], json!({ "k": 1 }));
    assert!(matches!(children.approve("evil"), Err(ApproveError::NotWaiting(_))));
    assert!(matches!(children.approve("nobody"), Err(ApproveError::NotWaiting(_))));
    children.stop().await;
}

/// gm serving the workspace for a client that declared `elicitation`, the read gate open.
fn serve_askable(repo: &Repo) -> Gm {
    let home = repo.home.path().to_str().expect("utf-8");
    let mut gm = Gm::start_in(&repo.ws, &[], &[("HOME", home), ("GM_TEST_SECRET", SECRET)]);
    gm.ok(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": { "elicitation": {} }, "clientInfo": { "name": "asker", "version": "0" } }),
    );
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    gm.read_skill();
    gm
}

/// Sends a body calling the workspace server and returns gm's question (an
/// `elicitation/create` request).
fn call_and_get_asked(gm: &mut Gm, id: i64) -> Value {
    let code = "return (await gm.evil_echo({ x: 7 })).structuredContent.echo.x;";
    gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } }));
    let question = gm.recv(common::TIMEOUT).expect("gm asks before answering");
    assert_eq!(question["method"], "elicitation/create", "{question}");
    question
}

#[test]
fn a_client_that_accepts_gets_the_server_started_in_the_same_call() {
    let repo = Repo::new();
    let mut gm = serve_askable(&repo);
    let question = call_and_get_asked(&mut gm, 41);
    let message = question["params"]["message"].as_str().expect("message");
    assert!(message.contains("sh -c 'echo started > marker;"), "the whole command: {message}");
    // The value as written (it says which of the user's variables the server reads), never
    // the user's value.
    assert!(message.contains("  TOKEN='${GM_TEST_SECRET}'\n") && !message.contains(SECRET), "{message}");
    assert!(message.contains(repo.ws.to_str().expect("utf-8")), "the folder: {message}");
    assert!(!repo.marker().exists(), "nothing runs before the answer");
    gm.send(&json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "accept", "content": { "approve": true } } }));
    let reply = gm.recv_id(&json!(41));
    assert_eq!(reply["result"]["structuredContent"]["result"], 7, "the same call went on: {reply}");
    assert_eq!(std::fs::read_to_string(repo.marker()).expect("marker").trim(), "started");
    let listed = text(&repo.trust(&["--list"]).stdout);
    assert!(listed.contains("evil"), "the approval is kept as gm trust keeps it: {listed}");
    let answers: Vec<Value> = gm.events_of("consent").into_iter().filter(|e| e["answer"].is_string()).collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["answer"], "approved");
    assert!(!log_text(&mut gm).contains(SECRET));
}

#[test]
fn a_client_that_declines_gets_untrusted_once_and_is_not_asked_again() {
    let repo = Repo::new();
    let mut gm = serve_askable(&repo);
    let question = call_and_get_asked(&mut gm, 51);
    gm.send(&json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "decline" } }));
    let reply = gm.recv_id(&json!(51));
    assert_eq!(reply["result"]["structuredContent"]["error"]["details"]["code"], "untrusted", "{reply}");
    // The next call fails at once: the first message is its answer, not a second question.
    gm.send(&json!({ "jsonrpc": "2.0", "id": 52, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return await gm.evil_echo({});" } } }));
    let next = gm.recv(common::TIMEOUT).expect("an answer");
    assert_eq!(next["id"], 52, "asked again: {next}");
    assert_eq!(next["result"]["structuredContent"]["error"]["details"]["code"], "untrusted", "{next}");
    assert!(!repo.marker().exists());
    assert!(!repo.trust_file().exists() || !text(&repo.trust(&["--list"]).stdout).contains("evil"));
}

#[test]
fn a_client_without_elicitation_is_never_asked() {
    let repo = Repo::new();
    let mut gm = repo.serve(&[]);
    gm.send(&json!({ "jsonrpc": "2.0", "id": 61, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return await gm.evil_echo({});" } } }));
    let first = gm.recv(common::TIMEOUT).expect("an answer");
    assert_eq!(first["id"], 61, "{first}");
    assert_eq!(first["result"]["structuredContent"]["error"]["details"]["code"], "untrusted");
}

/// The stateless revision's envelope, for a client that can (or cannot) be asked.
fn envelope(elicitation: bool) -> Value {
    let capabilities = if elicitation { json!({ "elicitation": { "form": {} } }) } else { json!({}) };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// gm serving the workspace to a 2026-07-28 client (no initialize), the read gate open.
fn serve_stateless(repo: &Repo) -> Gm {
    let home = repo.home.path().to_str().expect("utf-8");
    let mut gm = Gm::start_in(&repo.ws, &[], &[("HOME", home), ("GM_TEST_SECRET", SECRET)]);
    gm.ok("resources/read", json!({ "uri": "skill://gm/SKILL.md", "_meta": envelope(true) }));
    gm
}

fn stateless_call(gm: &mut Gm, id: i64, extra: Value) -> Value {
    let code = "return (await gm.evil_echo({ x: 7 })).structuredContent.echo.x;";
    let mut params = json!({ "name": "run_code", "arguments": { "code": code }, "_meta": envelope(true) });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }));
    gm.recv_id(&json!(id))
}

#[test]
fn a_stateless_client_is_asked_in_the_calls_result_and_its_retry_gets_the_same_bodys_result() {
    let repo = Repo::new();
    let mut gm = serve_stateless(&repo);
    let first = stateless_call(&mut gm, 71, json!({}));
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let question = &result["inputRequests"]["consent"];
    assert_eq!(question["method"], "elicitation/create", "{first}");
    let message = question["params"]["message"].as_str().expect("message");
    assert!(message.contains("sh -c 'echo started > marker;") && !message.contains(SECRET), "{message}");
    assert!(!repo.marker().exists(), "nothing runs before the answer");
    let state = result["requestState"].as_str().expect("requestState").to_owned();
    // A retry with a state gm never gave is refused and changes nothing.
    let forged = stateless_call(&mut gm, 72, json!({ "requestState": "gm-consent-forged", "inputResponses": {} }));
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    let accept = json!({ "requestState": state, "inputResponses": { "consent": { "action": "accept", "content": { "approve": true } } } });
    let reply = stateless_call(&mut gm, 73, accept.clone());
    assert_eq!(reply["result"]["structuredContent"]["result"], 7, "the same body went on: {reply}");
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    assert_eq!(std::fs::read_to_string(repo.marker()).expect("marker").trim(), "started");
    let listed = text(&repo.trust(&["--list"]).stdout);
    assert!(listed.contains("evil"), "the approval is kept: {listed}");
    // The state is used up: the same retry again is refused.
    let again = stateless_call(&mut gm, 74, accept);
    assert_eq!(again["error"]["code"], -32602, "{again}");
    let bodies = gm.wait_for_events("action", 2).into_iter().filter(|e| e["tool"] == "run_code").count();
    assert_eq!(bodies, 1, "the body ran once, answered to the retry");
}

#[test]
fn a_stateless_decline_fails_the_call_untrusted_and_a_client_that_cannot_be_asked_is_not() {
    let repo = Repo::new();
    let mut gm = serve_stateless(&repo);
    let first = stateless_call(&mut gm, 81, json!({}));
    let state = first["result"]["requestState"].as_str().expect("requestState").to_owned();
    let decline = json!({ "requestState": state, "inputResponses": { "consent": { "action": "decline" } } });
    let reply = stateless_call(&mut gm, 82, decline);
    assert_eq!(reply["result"]["structuredContent"]["error"]["details"]["code"], "untrusted", "{reply}");
    assert!(!repo.marker().exists());
    // A request that does not declare elicitation is never asked.
    let code = "return await gm.evil_echo({});";
    gm.send(&json!({ "jsonrpc": "2.0", "id": 83, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code }, "_meta": envelope(false) } }));
    let reply = gm.recv_id(&json!(83));
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["error"]["details"]["code"], "untrusted", "{reply}");
}

#[test]
fn a_stateless_call_can_be_cancelled_by_its_retry_or_while_its_question_waits() {
    let repo = Repo::new();
    let mut gm = serve_stateless(&repo);
    let slow = "await gm.evil_echo({ x: 1 }); await gm.run_shell({ command: 'sleep 30' }); return 'done';";
    let call = |id: i64, extra: Value| {
        let mut params = json!({ "name": "run_code", "arguments": { "code": slow }, "_meta": envelope(true) });
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
    };
    let cancel =
        |id: i64| json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id } });
    let accept =
        |state: &str| json!({ "requestState": state, "inputResponses": { "consent": { "action": "accept" } } });

    // Cancelled while its question waits, by the first request's id: the question is void.
    gm.send(&call(93, json!({})));
    let state = gm.recv_id(&json!(93))["result"]["requestState"].as_str().expect("asked").to_owned();
    gm.send(&cancel(93));
    std::thread::sleep(std::time::Duration::from_millis(300));
    gm.send(&call(94, accept(&state)));
    let late = gm.recv_id(&json!(94));
    assert_eq!(late["error"]["code"], -32602, "a cancelled call's question is gone: {late}");
    // Cancelled by the retry's id, after the answer let the body go on into its shell.
    gm.send(&call(91, json!({})));
    let state = gm.recv_id(&json!(91))["result"]["requestState"].as_str().expect("asked").to_owned();
    gm.send(&call(92, accept(&state)));
    std::thread::sleep(std::time::Duration::from_millis(500));
    gm.send(&cancel(92));
    let bodies = gm.wait_for_events("action", 2);
    let cancelled: Vec<&Value> = bodies.iter().filter(|e| e["tool"] == "run_code").collect();
    assert_eq!(cancelled.len(), 2, "{bodies:?}");
    assert!(cancelled.iter().all(|e| e["cancelled"] == true), "both bodies ended cancelled: {cancelled:?}");
    // Neither cancelled call was answered (the next reply on the line is the one asked for).
    let next = gm.request("tools/list", json!({ "_meta": envelope(false) }));
    assert!(next["result"]["tools"].is_array(), "{next}");
}

/// An executable script at `path`.
#[cfg(unix)]
fn executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, "#!/bin/sh\necho the repository's own npx\n").expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[cfg(unix)]
#[test]
fn gm_trust_shows_env_values_as_written_and_the_program_a_path_in_the_entry_picks() {
    let repo = Repo::new();
    let npx = repo.ws.join(".gm/bin/npx");
    executable(&npx);
    repo.configure_entry(json!({
        "command": "npx",
        "args": ["-y", "@scope/server"],
        "env": { "PATH": ".gm/bin:/usr/bin", "NODE_OPTIONS": "--require=./x.js", "TOKEN": "${GM_TEST_SECRET}" },
    }));
    let out = common::gm_command()
        .args(["trust", "--workspace"])
        .arg(&repo.ws)
        .env("HOME", repo.home.path())
        .env("GM_TEST_SECRET", SECRET)
        .stdin(Stdio::null())
        .output()
        .expect("gm trust runs");
    let shown = text(&out.stdout);
    assert!(shown.contains("command: npx -y @scope/server\n"), "{shown}");
    // The clean command runs the repository's file: said where it is, and why.
    let program = format!("program: {} (PATH from this entry", npx.display());
    assert!(shown.contains(&program), "{program} in {shown}");
    assert!(shown.contains("env:     NODE_OPTIONS=--require=./x.js\n"), "{shown}");
    assert!(shown.contains("         PATH=.gm/bin:/usr/bin\n"), "{shown}");
    assert!(shown.contains("TOKEN='${GM_TEST_SECRET}'"), "as written: {shown}");
    assert!(!shown.contains(SECRET), "a value is never expanded to be shown: {shown}");
    assert!(!repo.trust_file().exists(), "nothing approved without a terminal");
}

#[test]
fn control_and_bidi_characters_of_an_entry_are_shown_escaped_never_raw() {
    let repo = Repo::new();
    repo.configure_entry(json!({
        "command": "sh",
        "args": ["-c", "exec true", "\u{1b}[2K\rnpx -y @scope/server", "\u{202e}txt.exe"],
        "cwd": "sub\u{200b}dir",
        "env": { "X\u{7f}": "a\u{1b}]0;title\u{7}\u{9b}b" },
    }));
    let check = |out: &Output| {
        for raw in [0x1b_u8, b'\r', 0x07, 0x7f] {
            assert!(!out.stdout.contains(&raw), "a raw {raw:#04x} was printed: {:?}", text(&out.stdout));
        }
        let shown = text(&out.stdout);
        for raw in ['\u{202e}', '\u{200b}', '\u{9b}'] {
            assert!(!shown.contains(raw), "a raw U+{:04X} was printed: {shown}", raw as u32);
        }
        shown
    };
    let shown = check(&repo.trust(&[]));
    assert!(shown.contains(r"'\u001b[2K\u000dnpx -y @scope/server'"), "{shown}");
    assert!(shown.contains(r"'\u202etxt.exe'"), "{shown}");
    assert!(shown.contains(r"sub\u200bdir"), "{shown}");
    assert!(shown.contains(r"X\u007f='a\u001b]0;title\u0007\u009bb'"), "{shown}");
    // What --list shows of the approval is escaped the same way.
    assert!(repo.trust(&["--yes"]).status.success());
    let listed = check(&repo.trust(&["--list"]));
    assert!(listed.contains(r"\u001b[2K\u000dnpx") && listed.contains(r"\u202etxt.exe"), "{listed}");
}

#[cfg(unix)]
#[test]
fn an_approval_writes_trust_json_0600_through_a_temporary_created_0600() {
    use std::os::unix::fs::PermissionsExt;
    let repo = Repo::new();
    // strace shows the mode the temporary is created with (a chmod after would not show in
    // the final mode); without strace, the final mode is still checked.
    let trace = repo.home.path().join("open.trace");
    let traced = Command::new("strace")
        .args(["-f", "-e", "trace=open,openat,creat,chmod,fchmod,fchmodat", "-o"])
        .arg(&trace)
        .arg(common::gm_bin())
        .args(["trust", "--yes"])
        .current_dir(&repo.ws)
        .env("HOME", repo.home.path())
        .env("GM_DEFAULTS_DIR", common::no_child_servers())
        .stdin(Stdio::null())
        .output();
    match traced {
        Ok(out) if out.status.success() && trace.exists() => {
            let calls = std::fs::read_to_string(&trace).expect("trace");
            let creations: Vec<&str> = calls.lines().filter(|l| l.contains(".trust.json.gm-tmp-")).collect();
            let open = creations.iter().find(|l| l.contains("open")).unwrap_or_else(|| panic!("{calls}"));
            assert!(open.contains("O_CREAT") && open.contains("O_EXCL") && open.contains("O_NOFOLLOW"), "{open}");
            assert!(open.contains(", 0600)"), "created 0600, not widened and narrowed after: {open}");
        }
        other => {
            eprintln!("the creation's mode is not traced (strace missing or not allowed here): {other:?}");
            assert!(repo.trust(&["--yes"]).status.success());
        }
    }
    let meta = std::fs::symlink_metadata(repo.trust_file()).expect("trust.json");
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let left: Vec<_> = std::fs::read_dir(repo.home.path().join(".gmnew"))
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("gm-tmp"))
        .collect();
    assert!(left.is_empty(), "no temporary is left: {left:?}");
}

/// Whether this test runs as root (only root can give a file to another user); says so when not.
#[cfg(unix)]
fn as_root(test: &str) -> bool {
    let root = gm_actors::sys::current_uid() == 0;
    if !root {
        eprintln!("{test}: skipped: not root, so no file can be given to another user");
    }
    root
}

#[cfg(unix)]
#[test]
fn approvals_in_a_gmnew_or_trust_json_of_another_user_are_refused() {
    if !as_root("approvals_in_a_gmnew_or_trust_json_of_another_user_are_refused") {
        return;
    }
    let nobody = 65534;
    let repo = Repo::new();
    let gmnew = repo.home.path().join(".gmnew");
    // A trust.json someone else owns, approving the entry: not believed.
    assert!(repo.trust(&["--yes"]).status.success());
    std::os::unix::fs::chown(repo.trust_file(), Some(nobody), None).expect("chown trust.json");
    let out = repo.trust(&["--list"]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let why = text(&out.stderr);
    assert!(why.contains("trust.json belongs to uid 65534") && why.contains("not believed"), "{why}");
    let mut gm = repo.serve(&[]);
    let err = gm.call_err("run_code", json!({ "code": "return await gm.evil_echo({});" }));
    assert_eq!(err["details"]["code"], "untrusted", "{err}");
    assert!(!repo.marker().exists(), "the workspace's command ran");
    drop(gm);
    common::stop_worker(&repo.ws);

    // A ~/.gmnew someone else owns: nothing is believed nor written there.
    std::fs::remove_file(repo.trust_file()).expect("rm");
    std::os::unix::fs::chown(&gmnew, Some(nobody), None).expect("chown .gmnew");
    let out = repo.trust(&["--yes"]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let why = text(&out.stderr);
    assert!(why.contains(".gmnew belongs to uid 65534"), "{why}");
    assert!(!repo.trust_file().exists(), "nothing written in another user's folder");
}

#[test]
fn the_hosts_question_shows_env_values_as_written_and_escapes_control_characters() {
    let repo = Repo::new();
    let script = format!("echo started > marker; exec {} --name evil", test_server());
    repo.configure_entry(json!({
        "command": "sh",
        "args": ["-c", script, "\u{1b}[2K\r\u{202e}fake"],
        "env": { "TOKEN": "${GM_TEST_SECRET}", "NODE_OPTIONS": "--require=./x.js" },
    }));
    let mut gm = serve_askable(&repo);
    let question = call_and_get_asked(&mut gm, 45);
    let message = question["params"]["message"].as_str().expect("message");
    assert!(message.contains("  NODE_OPTIONS=--require=./x.js\n"), "{message}");
    assert!(message.contains("  TOKEN='${GM_TEST_SECRET}'\n") && !message.contains(SECRET), "{message}");
    assert!(message.contains(r"'\u001b[2K\u000d\u202efake'"), "{message}");
    assert!(!message.contains(['\u{1b}', '\r', '\u{202e}']), "raw: {message:?}");
    assert!(message.contains("The program that starts: "), "{message}");
    gm.send(&json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "decline" } }));
    let reply = gm.recv_id(&json!(45));
    assert_eq!(reply["result"]["structuredContent"]["error"]["details"]["code"], "untrusted", "{reply}");
    assert!(!repo.marker().exists());
    let log = log_text(&mut gm);
    assert!(!log.contains("GM_TEST_SECRET") && !log.contains("x.js"), "the values shown reached the log");
}

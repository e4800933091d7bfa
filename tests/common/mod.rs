//! The tests' MCP client: spawns the real `gm` binary and speaks newline-delimited JSON-RPC to
//! it over pipes, byte for byte, so tests can send malformed input too.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use gm_actors::mcp_client::stdio::{ClientError, Stderr, StdioClient};
use serde_json::{json, Value};

pub const TIMEOUT: Duration = Duration::from_secs(30);

pub fn gm_bin() -> &'static str {
    env!("CARGO_BIN_EXE_gm")
}

/// A defaults folder whose mcp.json names no child server. Tests use it unless they are about
/// child servers: the shipped default (a browser server fetched by npx) cannot start on a
/// machine without network, and each session would wait for its three attempts.
pub fn no_child_servers() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/no-child-servers")
}

/// A HOME for tests that run workspace servers: approvals (`~/.gmnew/trust.json`) are kept per
/// workspace, so the tests that share it never see each other's.
pub fn trust_home() -> PathBuf {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trust-home");
    std::fs::create_dir_all(&home).expect("trust home");
    home
}

/// Approves every server `ws`'s `.gm/mcp.json` names, in [`trust_home`], as its user would
/// with `gm trust --yes`.
pub fn approve_workspace_servers(ws: &Path) {
    let out = gm_command()
        .args(["trust", "--yes", "--workspace"])
        .arg(ws)
        .env("HOME", trust_home())
        .stdin(Stdio::null())
        .output()
        .expect("gm trust runs");
    assert!(out.status.success(), "gm trust --yes: {}", String::from_utf8_lossy(&out.stderr));
}

/// How long a test's worker stays after its last session: short, so the workers of finished
/// tests do not pile up.
pub const TEST_IDLE_MS: &str = "3000";

/// `gm` as a command, with the test defaults (see [`no_child_servers`], [`TEST_IDLE_MS`]).
pub fn gm_command() -> Command {
    let mut cmd = Command::new(gm_bin());
    cmd.env("GM_DEFAULTS_DIR", no_child_servers());
    cmd.env("GM_WORKER_IDLE_MS", TEST_IDLE_MS);
    cmd
}

/// A `gm serve` under test, spoken to through gm's one stdio client
/// (`gm_actors::mcp_client::stdio`), which reads stdout on this thread with a timeout.
pub struct Gm {
    client: StdioClient,
    pub workspace: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Gm {
    /// `gm serve <args>` in a fresh temporary workspace.
    pub fn start(args: &[&str]) -> Self {
        Self::start_in_temp(args, &[])
    }

    /// `gm serve <args>` with `env` in a fresh temporary workspace.
    pub fn start_in_temp(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        let mut gm = Self::start_in(&workspace, args, env);
        gm._dir = Some(dir);
        gm
    }

    /// `gm serve <args>` in `workspace`, initialized (2025-11-25).
    pub fn ready_in(workspace: &Path, args: &[&str]) -> Self {
        let mut gm = Self::start_in(workspace, args, &[]);
        gm.initialize("2025-11-25");
        gm
    }

    pub fn start_in(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let client = StdioClient::spawn(serve_command(workspace, args, env), Stderr::Inherit).expect("spawn gm");
        Self { client, workspace: workspace.to_owned(), _dir: None }
    }

    /// A gm the test spawned itself (another binary, another command line).
    pub fn from_client(client: StdioClient, workspace: &Path) -> Self {
        Self { client, workspace: workspace.to_owned(), _dir: None }
    }

    /// `gm serve <args>` whose stdin is a pipe the test made; returns the pipe's read end too
    /// (a second descriptor of the open file gm reads), to look at the flags gm leaves on it.
    pub fn start_with_own_pipe(args: &[&str]) -> (Self, std::os::fd::OwnedFd) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2(2) writes two new descriptors into the array we own. Close-on-exec, so
        // that gm inherits only the read end, as its stdin.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe");
        // SAFETY: both descriptors were just made and are owned by nobody else.
        let (read, write) = unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
        let ours = read.try_clone().expect("dup");
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        let cmd = serve_command(&workspace, args, &[]);
        let client =
            StdioClient::spawn_with_stdin(cmd, Stderr::Inherit, Stdio::from(read), Box::new(write)).expect("spawn gm");
        (Self { client, workspace, _dir: Some(dir) }, ours)
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.client.send_raw(bytes).expect("write");
    }

    pub fn send(&mut self, v: &Value) {
        self.client.send(v).expect("write");
    }

    /// The next message from stdout, which must be JSON; `None` when nothing comes in time.
    pub fn recv(&mut self, timeout: Duration) -> Option<Value> {
        match self.client.recv(Some(timeout)) {
            Ok(Some(Value::String(line))) => panic!("stdout carried a non-JSON line: {line}"),
            Ok(message) => message,
            Err(ClientError::Closed) => None,
            Err(e) => panic!("reading gm's stdout: {e}"),
        }
    }

    /// Waits for the reply with this id.
    pub fn recv_id(&mut self, id: &Value) -> Value {
        self.client.recv_id(id, Some(TIMEOUT)).unwrap_or_else(|e| panic!("no reply to id {id}: {e}"))
    }

    /// Sends a request and returns the whole reply message.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.client.request(method, params, Some(TIMEOUT)).unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends a request and returns its `result`, failing on an error reply.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let reply = self.request(method, params);
        reply.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {reply}"))
    }

    pub fn initialize(&mut self, version: &str) -> Value {
        let r = self.ok(
            "initialize",
            json!({ "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "gm-tests", "version": "0" } }),
        );
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        r
    }

    pub fn read_skill(&mut self) -> Value {
        self.ok("resources/read", json!({ "uri": "skill://gm/SKILL.md" }))
    }

    /// Initialize and open the read gate.
    pub fn ready(&mut self) {
        self.initialize("2025-11-25");
        self.read_skill();
    }

    /// tools/call; returns the CallToolResult.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.ok("tools/call", json!({ "name": tool, "arguments": args }))
    }

    /// tools/call that must succeed; returns its structured content.
    pub fn call_ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args);
        assert_eq!(r["isError"], false, "{tool} failed: {r}");
        r["structuredContent"].clone()
    }

    /// tools/call that must fail; returns the structured error.
    pub fn call_err(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args);
        assert_eq!(r["isError"], true, "{tool} should have failed: {r}");
        r["structuredContent"]["error"].clone()
    }

    /// run_code that must succeed; returns the body's result.
    pub fn js(&mut self, code: &str) -> Value {
        self.call_ok("run_code", json!({ "code": code }))["result"].clone()
    }

    pub fn close_stdin(&mut self) {
        self.client.close_stdin();
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.client.wait_exit(timeout)
    }

    /// Sends `signal` to the gm process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.client.pid() as i32, signal) };
    }

    pub fn pid(&self) -> u32 {
        self.client.pid()
    }

    pub fn log_path(&self) -> PathBuf {
        self.workspace.join(".gm/log.jsonl")
    }

    /// The log's events. A ping first, while gm runs: it answers once the log file holds every
    /// event sent before it.
    pub fn log_events(&mut self) -> Vec<Value> {
        if self.client.stdin_open() && !self.client.exited() {
            self.ok("ping", json!({}));
        }
        read_log(&self.log_path())
    }

    pub fn events_of(&mut self, kind: &str) -> Vec<Value> {
        self.log_events().into_iter().filter(|e| e["kind"] == kind).collect()
    }

    /// The events of `kind` once the log holds at least `n` of them, for a client with no
    /// ping to wait on (a stateless one).
    pub fn wait_for_events(&self, kind: &str, n: usize) -> Vec<Value> {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let events: Vec<Value> = read_log(&self.log_path()).into_iter().filter(|e| e["kind"] == kind).collect();
            if events.len() >= n || std::time::Instant::now() > deadline {
                return events;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `gm serve <args>` in `workspace` with `env`, and the test defaults.
fn serve_command(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = gm_command();
    cmd.arg("serve").args(args).current_dir(workspace);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Stops the workspace's worker, as a restart of gm does (the hosts may still be connected;
/// their relays start a new one at their next call): SIGTERM, then waits until it has let go
/// of the workspace.
pub fn stop_worker(workspace: &Path) {
    end_worker(workspace, libc::SIGTERM);
}

/// Kills the workspace's worker with SIGKILL, as the OOM killer would, and waits until it is gone.
pub fn kill_worker(workspace: &Path) {
    end_worker(workspace, libc::SIGKILL);
}

fn end_worker(workspace: &Path, signal: i32) {
    let life = workspace.join(".gm/worker.pid");
    let holder: Value = serde_json::from_slice(&std::fs::read(&life).expect("a worker ran")).expect("worker.pid");
    let pid = holder["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the worker's pid, read from its own file.
    unsafe { libc::kill(pid, signal) };
    let deadline = std::time::Instant::now() + TIMEOUT;
    // Gone once nobody holds the workspace, or another worker does (a connected host's relay
    // may start one at once, before a poll sees the lock free).
    let holder_now = || -> Option<i64> {
        let text = std::fs::read(&life).ok()?;
        serde_json::from_slice::<Value>(&text).ok()?["pid"].as_i64()
    };
    while gm_actors::sys::is_locked(&life) && holder_now() == Some(i64::from(pid)) {
        assert!(std::time::Instant::now() < deadline, "the worker {pid} did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Ends a session and the worker behind it: the host leaves, the worker is stopped.
pub fn shut_down(mut gm: Gm) {
    gm.close_stdin();
    gm.wait_exit(TIMEOUT).expect("the relay exits");
    stop_worker(&gm.workspace);
}

/// The log's complete lines, each of which must parse. A line without its newline yet is a
/// write in progress that a reader polling a live worker's log may see in part: it is left
/// for the next read, as every reader of a live log must.
pub fn read_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    complete.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line ({e}): {l}"))).collect()
}

/// A text block of a tool result.
pub fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// Runs the git CLI in `dir` (to set up and inspect repositories); fails the test on error.
/// Writes `text` to `rel` under `dir`, making its folders.
pub fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// A search reply's hits as `path:line`.
pub fn search_hits(r: &Value) -> Vec<String> {
    r["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| format!("{}:{}", h["path"].as_str().unwrap_or(""), h["line"]))
        .collect()
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").args(args).current_dir(dir).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Installs npm packages (exact versions) once into a folder under the build's temp dir and
/// returns it: `<dir>/node_modules/<package>` holds each. Test processes and threads that ask
/// at once wait for one install (a lock file). A machine that cannot reach the npm registry
/// fails the test, saying so.
pub fn npm_packages(packages: &[&str]) -> PathBuf {
    let key: String = packages.join(" ").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("npm-{key}"));
    std::fs::create_dir_all(&dir).expect("npm dir");
    let lock = std::fs::File::create(dir.join(".lock")).expect("lock file");
    // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0, "flock");
    let done = dir.join(".installed");
    if !done.exists() {
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--no-save", "--prefix"])
            .arg(&dir)
            .args(packages)
            .output()
            .unwrap_or_else(|e| panic!("npm is needed for these tests ({e})"));
        assert!(
            out.status.success(),
            "npm install {packages:?} failed (the npm registry must be reachable): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&done, packages.join("\n")).expect("mark");
    }
    dir
}

/// `gm serve --http 127.0.0.1:0 <args>` in `workspace` with `env`, and its stderr, line by
/// line, on a channel (where it listens, the login link, what it says of its token).
pub fn spawn_http_front(
    workspace: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut cmd = gm_command();
    cmd.args(["serve", "--http", "127.0.0.1:0"]).args(args).current_dir(workspace);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("gm serve --http starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// A client of an HTTP front (`spawn_http_front`): it waits for where the front listens and
/// posts JSON-RPC with the MCP headers (and the bearer token, when one is given).
pub struct HttpClient {
    pub url: String,
    /// Sent as a bearer token (a front with a token writes it once it listens).
    pub token: Option<String>,
    client: reqwest::blocking::Client,
}

impl HttpClient {
    pub fn of(lines: &std::sync::mpsc::Receiver<String>, token: Option<String>) -> Self {
        let url = loop {
            let line = lines.recv_timeout(TIMEOUT).expect("gm prints where it listens");
            if let Some(url) = line.strip_prefix("gm: listening on ") {
                break url.to_owned();
            }
        };
        let client = reqwest::blocking::Client::builder().timeout(TIMEOUT).build().expect("client");
        HttpClient { url, token, client }
    }

    /// A POST of `body` with the MCP headers (and the token), and `headers`, not sent yet.
    pub fn request(&self, body: &Value, headers: &[(&str, &str)]) -> reqwest::blocking::RequestBuilder {
        let mut req = self
            .client
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req
    }

    pub fn post(&self, session: Option<&str>, body: Value) -> reqwest::blocking::Response {
        let session: Vec<(&str, &str)> = session.map(|s| ("mcp-session-id", s)).into_iter().collect();
        self.request(&body, &session).send().expect("the front answers")
    }

    /// `initialize` then `notifications/initialized`: the session's id.
    pub fn initialize(&self, client_name: &str) -> String {
        let init = self.post(
            None,
            json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": client_name, "version": "0" } } }),
        );
        let session = init.headers().get("mcp-session-id").and_then(|h| h.to_str().ok()).expect("a session").to_owned();
        self.post(Some(&session), json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        session
    }
}

/// Stops an HTTP front with SIGTERM and waits for it to exit.
pub fn stop_http_front(child: &mut std::process::Child) {
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + TIMEOUT;
    while child.try_wait().ok().flatten().is_none() {
        assert!(std::time::Instant::now() < deadline, "the front did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
}

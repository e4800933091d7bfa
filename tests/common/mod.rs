//! A raw MCP client for tests: spawns the real `gm` binary and speaks newline-delimited
//! JSON-RPC to it over pipes, byte for byte, so tests can send malformed input too.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

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

/// `gm` as a command, with the test defaults (see [`no_child_servers`]).
pub fn gm_command() -> Command {
    let mut cmd = Command::new(gm_bin());
    cmd.env("GM_DEFAULTS_DIR", no_child_servers());
    cmd
}

pub struct Gm {
    child: Child,
    stdin: Option<Box<dyn Write + Send>>,
    lines: Receiver<String>,
    /// Replies read while waiting for another id.
    pending: Vec<Value>,
    next_id: i64,
    pub workspace: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Gm {
    /// `gm serve <args>` in a fresh temporary workspace.
    pub fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        let mut gm = Self::start_in(&workspace, args, &[]);
        gm._dir = Some(dir);
        gm
    }

    /// `gm serve <args>` with `env` in a fresh temporary workspace.
    pub fn start_in_temp(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        let mut gm = Self::start_in(&workspace, args, env);
        gm._dir = Some(dir);
        gm
    }

    pub fn start_in(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(workspace, args, env, None)
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
        let mut gm = Self::spawn(&workspace, args, &[], Some((Stdio::from(read), Box::new(write))));
        gm._dir = Some(dir);
        (gm, ours)
    }

    fn spawn(
        workspace: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: Option<(Stdio, Box<dyn Write + Send>)>,
    ) -> Self {
        let mut cmd = gm_command();
        cmd.arg("serve").args(args).current_dir(workspace);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (stdin_of_child, writer) = match stdin {
            Some((child, writer)) => (child, Some(writer)),
            None => (Stdio::piped(), None),
        };
        let mut child =
            cmd.stdin(stdin_of_child).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn gm");
        let writer = writer.or_else(|| child.stdin.take().map(|s| Box::new(s) as Box<dyn Write + Send>));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: writer,
            child,
            lines: rx,
            pending: Vec::new(),
            next_id: 1,
            workspace: workspace.to_owned(),
            _dir: None,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("json");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The next line from stdout, which must be JSON.
    pub fn recv(&mut self, timeout: Duration) -> Option<Value> {
        if !self.pending.is_empty() {
            return Some(self.pending.remove(0));
        }
        self.recv_line(timeout)
    }

    fn recv_line(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}")),
            ),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for the reply with this id.
    pub fn recv_id(&mut self, id: &Value) -> Value {
        if let Some(i) = self.pending.iter().position(|m| m.get("id") == Some(id)) {
            return self.pending.remove(i);
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.recv_line(left).unwrap_or_else(|| panic!("no reply to id {id}"));
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return msg;
            }
            self.pending.push(msg);
        }
    }

    pub fn fresh_id(&mut self) -> Value {
        self.next_id += 1;
        json!(self.next_id)
    }

    /// Sends a request and returns the whole reply message.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.fresh_id();
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.recv_id(&id)
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
        self.stdin.take();
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends `signal` to the gm process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> PathBuf {
        self.workspace.join(".gm/log.jsonl")
    }

    /// The log's events. A ping first, while gm runs: it answers once the log file holds every
    /// event sent before it.
    pub fn log_events(&mut self) -> Vec<Value> {
        if self.stdin.is_some() && self.child.try_wait().ok().flatten().is_none() {
            self.ok("ping", json!({}));
        }
        read_log(&self.log_path())
    }

    pub fn events_of(&mut self, kind: &str) -> Vec<Value> {
        self.log_events().into_iter().filter(|e| e["kind"] == kind).collect()
    }
}

impl Drop for Gm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line ({e}): {l}")))
        .collect()
}

/// A text block of a tool result.
pub fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// Runs the git CLI in `dir` (to set up and inspect repositories); fails the test on error.
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

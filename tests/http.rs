//! `gm serve --http`: the real binary's Streamable HTTP front, spoken to with a real HTTP
//! client. A session is made by `initialize` and ends with DELETE (the worker logs
//! `session-end`); the token, `Host`, `Origin` and the body cap turn requests away; the GET
//! stream carries the worker's notifications and replays them after `Last-Event-ID`; an HTTP
//! session and a stdio relay of one workspace share its one worker; the status page opens with
//! a one-time link.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{gm_command, read_log, stop_worker, Gm, TIMEOUT};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A running `gm serve --http` and what it printed.
struct Front {
    child: Child,
    workspace: PathBuf,
    /// `http://127.0.0.1:PORT/mcp`.
    url: String,
    token: String,
    /// The one-time status page link printed at the start.
    login: String,
    client: Client,
}

impl Front {
    fn start(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Front {
        let (child, rx) = common::spawn_http_front(workspace, args, env);
        let (mut url, mut login) = (None, None);
        while url.is_none() || login.is_none() {
            let line = rx.recv_timeout(TIMEOUT).expect("gm prints where it listens");
            if let Some(u) = line.strip_prefix("gm: listening on ") {
                url = Some(u.to_owned());
            }
            if let Some((_, l)) = line.split_once("(this link works once): ") {
                login = Some(l.to_owned());
            }
        }
        let token = std::fs::read_to_string(workspace.join(".gm/http.token")).unwrap_or_default().trim().to_owned();
        Front {
            child,
            workspace: workspace.to_owned(),
            url: url.unwrap_or_default(),
            token,
            login: login.unwrap_or_default(),
            client: Client::builder().timeout(TIMEOUT).build().expect("client"),
        }
    }

    fn base(&self) -> &str {
        self.url.strip_suffix("/mcp").unwrap_or(&self.url)
    }

    fn host(&self) -> String {
        self.base().strip_prefix("http://").unwrap_or_default().to_owned()
    }

    /// A POST to /mcp with the token and, when given, the session.
    fn post(&self, session: Option<&str>, body: &Value) -> RequestBuilder {
        self.post_accepting(session, body, "application/json, text/event-stream")
    }

    fn post_accepting(&self, session: Option<&str>, body: &Value, accept: &str) -> RequestBuilder {
        let mut req = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", accept)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    fn send(&self, session: Option<&str>, body: &Value) -> (StatusCode, Value) {
        let r = self.post(session, body).send().expect("the front answers");
        let status = r.status();
        let text = r.text().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// `initialize` and `notifications/initialized`; returns the session id.
    fn initialize(&self) -> String {
        let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "http-test", "version": "0" } } });
        let r = self.post(None, &init).send().expect("initialize");
        assert_eq!(r.status(), StatusCode::OK);
        let session = r.headers().get("mcp-session-id").expect("Mcp-Session-Id").to_str().expect("ascii").to_owned();
        let reply: Value = r.json().expect("JSON");
        assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{reply}");
        let (status, _) =
            self.send(Some(&session), &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        assert_eq!(status, StatusCode::ACCEPTED);
        session
    }

    /// A session with its read gate open.
    fn ready(&self) -> String {
        let session = self.initialize();
        let read = json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } });
        let (status, reply) = self.send(Some(&session), &read);
        assert_eq!(status, StatusCode::OK, "{reply}");
        session
    }

    fn call(&self, session: &str, id: i64, tool: &str, args: Value) -> Value {
        let call = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": args } });
        let (status, reply) = self.send(Some(session), &call);
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(reply["id"], id, "{reply}");
        reply["result"].clone()
    }

    fn delete(&self, session: &str) -> StatusCode {
        let r = self.client.delete(&self.url).bearer_auth(&self.token).header("mcp-session-id", session).send();
        r.expect("DELETE answered").status()
    }

    /// Opens the session's GET stream; its events arrive on the channel as (id, data).
    fn stream(&self, session: &str, last_event: Option<u64>) -> mpsc::Receiver<(u64, Value)> {
        let mut req = Client::builder()
            .build()
            .expect("client")
            .get(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session);
        if let Some(id) = last_event {
            req = req.header("last-event-id", id.to_string());
        }
        let r = req.send().expect("GET answered");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers()["content-type"].to_str().unwrap_or("").starts_with("text/event-stream"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut id = 0;
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().unwrap_or(0);
                } else if let Some(data) = line.strip_prefix("data:") {
                    let value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                    if tx.send((id, value)).is_err() {
                        return;
                    }
                }
            }
        });
        rx
    }

    fn log(&self) -> Vec<Value> {
        read_log(&self.workspace.join(".gm/log.jsonl"))
    }

    fn stop(mut self) {
        common::stop_http_front(&mut self.child);
        assert!(!self.workspace.join(".gm/http.json").exists(), "http.json is removed at the exit");
        if self.workspace.join(".gm/worker.pid").exists()
            && gm_actors::sys::is_locked(&self.workspace.join(".gm/worker.pid"))
        {
            stop_worker(&self.workspace);
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    common::git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "hello\n").expect("write");
    (dir, ws)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_session_runs_code_and_ends_with_delete() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let info: Value =
        serde_json::from_slice(&std::fs::read(ws.join(".gm/http.json")).expect("http.json")).expect("JSON");
    assert_eq!(info["url"], front.url);
    assert_eq!(info["pid"], front.child.id());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join(".gm/http.token")).expect("token").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let session = front.ready();
    let result = front.call(&session, 3, "run_code", json!({ "code": "return await gm.stat_file({ path: 'a.txt' })" }));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["result"]["size"], 6, "{result}");

    // A batch: each request answered, in one array.
    let batch = json!([
        { "jsonrpc": "2.0", "id": 10, "method": "tools/list" },
        { "jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return 2" } } },
    ]);
    let (status, replies) = front.send(Some(&session), &batch);
    assert_eq!(status, StatusCode::OK, "{replies}");
    let ids: Vec<i64> = replies.as_array().expect("an array").iter().filter_map(|r| r["id"].as_i64()).collect();
    assert_eq!(ids, [10, 11], "{replies}");

    assert_eq!(front.delete(&session), StatusCode::OK);
    wait_until("the worker logs session-end", || {
        front.log().iter().any(|e| e["kind"] == "session-end" && e["session"] == session.as_str())
    });
    let (status, reply) = front.send(Some(&session), &json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/list" }));
    assert_eq!(status, StatusCode::NOT_FOUND, "an ended session is gone: {reply}");
    assert_eq!(front.delete(&session), StatusCode::NOT_FOUND);
    front.stop();
}

/// A session whose worker dies ends with it: its next request gets 404, and a new
/// `initialize` starts a new worker.
#[test]
fn a_session_ends_with_its_worker() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let session = front.ready();
    common::kill_worker(&ws);
    let list = json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/list" });
    wait_until("the ended session's requests get 404", || {
        let (status, reply) = front.send(Some(&session), &list);
        assert!(matches!(status, StatusCode::NOT_FOUND | StatusCode::OK), "{status}: {reply}");
        // A request written in the instant the worker died is answered with an error.
        if status == StatusCode::OK {
            assert_eq!(reply["error"]["code"], -32603, "{reply}");
        }
        status == StatusCode::NOT_FOUND
    });
    let again = front.ready();
    assert_ne!(again, session);
    let result = front.call(&again, 3, "run_code", json!({ "code": "return await gm.stat_file({ path: 'a.txt' })" }));
    assert_eq!(result["isError"], false, "{result}");
    front.stop();
}

#[test]
fn refusals() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &["--max-line-bytes", "4096"], &[]);
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let status = |r: Response| r.status();

    // No token, a wrong one.
    let r = front.client.post(&front.url).body(init.to_string()).send().expect("answered");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let r = front.client.post(&front.url).bearer_auth("nope").body(init.to_string()).send().expect("answered");
    assert_eq!(status(r), StatusCode::UNAUTHORIZED);
    let r = front.client.get(&front.url).header("accept", "text/event-stream").send().expect("answered");
    assert_eq!(status(r), StatusCode::UNAUTHORIZED);

    // DNS rebinding: another site's Origin, a Host that is not the server's.
    let r = front.post(None, &init).header("origin", "http://evil.example").send().expect("answered");
    assert_eq!(status(r), StatusCode::FORBIDDEN);
    let r = front.post(None, &init).header("host", "evil.example").send().expect("answered");
    assert_eq!(status(r), StatusCode::FORBIDDEN);
    let own = format!("http://{}", front.host().replace("127.0.0.1", "localhost"));
    let r = front.post(None, &init).header("origin", own).send().expect("answered");
    assert_eq!(status(r), StatusCode::OK, "the server's own origin is fine");

    // A body over --max-line-bytes.
    let big = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": { "pad": "x".repeat(8192) } });
    let r = front.post(None, &big).send().expect("answered");
    assert_eq!(status(r), StatusCode::PAYLOAD_TOO_LARGE);

    // Sessions: unknown → 404, none on a 2025 request → 400.
    let list = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" });
    assert_eq!(front.send(Some("s-no-such-session"), &list).0, StatusCode::NOT_FOUND);
    assert_eq!(front.send(None, &list).0, StatusCode::BAD_REQUEST);
    let r = front.post(None, &list).header("mcp-protocol-version", "1999-01-01").send().expect("answered");
    assert_eq!(status(r), StatusCode::BAD_REQUEST);
    // An initialize the worker refuses opens no session.
    let bad = json!({ "jsonrpc": "2.0", "id": 5, "method": "initialize", "params": "nonsense" });
    let r = front.post(None, &bad).send().expect("answered");
    assert!(r.headers().get("mcp-session-id").is_none(), "{r:?}");
    let reply: Value = r.json().expect("JSON");
    assert!(reply.get("error").is_some(), "{reply}");
    let (status, reply) = front.send(None, &json!("not a message"));
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    front.stop();

    // A non-loopback address needs --http-allow-remote; no token only on loopback.
    let out = gm_command().args(["serve", "--http", "0.0.0.0:0"]).current_dir(&ws).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--http-allow-remote"), "{out:?}");
    let out = gm_command()
        .args(["serve", "--http", "0.0.0.0:0", "--http-allow-remote", "--http-token", "none"])
        .current_dir(&ws)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback address only"), "{out:?}");
}

/// A client that sends its headers or its body too slowly is cut off, and does not hold up
/// the others meanwhile.
#[test]
fn slow_clients_are_cut_off() {
    use std::io::{Read, Write};
    let (_dir, ws) = workspace();
    let env = [("GM_HTTP_HEADER_TIMEOUT_MS", "500"), ("GM_HTTP_BODY_TIMEOUT_MS", "500")];
    let front = Front::start(&ws, &[], &env);
    let host = front.host();
    // Headers never finished: the connection is closed.
    let mut headers = std::net::TcpStream::connect(&host).expect("connect");
    headers.write_all(b"POST /mcp HTTP/1.1\r\nHost: ").expect("write");
    // A body that never arrives whole: 408.
    let mut body = std::net::TcpStream::connect(&host).expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
        front.token
    );
    body.write_all(head.as_bytes()).expect("write");
    // Meanwhile another client is served.
    let session = front.initialize();
    assert!(!session.is_empty());
    for (name, mut stream) in [("headers", headers), ("body", body)] {
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        let mut answer = String::new();
        let started = Instant::now();
        let _ = stream.read_to_string(&mut answer);
        assert!(started.elapsed() < Duration::from_secs(10), "{name}: closed within the deadline");
        if name == "body" {
            assert!(answer.starts_with("HTTP/1.1 408"), "{name}: {answer}");
        }
    }
    front.stop();
}

/// SIGTERM ends the front: its sessions end on the worker, `.gm/http.json` goes.
#[test]
fn a_signal_ends_the_sessions() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let session = front.ready();
    let log = ws.join(".gm/log.jsonl");
    let mut front = front;
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(front.child.id() as i32, libc::SIGTERM) };
    let status = front.child.wait().expect("the front exits");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    assert!(!ws.join(".gm/http.json").exists());
    // The worker is still up (its idle grace has not passed): the front closed the session.
    wait_until("the worker logs the session's end", || {
        read_log(&log)
            .iter()
            .any(|e| e["kind"] == "session-end" && e["session"] == session.as_str() && e["reason"] == "closed")
    });
    stop_worker(&ws);
}

/// A session left with nothing to do (its client went away without DELETE) is ended after the
/// idle time; one with its GET stream open is not.
#[test]
fn idle_sessions_end() {
    let (_dir, ws) = workspace();
    // Long enough that the first session's stream is open well before it could count as idle.
    let front = Front::start(&ws, &[], &[("GM_HTTP_SESSION_IDLE_MS", "1500")]);
    let streaming = front.ready();
    let _stream = front.stream(&streaming, None);
    let left = front.ready();
    let log = ws.join(".gm/log.jsonl");
    wait_until("the idle session ends", || {
        read_log(&log).iter().any(|e| e["kind"] == "session-end" && e["session"] == left.as_str())
    });
    let list = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/list" });
    assert_eq!(front.send(Some(&left), &list).0, StatusCode::NOT_FOUND);
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(front.send(Some(&streaming), &list).0, StatusCode::OK, "a session with its stream open stays");
    front.stop();
}

#[test]
fn no_token_on_loopback() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &["--http-token", "none"], &[]);
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let r = front.client.post(&front.url).body(list.to_string()).send().expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    // Host and Origin still hold.
    let r = front.client.post(&front.url).header("origin", "http://evil.example").body(list.to_string()).send();
    assert_eq!(r.expect("answered").status(), StatusCode::FORBIDDEN);
    front.stop();
}

#[test]
fn the_get_stream_carries_notifications_and_resumes() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[("GM_PROGRESS_INTERVAL_MS", "100")]);
    let session = front.ready();
    let events = front.stream(&session, None);
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "run_code", "arguments": { "code": "await new Promise(r => setTimeout(r, 450)); return 1" },
        "_meta": { "progressToken": "body" } } });
    // A client that takes JSON only: the call's progress goes to the GET stream.
    let r = front.post_accepting(Some(&session), &call, "application/json").send().expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    let reply: Value = r.json().expect("JSON");
    assert_eq!(reply["result"]["structuredContent"]["result"], 1, "{reply}");
    let (first_id, first) = events.recv_timeout(TIMEOUT).expect("a notification on the GET stream");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    assert_eq!(first["params"]["progressToken"], "body", "{first}");
    assert!(first_id > 0);

    // A client that reconnects after event `first_id - 1` is given it again.
    let replayed = front.stream(&session, Some(first_id - 1));
    let (id, again) = replayed.recv_timeout(TIMEOUT).expect("replayed");
    assert_eq!((id, &again), (first_id, &first));

    // At most four streams per session.
    let _more: Vec<_> = (0..2).map(|_| front.stream(&session, None)).collect();
    let r = front
        .client
        .get(&front.url)
        .bearer_auth(&front.token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .expect("answered");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    front.stop();
}

/// A call that asks for progress, from a client that takes SSE, is answered with a stream of its
/// progress notifications and then its reply.
#[test]
fn a_post_streams_its_progress_then_its_reply() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[("GM_PROGRESS_INTERVAL_MS", "100")]);
    let session = front.ready();
    let events = front.stream(&session, None);
    let call = json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
        "name": "run_code", "arguments": { "code": "await new Promise(r => setTimeout(r, 450)); return 2" },
        "_meta": { "progressToken": 77 } } });
    let r = front.post(Some(&session), &call).send().expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"].to_str().unwrap_or("").starts_with("text/event-stream"));
    let messages: Vec<Value> = r
        .text()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).expect("JSON data"))
        .collect();
    let (last, notes) = messages.split_last().expect("messages");
    assert_eq!(last["id"], 6, "the reply comes last: {messages:?}");
    assert_eq!(last["result"]["structuredContent"]["result"], 2, "{last}");
    assert!(!notes.is_empty(), "progress before the reply: {messages:?}");
    for n in notes {
        assert_eq!(
            (n["method"].as_str(), n["params"]["progressToken"].as_i64()),
            (Some("notifications/progress"), Some(77))
        );
    }
    assert!(events.try_recv().is_err(), "the progress went to the POST, not the GET stream");
    front.stop();
}

#[test]
fn http_and_stdio_sessions_share_one_worker() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let session = front.ready();
    front.call(&session, 3, "run_code", json!({ "code": "return await gm.stat_file({ path: 'a.txt' })" }));
    let mut stdio = Gm::start_in(&ws, &[], &[]);
    stdio.ready();
    stdio.js("return await gm.stat_file({ path: 'a.txt' })");
    let run_code_sessions = || -> std::collections::HashSet<String> {
        let log = front.log();
        log.iter()
            .filter(|e| e["kind"] == "action" && e["tool"] == "run_code")
            .filter_map(|e| e["session"].as_str().map(str::to_owned))
            .collect()
    };
    // The action events are written as the calls end; the log catches up within moments.
    wait_until("run_code from both sessions in one log", || run_code_sessions().len() == 2);
    let sessions = run_code_sessions();
    let starts = front.log().into_iter().filter(|e| e["kind"] == "start").count();
    assert_eq!(starts, 1, "one worker");
    assert!(sessions.contains(session.as_str()));
    // `gm status` lists both.
    let out = gm_command().args(["status", "--json"]).current_dir(&ws).output().expect("status");
    let status: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let listed = status["status"]["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, 2, "{status}");
    assert_eq!(status["http"]["url"], front.url.as_str(), "gm status names the front: {status}");
    stdio.close_stdin();
    stdio.wait_exit(TIMEOUT).expect("the relay exits");
    front.stop();
}

#[test]
fn stateless_requests_share_a_link() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let discover = json!({ "jsonrpc": "2.0", "id": "d1", "method": "server/discover", "params": {} });
    let (status, reply) = front.send(None, &discover);
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["id"], "d1", "the client's id comes back: {reply}");
    assert!(reply.get("result").is_some() || reply.get("error").is_some(), "{reply}");

    // Two clients using the same id at once each get their own answer.
    let a = json!({ "jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {} });
    let replies: Vec<(StatusCode, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| front.send(None, &a))).collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for (status, reply) in &replies {
        assert_eq!(*status, StatusCode::OK, "{reply}");
        assert_eq!(reply["id"], 7, "{reply}");
    }

    // The header and the body disagree on the version: 400, -32020, with the request's id.
    let tools = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let r = front.post(None, &tools).header("mcp-protocol-version", "2025-11-25").send().expect("answered");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let reply: Value = r.json().expect("JSON");
    assert_eq!((reply["id"].as_i64(), reply["error"]["code"].as_i64()), (Some(9), Some(-32020)), "{reply}");
    let r = front.post(None, &tools).header("mcp-method", "tools/call").send().expect("answered");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    // A 2026-07-28 request is answered on the shared link; its error code becomes the status.
    let (status, listed) = front.send(None, &tools);
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["id"], 9, "{listed}");
    let unknown = json!({ "jsonrpc": "2.0", "id": "u", "method": "no/such", "params": {
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let (status, reply) = front.send(None, &unknown);
    assert_eq!(status, StatusCode::NOT_FOUND, "-32601 is 404: {reply}");
    assert_eq!((reply["id"].as_str(), reply["error"]["code"].as_i64()), (Some("u"), Some(-32601)), "{reply}");
    front.stop();
}

/// A 2026-07-28 request: the envelope in `_meta`, the revision's headers beside it.
fn stateless(front: &Front, id: i64, method: &str, params: Value) -> (StatusCode, Value) {
    let r = stateless_request(front, &front.client, id, method, params).send().expect("answered");
    let status = r.status();
    (status, r.json().expect("JSON"))
}

/// The request [`stateless`] sends, made with `client`: the revision's headers mirror the
/// method and, for a tools/call, prompts/get or resources/read, the name it names (SEP-2243).
fn stateless_request(front: &Front, client: &Client, id: i64, method: &str, mut params: Value) -> RequestBuilder {
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str).map(str::to_owned),
        "resources/read" => params.get("uri").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut req = client
        .post(&front.url)
        .bearer_auth(&front.token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = named {
        req = req.header("mcp-name", name);
    }
    req.body(body.to_string())
}

#[test]
fn a_stateless_client_is_served_over_http_as_2026_07_28_says() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let (status, d) = stateless(&front, 1, "server/discover", json!({}));
    assert_eq!(status, StatusCode::OK, "{d}");
    assert_eq!(
        (d["result"]["supportedVersions"][0].as_str(), d["result"]["resultType"].as_str()),
        (Some("2026-07-28"), Some("complete")),
        "{d}"
    );
    // The removed handshake, with the revision's envelope: not found, 404.
    let (status, r) = stateless(
        &front,
        2,
        "initialize",
        json!({ "protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": { "name": "x", "version": "0" } }),
    );
    assert_eq!(
        (status, r["error"]["code"].as_i64(), r["id"].as_i64()),
        (StatusCode::NOT_FOUND, Some(-32601), Some(2)),
        "{r}"
    );
    // A version nobody serves: 400 and -32022 naming what is.
    let body = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {} });
    let r = front.post(None, &body).header("mcp-protocol-version", "v999.0.0").send().expect("answered");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let reply: Value = r.json().expect("JSON");
    assert_eq!(reply["error"]["code"], -32022, "{reply}");
    assert_eq!(reply["error"]["data"], json!({ "supported": ["2026-07-28"], "requested": "v999.0.0" }));
    // A tool named one way in a header and another in the body: refused before it runs.
    let call = json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": { "name": "next_context", "arguments": {},
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let r = front
        .post(None, &call)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-name", "finish")
        .send()
        .expect("answered");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // On the shared link a step opens run_code (it hands the model the rules), and a result
    // says its type.
    let (status, step) =
        stateless(&front, 5, "tools/call", json!({ "name": "next_context", "arguments": { "task": "t" } }));
    assert_eq!((status, step["result"]["isError"].as_bool()), (StatusCode::OK, Some(false)), "{step}");
    let (_, r) =
        stateless(&front, 6, "tools/call", json!({ "name": "run_code", "arguments": { "code": "return 6 * 7" } }));
    assert_eq!(
        (r["result"]["structuredContent"]["result"].as_i64(), r["result"]["resultType"].as_str()),
        (Some(42), Some("complete")),
        "{r}"
    );
    front.stop();
}

#[test]
fn the_status_page_opens_with_a_one_time_link() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let session = front.ready();
    let no_redirects = Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    assert_eq!(no_redirects.get(format!("{}/", front.base())).send().expect("page").status(), StatusCode::UNAUTHORIZED);
    let r = no_redirects.get(&front.login).send().expect("login");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()["set-cookie"].to_str().expect("ascii").to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap_or_default().to_owned();
    assert_eq!(no_redirects.get(&front.login).send().expect("again").status(), StatusCode::UNAUTHORIZED, "once only");

    let page = no_redirects.get(format!("{}/", front.base())).header("cookie", &pair).send().expect("page");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().unwrap_or_default().contains("EventSource(\"/events\")"));
    let status: Value = no_redirects
        .get(format!("{}/status.json", front.base()))
        .header("cookie", &pair)
        .send()
        .expect("status")
        .json()
        .expect("JSON");
    let sessions = status["status"]["sessions"].as_array().cloned().unwrap_or_default();
    assert!(sessions.iter().any(|s| s["session"] == session.as_str()), "{status}");

    // `gm status --open` mints another link.
    let out = gm_command().args(["status", "--open"]).current_dir(&ws).output().expect("status --open");
    assert!(out.status.success(), "{out:?}");
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(link.starts_with(front.base()), "{link}");
    assert_eq!(no_redirects.get(&link).send().expect("login").status(), StatusCode::SEE_OTHER);
    front.stop();
}

/// Debian's chromium, headless, driven over `--remote-debugging-pipe` (the DevTools protocol
/// as NUL-ended JSON on fds 3 and 4: no port, no websocket).
struct Chromium {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    next: u64,
    session: Option<String>,
}

const CHROMIUM: &str = "/usr/bin/chromium";

impl Chromium {
    fn start(profile: &Path) -> Chromium {
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::process::CommandExt;
        let pipe = || {
            let mut fds = [0; 2];
            // SAFETY: pipe(2) into a two-int array.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
            // SAFETY: both fds were just made and are owned here.
            unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
        };
        let (their_in, to) = pipe();
        let (from, their_out) = pipe();
        let (cin, cout) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        let mut cmd = std::process::Command::new(CHROMIUM);
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--window-size=1200,1600"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only dup2 between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cin, 3) < 0 || libc::dup2(cout, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        drop((their_in, their_out));
        Chromium { child, to, from: BufReader::new(from), next: 1, session: None }
    }

    /// Sends a DevTools command (to the attached page, once there is one) and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        use std::io::Write;
        let id = self.next;
        self.next += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("read from chromium");
            assert!(n > 0, "chromium closed its pipe");
            buf.pop();
            let reply: Value = serde_json::from_slice(&buf).expect("DevTools JSON");
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page and attaches to it.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({ "url": url }))["targetId"].clone();
        let attached = self.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
        self.session = attached["sessionId"].as_str().map(str::to_owned);
    }

    fn text(&mut self) -> String {
        let r = self.call("Runtime.evaluate", json!({ "expression": "document.body ? document.body.innerText : ''" }));
        r["result"]["value"].as_str().unwrap_or("").to_owned()
    }

    /// Waits until the page's text contains `what`.
    fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = self.text();
            if text.contains(what) {
                return;
            }
            assert!(Instant::now() < deadline, "the page never showed {what:?}: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64_decode(shot["data"].as_str().unwrap_or(""));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).expect("screenshot written");
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// The status page in a real browser: it shows a running job's output, and a call made after
/// it loaded appears in its timeline without a reload. The screenshot is kept in the build's
/// temp folder (`target/tmp/http-status-page.png`).
#[test]
fn the_status_page_in_chromium() {
    if !Path::new(CHROMIUM).exists() {
        eprintln!("skipped: this test needs Debian's chromium at {CHROMIUM} (apt-get install chromium)");
        return;
    }
    let (dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let session = front.ready();
    // The command's text does not hold the words its output prints: they can only come from the tail.
    let job = "return await gm.job_start({ name: 'pagejob', command: 'printf \"page-job-%s\\\\n\" output; sleep 30' })";
    let started = front.call(&session, 3, "run_code", json!({ "code": job }));
    assert_eq!(started["isError"], false, "{started}");

    let mut browser = Chromium::start(&dir.path().join("chromium-profile"));
    browser.open(&front.login);
    browser.wait_for("page-job-output");
    let marker = "late-marker-7d1";
    front.call(&session, 4, "run_code", json!({ "code": format!("return '{marker}'") }));
    browser.wait_for(marker);
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("http-status-page.png");
    browser.screenshot(&shot);
    drop(browser);
    front.call(&session, 5, "run_code", json!({ "code": "return await gm.job_stop({ name: 'pagejob' })" }));
    front.stop();
}

#[test]
fn the_front_keeps_serving_when_its_stderr_is_closed() {
    // A front started from a terminal or a pipe that went away writes its next line to a
    // closed stderr; that must not end it.
    let (_dir, ws) = workspace();
    let mut child = gm_command()
        .args(["serve", "--http", "127.0.0.1:0", "--http-token", "none"])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gm serve --http");
    let mut first = String::new();
    BufReader::new(child.stderr.take().expect("stderr")).read_line(&mut first).expect("a line");
    // The reader (and with it the pipe's only read end) is gone now.
    let url = first.trim().strip_prefix("gm: listening on ").expect("the listening line").to_owned();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let discover = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {} });
    let r = Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(discover.to_string())
        .send();
    let alive = r.map(|r| r.status()).ok();
    // SAFETY: kill(2) on the front this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert_eq!(alive, Some(StatusCode::OK), "the front answered after its stderr closed");
}

/// The worker's own question reaches an HTTP client on its GET stream, and the client's
/// answer, POSTed back as a JSON-RPC response, reaches the worker: a workspace server the user
/// has not approved is asked about (`elicitation/create`), accepted, and started within the
/// same call.
#[test]
fn a_question_goes_out_on_the_stream_and_its_answer_comes_back() {
    let (_dir, ws) = workspace();
    let home = tempfile::tempdir().expect("home");
    let script = format!("echo started > marker; exec {} --name evil", env!("CARGO_BIN_EXE_mcp-test-server"));
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    let servers = json!({ "evil": { "command": "sh", "args": ["-c", script] } });
    std::fs::write(ws.join(".gm/mcp.json"), json!({ "mcpServers": servers }).to_string()).expect("mcp.json");
    let front = Front::start(&ws, &[], &[("HOME", home.path().to_str().expect("utf-8"))]);
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": { "elicitation": {} }, "clientInfo": { "name": "asker", "version": "0" } } });
    let r = front.post(None, &init).send().expect("initialize");
    let session = r.headers()["mcp-session-id"].to_str().expect("ascii").to_owned();
    front.send(Some(&session), &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let read =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } });
    assert_eq!(front.send(Some(&session), &read).0, StatusCode::OK);
    let events = front.stream(&session, None);

    let code = "return (await gm.evil_echo({ x: 7 })).structuredContent.echo.x;";
    let call = json!({ "jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } });
    std::thread::scope(|s| {
        let answered = s.spawn(|| front.send(Some(&session), &call));
        let (_, question) = events.recv_timeout(TIMEOUT).expect("gm asks on the GET stream");
        assert_eq!(question["method"], "elicitation/create", "{question}");
        assert!(!ws.join("marker").exists(), "nothing runs before the answer");
        let answer = json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "accept", "content": { "approve": true } } });
        assert_eq!(front.send(Some(&session), &answer).0, StatusCode::ACCEPTED);
        let (status, reply) = answered.join().expect("the call's thread");
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(reply["result"]["structuredContent"]["result"], 7, "the same call went on: {reply}");
    });
    assert!(ws.join("marker").exists(), "the approved server started");
    front.stop();
}

/// rmcp's Streamable HTTP client (2025 revisions) connects with the token, reads the skill and
/// runs code; without the token it cannot connect.
#[test]
fn rmcp_connects_over_http() {
    use rmcp::model::{CallToolRequestParam, ReadResourceRequestParam};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let config = StreamableHttpClientTransportConfig::with_uri(front.url.as_str()).auth_header(front.token.clone());
        let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("handshake");
        assert_eq!(client.peer_info().expect("server info").server_info.name, "gm");
        let skill = client
            .read_resource(ReadResourceRequestParam { uri: "skill://gm/SKILL.md".into() })
            .await
            .expect("resources/read");
        assert_eq!(skill.contents.len(), 1);
        let code = json!({ "code": "return (await gm.stat_file({ path: 'a.txt' })).size" });
        let r = client
            .call_tool(CallToolRequestParam { name: "run_code".into(), arguments: code.as_object().cloned() })
            .await
            .expect("tools/call");
        assert_eq!(r.is_error, Some(false), "{r:?}");
        assert_eq!(r.structured_content.expect("structured")["result"], 6);
        client.cancel().await.expect("closed");

        let config = StreamableHttpClientTransportConfig::with_uri(front.url.as_str());
        let refused = ().serve(StreamableHttpClientTransport::from_config(config)).await;
        assert!(refused.is_err(), "no token, no connection");
    });
    front.stop();
}

/// 2026-07-28 over HTTP: closing the response is the cancellation. A stateless client that
/// gives up on a long call (its HTTP client times out and drops the connection) has the call
/// cancelled — the shell ended, the action logged as cancelled — and the shared link serves
/// the next request.
#[test]
fn a_stateless_client_that_closes_its_request_cancels_the_call() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws, &[], &[]);
    let (status, _) = stateless(&front, 1, "tools/call", json!({ "name": "next_context", "arguments": {} }));
    assert_eq!(status, StatusCode::OK);
    let params = json!({ "name": "run_code", "arguments": { "code":
        "return await gm.run_shell({ command: 'sleep 30; echo finished > late.txt' })" } });
    let impatient = Client::builder().timeout(Duration::from_millis(1500)).build().expect("client");
    let gave_up = Instant::now();
    let r = stateless_request(&front, &impatient, 2, "tools/call", params).send();
    assert!(r.is_err(), "the client gave up before the answer");
    wait_until("the call logged as cancelled", || {
        front.log().iter().any(|e| e["kind"] == "code-call" && e["verb"] == "run_shell" && e["error"] == "cancelled")
    });
    assert!(gave_up.elapsed() < Duration::from_secs(15), "cancelled soon after the client left");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ws.join("late.txt").exists(), "the shell was ended");
    let (status, r) =
        stateless(&front, 3, "tools/call", json!({ "name": "run_code", "arguments": { "code": "return 1 + 1" } }));
    assert_eq!((status, r["result"]["structuredContent"]["result"].as_i64()), (StatusCode::OK, Some(2)), "{r}");

    // The client leaving and the answer arriving race: leave at varied moments around short
    // calls, many times. Each call gets one outcome (no `action` logged twice for one call),
    // the worker is the same process throughout, and the link serves on.
    let worker = std::fs::read_to_string(ws.join(".gm/worker.pid")).expect("worker.pid");
    for i in 0..30u64 {
        let leaves_after = Client::builder().timeout(Duration::from_millis(2 + i % 7 * 3)).build().expect("client");
        let code = format!("await new Promise(r => setTimeout(r, {})); return {i}", i % 5 * 4);
        let _ = stateless_request(
            &front,
            &leaves_after,
            100 + i as i64,
            "tools/call",
            json!({ "name": "run_code", "arguments": { "code": code } }),
        )
        .send();
    }
    let (status, r) =
        stateless(&front, 4, "tools/call", json!({ "name": "run_code", "arguments": { "code": "return 3" } }));
    assert_eq!((status, r["result"]["structuredContent"]["result"].as_i64()), (StatusCode::OK, Some(3)), "{r}");
    std::thread::sleep(Duration::from_millis(300));
    let actions: Vec<Value> =
        front.log().into_iter().filter(|e| e["kind"] == "action" && e["tool"] == "run_code").collect();
    let ids: std::collections::HashSet<String> =
        actions.iter().map(|e| format!("{} {}", e["session"], e["id"])).collect();
    assert_eq!(ids.len(), actions.len(), "one action per call");
    assert_eq!(std::fs::read_to_string(ws.join(".gm/worker.pid")).expect("worker.pid"), worker);
    front.stop();
}

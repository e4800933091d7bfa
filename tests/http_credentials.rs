//! `gm serve --http`'s credentials, through the real binary: a `.gm/http.token` that someone
//! else chose or can read (committed or staged in git, open to other users) is not used — a new
//! token replaces it, and the front says why; a symbolic link in its place stops the front, as
//! every gm; a private untracked one is kept. The status page's login cookie is not the token and opens no `/mcp`. Session ids
//! carry at least 128 random bits.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use common::{gm_command, stop_worker, TIMEOUT};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::json;

/// A value a repository's author (or anyone reading the repository) knows.
const KNOWN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A running `gm serve --http` and the lines it printed before it listened.
struct Front {
    child: Child,
    workspace: PathBuf,
    /// `http://127.0.0.1:PORT`.
    base: String,
    /// The one-time status page link printed at the start.
    login: String,
    /// stderr up to the login link.
    printed: Vec<String>,
    client: Client,
}

impl Front {
    fn start(workspace: &Path) -> Front {
        let (child, rx) = common::spawn_http_front(workspace, &[], &[]);
        let (mut base, mut login, mut printed) = (None, None, Vec::new());
        while base.is_none() || login.is_none() {
            let line = rx.recv_timeout(TIMEOUT).unwrap_or_else(|_| panic!("gm prints where it listens: {printed:?}"));
            if let Some(u) = line.strip_prefix("gm: listening on ") {
                base = u.strip_suffix("/mcp").map(str::to_owned);
            }
            if let Some((_, l)) = line.split_once("(this link works once): ") {
                login = Some(l.to_owned());
            }
            printed.push(line);
        }
        Front {
            child,
            workspace: workspace.to_owned(),
            base: base.unwrap_or_default(),
            login: login.unwrap_or_default(),
            printed,
            client: Client::builder()
                .timeout(TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
        }
    }

    /// The token the front wrote, as a client reads it.
    fn token(&self) -> String {
        std::fs::read_to_string(self.workspace.join(".gm/http.token")).expect("the token file").trim().to_owned()
    }

    /// Whether `token` opens `/mcp`: a DELETE of a session that does not exist gets 404 past
    /// the token check and 401 before it (and starts no worker either way).
    fn accepts(&self, token: &str) -> bool {
        let r = self
            .client
            .delete(format!("{}/mcp", self.base))
            .bearer_auth(token)
            .header("mcp-session-id", "s-no-such-session")
            .send()
            .expect("the front answers");
        match r.status() {
            StatusCode::NOT_FOUND => true,
            StatusCode::UNAUTHORIZED => false,
            other => panic!("a DELETE of no session: {other}"),
        }
    }

    /// The line saying why the token file was not used, if the front printed one.
    fn replaced_because(&self) -> Option<&str> {
        self.printed.iter().find(|l| l.contains("was not used")).map(String::as_str)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let life = self.workspace.join(".gm/worker.pid");
        if life.exists() && gm_actors::sys::is_locked(&life) {
            stop_worker(&self.workspace);
        }
    }
}

fn git_repository() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    common::git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "hello\n").expect("write");
    (dir, ws)
}

/// Writes `.gm/http.token` holding [`KNOWN`] with permission bits `mode`.
fn plant_token(ws: &Path, mode: u32) -> PathBuf {
    let path = ws.join(".gm/http.token");
    std::fs::create_dir_all(ws.join(".gm")).expect("mkdir .gm");
    std::fs::write(&path, format!("{KNOWN}\n")).expect("write the token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

fn commit(ws: &Path) {
    common::git(ws, &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "c"]);
}

/// The replaced file: a regular file of mode 0600 holding a new value that opens `/mcp`.
fn assert_replaced(front: &Front) {
    let path = front.workspace.join(".gm/http.token");
    let meta = std::fs::symlink_metadata(&path).expect("the token file");
    assert!(meta.file_type().is_file(), "a regular file now: {meta:?}");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    let token = front.token();
    assert_ne!(token, KNOWN, "the file holds a new token");
    assert!(!front.accepts(KNOWN), "the known value opens nothing");
    assert!(front.accepts(&token), "the new token is the one that works");
}

#[test]
fn a_token_file_committed_to_git_is_replaced_not_used() {
    let (_dir, ws) = git_repository();
    // Private and ours: only git's knowledge of it makes it public.
    plant_token(&ws, 0o600);
    common::git(&ws, &["add", "-f", ".gm/http.token", "a.txt"]);
    commit(&ws);
    let front = Front::start(&ws);
    assert_replaced(&front);
    let why = front.replaced_because().expect("the front says why");
    assert!(why.contains(".gm/http.token") && why.contains("git"), "{why}");
}

#[test]
fn a_token_file_staged_in_git_is_replaced_not_used() {
    // The workspace is a folder inside the repository: the path git knows is `sub/.gm/...`.
    let (_dir, repo) = git_repository();
    let ws = repo.join("sub");
    std::fs::create_dir_all(&ws).expect("mkdir sub");
    plant_token(&ws, 0o600);
    common::git(&repo, &["add", "-f", "sub/.gm/http.token"]);
    let front = Front::start(&ws);
    assert_replaced(&front);
    assert!(front.replaced_because().is_some_and(|why| why.contains("git")), "{:?}", front.printed);
}

#[test]
fn a_token_file_that_is_a_symlink_stops_the_front_and_its_target_is_untouched() {
    // As every gm does with a link in place of one of its files: it names it and does not
    // start (tests/workspace_files.rs plays the same attack on the other files).
    let (_dir, ws) = git_repository();
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("their-token");
    std::fs::write(&target, format!("{KNOWN}\n")).expect("write");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::create_dir_all(ws.join(".gm")).expect("mkdir .gm");
    std::os::unix::fs::symlink(&target, ws.join(".gm/http.token")).expect("symlink");
    let out = gm_command()
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output()
        .expect("gm serve --http runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(".gm/http.token") && stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::read(&target).expect("the target"), format!("{KNOWN}\n").as_bytes(), "never written through");
    assert_eq!(std::fs::metadata(&target).expect("meta").permissions().mode() & 0o7777, 0o600);
}

#[test]
fn a_token_file_other_users_can_read_is_replaced() {
    // Not a git repository: only the mode is wrong.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    plant_token(&ws, 0o644);
    let front = Front::start(&ws);
    assert_replaced(&front);
    assert!(front.replaced_because().is_some_and(|why| why.contains("0644")), "{:?}", front.printed);
}

#[test]
fn a_private_untracked_token_file_is_kept() {
    let (_dir, ws) = git_repository();
    plant_token(&ws, 0o600);
    let front = Front::start(&ws);
    assert_eq!(front.token(), KNOWN);
    assert!(front.accepts(KNOWN));
    assert_eq!(front.replaced_because(), None, "{:?}", front.printed);
}

#[test]
fn the_page_cookie_is_not_the_token_and_opens_no_mcp() {
    let (_dir, ws) = git_repository();
    let front = Front::start(&ws);
    let token = front.token();
    let r = front.client.get(&front.login).send().expect("login");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set: Vec<String> =
        r.headers().get_all("set-cookie").iter().map(|v| v.to_str().expect("ascii").to_owned()).collect();
    assert!(set.iter().all(|c| !c.contains(&token)), "no cookie carries the token: {set:?}");
    let cookie = set.first().expect("a cookie").clone();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.split(';').any(|a| a.trim() == attribute), "{attribute} in {cookie}");
    }
    let pair = cookie.split(';').next().unwrap_or_default().trim().to_owned();
    let (name, value) = pair.split_once('=').expect("name=value");
    assert!(value.len() >= 32 && value.bytes().all(|b| b.is_ascii_hexdigit()), "128 random bits or more: {value}");

    // The cookie opens the page and what the page reads.
    for route in ["/", "/status.json"] {
        let r = front.client.get(format!("{}{route}", front.base)).header("cookie", &pair).send().expect("page");
        assert_eq!(r.status(), StatusCode::OK, "{route}");
    }
    // It opens no /mcp, nor does the token sent as a cookie (the old cookie's name or the page's).
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    for cookie in [pair.clone(), format!("gm_token={token}"), format!("{name}={token}")] {
        let r = front
            .client
            .post(format!("{}/mcp", front.base))
            .header("cookie", &cookie)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .expect("answered");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "POST /mcp with {cookie}");
        let r = front.client.delete(format!("{}/mcp", front.base)).header("cookie", &cookie).send().expect("answered");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "DELETE /mcp with {cookie}");
    }
    // The token is no page login either.
    let r = front.client.get(format!("{}/status.json", front.base)).header("cookie", format!("{name}={token}"));
    assert_eq!(r.send().expect("answered").status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn session_ids_carry_at_least_128_random_bits() {
    let (_dir, ws) = git_repository();
    let front = Front::start(&ws);
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = front
            .client
            .post(format!("{}/mcp", front.base))
            .bearer_auth(front.token())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .expect("initialize");
        assert_eq!(r.status(), StatusCode::OK);
        let id = r.headers().get("mcp-session-id").expect("Mcp-Session-Id").to_str().expect("ascii").to_owned();
        // `s-<UTC time>-<random>`: the time says nothing a guesser does not know.
        let random = id.rsplit('-').next().unwrap_or_default();
        assert!(random.len() >= 32 && random.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(id.len() <= 64, "a valid session id and file name: {id}");
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
}

//! Who may speak to the HTTP front: the bearer token in `.gm/http.token`, the status page's
//! own login cookies (set by its one-time link, never the token), and the `Host` and `Origin`
//! checks that keep a web page on another site from reaching a loopback server through DNS
//! rebinding.
//!
//! A loopback port is reachable by every local user of the machine, so the token is what
//! guards the front, and it must be a value nobody else chose or can read: a `.gm/http.token`
//! that is a link, another user's file, open to others, or known to git (a repository's author
//! committed it) is replaced by a new one.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::http::{header, HeaderMap, StatusCode};
use gm_actors::state_file::{self, How, StateFileError};

/// The cookie gm set before the page had logins of its own: it held the token itself. A login
/// expires it, so a browser stops sending the token to every port of the host.
pub const OLD_COOKIE: &str = "gm_token";
/// How long a login code minted by `gm status --open` stays good.
const CODE_LIFE: Duration = Duration::from_secs(600);
/// How long a status page login lasts.
pub const PAGE_LOGIN_LIFE: Duration = Duration::from_secs(12 * 60 * 60);
/// Page logins kept at once; a new one beyond forgets the oldest (its page asks for a link).
const MAX_PAGE_LOGINS: usize = 64;
/// A token file larger than this is no token of gm's (and is not read whole into memory).
const MAX_TOKEN_BYTES: u64 = 4096;
/// Rounds of look, remove, create before giving up on a token file others keep changing.
const TOKEN_ATTEMPTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    State(StateFileError),
    #[error("{path} cannot hold the token ({why}) and cannot be removed: {source}")]
    Stuck { path: PathBuf, why: Unfit, source: std::io::Error },
    #[error("{path} kept changing while gm made the token (another gm replacing it?): try again")]
    Contended { path: PathBuf },
}

/// Why an existing token file was not used (and a new token replaced it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("it is a symbolic link")]
    Link,
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    #[error("it belongs to another user (uid {0})")]
    Owner(u32),
    #[error("its mode is {0:04o}, not 0600 (other users may read it, or have written it)")]
    Mode(u32),
    #[error("git tracks it (committed or staged), so the repository knows its value (`git rm --cached` it)")]
    Tracked,
    #[error("it holds the value committed at its path in git's HEAD")]
    Committed,
    #[error("git could not say whether it tracks it: {0}")]
    GitUnknown(String),
    #[error("it holds no token")]
    Empty,
    #[error("it is larger than a token")]
    TooLarge,
}

/// The workspace's token, and why an existing file was not used, if one was not.
#[derive(Debug)]
pub struct Token {
    pub value: String,
    pub replaced: Option<Unfit>,
}

/// A fresh random token: 256 bits from the OS (uuid v4 draws them from getrandom), as hex.
pub fn random_hex() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The workspace's token: the one in `path` (a file in `workspace`'s `.gm/`) when it is fit —
/// a regular file of this user's, mode 0600, unknown to git — else a new one written there,
/// replacing an unfit file (the file or link itself is removed, never written through).
///
/// A new token is written to a private temporary file, created with mode 0600 and without
/// following a link, then linked into place: a reader never sees half a token, and two fronts
/// starting at once agree on one.
pub fn load_or_create(workspace: &Path, path: &Path) -> Result<Token, TokenError> {
    let mut replaced = None;
    for _ in 0..TOKEN_ATTEMPTS {
        match examine(workspace, path)? {
            Examined::Fit(value) => return Ok(Token { value, replaced }),
            Examined::Missing => {}
            Examined::Unfit(why, seen) => {
                remove_if_same(path, seen, &why)?;
                replaced = Some(why);
            }
        }
        if let Some(value) = create(workspace, path)? {
            return Ok(Token { value, replaced });
        }
        // Another front made one first: look at theirs.
    }
    Err(TokenError::Contended { path: path.to_owned() })
}

enum Examined {
    Missing,
    Fit(String),
    /// Why, and the file's identity (device, inode) as seen without following a link.
    Unfit(Unfit, (u64, u64)),
}

/// What is at `path`. The file is opened through [`state_file`]: every component below the
/// workspace without following a link (`O_NOFOLLOW`), a special file without blocking, and
/// its kind, owner and mode taken from the opened file (fstat), not from the name, which
/// could be swapped in between.
fn examine(workspace: &Path, path: &Path) -> Result<Examined, TokenError> {
    let seen = match std::fs::symlink_metadata(path) {
        Ok(meta) => (meta.dev(), meta.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Examined::Missing),
        Err(source) => return Err(TokenError::Io { path: path.to_owned(), source }),
    };
    let unfit = |why| Ok(Examined::Unfit(why, seen));
    let file = match state_file::open(workspace, path, How::READ) {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(Examined::Missing),
        Err(StateFileError::Link { .. }) => return unfit(Unfit::Link),
        Err(StateFileError::NotAFile { what, .. }) => return unfit(Unfit::NotAFile(what)),
        Err(StateFileError::Foreign { owner, .. }) => return unfit(Unfit::Owner(owner)),
        Err(e) => return Err(TokenError::State(e)),
    };
    let io = |source| TokenError::Io { path: path.to_owned(), source };
    let meta = file.metadata().map_err(io)?;
    let mode = meta.mode() & 0o7777;
    if mode != 0o600 {
        return unfit(Unfit::Mode(mode));
    }
    if meta.len() > MAX_TOKEN_BYTES {
        return unfit(Unfit::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_BYTES).read_to_end(&mut bytes).map_err(io)?;
    let value = match std::str::from_utf8(&bytes).map(str::trim) {
        Ok(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()) => v.to_owned(),
        // Not one printable word: no token a client could send in a header.
        _ => return unfit(Unfit::Empty),
    };
    // Last, as the dearest check: the git library reads the index (and HEAD's tree).
    if let Some(why) = known_to_git(workspace, path, &bytes) {
        return unfit(why);
    }
    Ok(Examined::Fit(value))
}

/// Whether git knows `path` (inside `workspace`) or its value `bytes`: the path in the index
/// (a commit publishes whatever is there, or did), or these very bytes committed at it in
/// HEAD (taken out of the index since). A workspace in no repository, a bare one, or a path
/// outside the work tree: git does not. A repository that is there but cannot be read
/// (another user's, damaged) cannot tell, and a question left open lets no token through.
fn known_to_git(workspace: &Path, path: &Path, bytes: &[u8]) -> Option<Unfit> {
    let repo = match git2::Repository::discover(workspace) {
        Ok(repo) => repo,
        Err(e) => return crate::git::git_dir(workspace).map(|_| Unfit::GitUnknown(e.message().to_owned())),
    };
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let workdir = canonical(repo.workdir()?);
    let full = canonical(workspace).join(path.strip_prefix(workspace).ok()?);
    let rel = full.strip_prefix(&workdir).ok()?;
    let unknown = |e: git2::Error| Some(Unfit::GitUnknown(e.message().to_owned()));
    let index = match repo.index() {
        Ok(index) => index,
        Err(e) => return unknown(e),
    };
    // Stage 0, or a conflict's stages 1-3.
    if (0..=3).any(|stage| index.get_path(rel, stage).is_some()) {
        return Some(Unfit::Tracked);
    }
    let tree = match repo.head().and_then(|head| head.peel_to_tree()) {
        Ok(tree) => tree,
        // A repository without a commit yet.
        Err(e) if matches!(e.code(), git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound) => return None,
        Err(e) => return unknown(e),
    };
    let committed = tree.get_path(rel).ok()?.id();
    match git2::Oid::hash_object(git2::ObjectType::Blob, bytes) {
        Ok(id) if id == committed => Some(Unfit::Committed),
        Ok(_) => None,
        Err(e) => unknown(e),
    }
}

/// Removes the unfit file or link itself (unlink(2) never follows a link), unless something
/// else took its place since it was looked at (another front replacing it too).
fn remove_if_same(path: &Path, seen: (u64, u64), why: &Unfit) -> Result<(), TokenError> {
    let now = match std::fs::symlink_metadata(path) {
        Ok(meta) => (meta.dev(), meta.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(TokenError::Io { path: path.to_owned(), source }),
    };
    if now != seen {
        return Ok(());
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(TokenError::Stuck { path: path.to_owned(), why: why.clone(), source }),
    }
}

/// A new token at `path`, or `None` when a file appeared there first. The temporary file is
/// created new (`O_CREAT|O_EXCL|O_NOFOLLOW`) with mode 0600 from the start: never readable by
/// others, not even for an instant, and never a file someone prepared.
fn create(workspace: &Path, path: &Path) -> Result<Option<String>, TokenError> {
    let io = |source| TokenError::Io { path: path.to_owned(), source };
    let token = random_hex();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A random name: nothing can be waiting there.
    let tmp = path.with_file_name(format!("{name}.new-{}", &random_hex()[..16]));
    let mut file = state_file::open(workspace, &tmp, How::NEW.mode(0o600)).map_err(TokenError::State)?;
    let written = file.write_all(format!("{token}\n").as_bytes()).and_then(|()| file.sync_all());
    // link(2) does not follow a link at the new name and fails when anything is there.
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Some(token)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(io(e)),
    }
}

/// Equal without an early exit, so the time a comparison takes says nothing of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The status page's logins: random values (256 bits from the OS) kept in memory for
/// [`PAGE_LOGIN_LIFE`], each set as a cookie by a one-time link. Browsers send a host's
/// cookies to every port of it, so any local web server the browser visits may see one: it
/// opens the page's read-only routes for a while, never `/mcp`, and it is not the token.
pub struct PageLogins {
    /// The cookie's name, with the front's port: two fronts of one host keep their own.
    name: String,
    /// Each login's value and when it expires, oldest first.
    live: Mutex<Vec<(String, Instant)>>,
}

impl std::fmt::Debug for PageLogins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: they are credentials.
        f.debug_struct("PageLogins").field("name", &self.name).finish_non_exhaustive()
    }
}

impl PageLogins {
    pub fn new(port: u16) -> Self {
        Self { name: format!("gm_page_{port}"), live: Mutex::new(Vec::new()) }
    }

    pub fn cookie_name(&self) -> &str {
        &self.name
    }

    /// A new login; its value is the cookie's.
    pub fn open(&self) -> String {
        self.open_at(Instant::now())
    }

    fn open_at(&self, now: Instant) -> String {
        let value = random_hex();
        let mut live = super::lock(&self.live);
        live.retain(|(_, until)| *until > now);
        if live.len() >= MAX_PAGE_LOGINS {
            live.remove(0);
        }
        live.push((value.clone(), now + PAGE_LOGIN_LIFE));
        value
    }

    /// Whether the request carries a live login's cookie.
    pub fn holds(&self, headers: &HeaderMap) -> bool {
        self.holds_at(headers, Instant::now())
    }

    fn holds_at(&self, headers: &HeaderMap, now: Instant) -> bool {
        let live = super::lock(&self.live);
        cookies(headers, &self.name)
            .any(|c| live.iter().any(|(value, until)| *until > now && same(c.as_bytes(), value.as_bytes())))
    }
}

/// What the front checks on every request.
#[derive(Debug, Clone)]
pub struct Guard {
    /// `None`: `--http-token none`.
    pub token: Option<String>,
    /// `Host` values accepted; empty with `--http-allow-remote` (any host, the token guards).
    pub hosts: Vec<String>,
    /// The status page's logins: they open the page's routes only.
    pub pages: Arc<PageLogins>,
}

/// Why a request is turned away.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// No token, or a wrong one: 401 with `WWW-Authenticate: Bearer`.
    Token,
    /// A `Host` or `Origin` of another site: 403.
    Site(String),
}

impl Denied {
    pub fn status(&self) -> StatusCode {
        match self {
            Denied::Token => StatusCode::UNAUTHORIZED,
            Denied::Site(_) => StatusCode::FORBIDDEN,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Denied::Token => "missing or wrong bearer token (it is in the workspace's .gm/http.token)".into(),
            Denied::Site(why) => why.clone(),
        }
    }
}

impl Guard {
    /// The hosts a loopback listener on `addr` answers to.
    pub fn loopback_hosts(addr: SocketAddr) -> Vec<String> {
        let port = addr.port();
        let mut hosts = vec![format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")];
        let bound = addr.to_string();
        if !hosts.contains(&bound) {
            hosts.push(bound);
        }
        hosts
    }

    /// `Host` and `Origin` first (a page of another site learns nothing, not even whether its
    /// token guess was right), then the token from `Authorization: Bearer` or, when `page_login`
    /// (the status page's routes only: `/mcp` passes false), a live page login's cookie. No
    /// cookie ever stands for the token: browsers send cookies to every port of a host.
    pub fn check(&self, headers: &HeaderMap, page_login: bool) -> Result<(), Denied> {
        self.check_site(headers)?;
        let Some(token) = &self.token else { return Ok(()) };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim);
        if bearer.is_some_and(|b| same(b.as_bytes(), token.as_bytes())) {
            return Ok(());
        }
        if page_login && self.pages.holds(headers) {
            return Ok(());
        }
        Err(Denied::Token)
    }

    /// `Host` and `Origin` alone: the page's login link, whose one-time code stands for the
    /// token, checks only these.
    pub fn check_site(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !self.hosts.is_empty() && !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(Denied::Site(format!("Host {host:?} is not this server's address")));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let allowed = if self.hosts.is_empty() {
                origin.eq_ignore_ascii_case(&format!("http://{host}"))
                    || origin.eq_ignore_ascii_case(&format!("https://{host}"))
            } else {
                self.hosts.iter().any(|h| origin.eq_ignore_ascii_case(&format!("http://{h}")))
            };
            if !allowed {
                return Err(Denied::Site(format!("Origin {origin:?} is not this server's")));
            }
        }
        Ok(())
    }
}

/// The values of cookie `name` in the request's `Cookie` headers (a browser may send several
/// of one name, set for different paths).
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// One-time login codes: each is a file in `.gm/http-login/`, made by the front at its start
/// (printed on stderr) or by `gm status --open`, and consumed by removing it, so a code works
/// once even when two requests race. Only someone who can write into `.gm/` can mint one.
pub struct LoginCodes {
    dir: PathBuf,
}

impl LoginCodes {
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("http-login") }
    }

    /// A new code, good for ten minutes.
    pub fn mint(&self) -> std::io::Result<String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        let code = random_hex();
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(self.dir.join(&code))?;
        Ok(code)
    }

    /// Whether `code` was a live code; it is used up either way.
    pub fn redeem(&self, code: &str) -> bool {
        // Only our own hex names: nothing else reaches the file system.
        if code.len() != 64 || !code.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        let path = self.dir.join(code);
        let fresh = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < CODE_LIFE);
        std::fs::remove_file(&path).is_ok() && fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::os::unix::fs::PermissionsExt;

    fn guard() -> Guard {
        Guard {
            token: Some("t0k".into()),
            hosts: Guard::loopback_hosts("127.0.0.1:4000".parse().expect("addr")),
            pages: Arc::new(PageLogins::new(4000)),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn token_host_and_origin() {
        let g = guard();
        let ok = [("host", "127.0.0.1:4000"), ("authorization", "Bearer t0k")];
        assert_eq!(g.check(&headers(&ok), false), Ok(()));
        assert_eq!(g.check(&headers(&[("host", "localhost:4000")]), false), Err(Denied::Token));
        let wrong = [("host", "localhost:4000"), ("authorization", "Bearer t0K")];
        assert_eq!(g.check(&headers(&wrong), false), Err(Denied::Token));
        let rebound = [("host", "evil.example:4000"), ("authorization", "Bearer t0k")];
        assert!(matches!(g.check(&headers(&rebound), false), Err(Denied::Site(_))));
        let other_port = [("host", "localhost:4001"), ("authorization", "Bearer t0k")];
        assert!(matches!(g.check(&headers(&other_port), false), Err(Denied::Site(_))));
        let foreign = [("host", "localhost:4000"), ("origin", "http://evil.example"), ("authorization", "Bearer t0k")];
        assert!(matches!(g.check(&headers(&foreign), false), Err(Denied::Site(_))));
        let own = [("host", "localhost:4000"), ("origin", "http://[::1]:4000"), ("authorization", "Bearer t0k")];
        assert_eq!(g.check(&headers(&own), false), Ok(()));
    }

    #[test]
    fn a_page_login_opens_the_page_only_and_the_token_is_no_cookie() {
        let g = guard();
        let login = g.pages.open();
        assert!(login.len() >= 32 && login != "t0k");
        let name = g.pages.cookie_name().to_owned();
        let with_login = format!("a=b; {name}={login}");
        let page = [("host", "localhost:4000"), ("cookie", with_login.as_str())];
        assert_eq!(g.check(&headers(&page), true), Ok(()));
        assert_eq!(g.check(&headers(&page), false), Err(Denied::Token), "not where page logins are refused (/mcp)");
        // The token as a cookie, under the page's name or the old one, opens nothing.
        for cookie in [format!("{name}=t0k"), format!("{OLD_COOKIE}=t0k")] {
            let h = [("host", "localhost:4000"), ("cookie", cookie.as_str())];
            assert_eq!(g.check(&headers(&h), true), Err(Denied::Token), "{cookie}");
        }
        // Another front's login (another port) is not this one's.
        let other = PageLogins::new(4001);
        let theirs = format!("{}={}", other.cookie_name(), other.open());
        assert_eq!(
            g.check(&headers(&[("host", "localhost:4000"), ("cookie", theirs.as_str())]), true),
            Err(Denied::Token)
        );
    }

    #[test]
    fn a_page_login_expires_after_twelve_hours() {
        let pages = PageLogins::new(4000);
        let now = Instant::now();
        let login = pages.open_at(now);
        let cookie = format!("{}={login}", pages.cookie_name());
        let h = headers(&[("cookie", cookie.as_str())]);
        assert!(pages.holds_at(&h, now + PAGE_LOGIN_LIFE - Duration::from_secs(1)));
        assert!(!pages.holds_at(&h, now + PAGE_LOGIN_LIFE));
        // Expired logins are dropped when the next is made, and their number is capped.
        for _ in 0..MAX_PAGE_LOGINS + 5 {
            pages.open_at(now + PAGE_LOGIN_LIFE);
        }
        assert_eq!(super::super::lock(&pages.live).len(), MAX_PAGE_LOGINS);
    }

    #[test]
    fn codes_work_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let codes = LoginCodes::new(dir.path());
        let code = codes.mint().expect("mint");
        assert!(!codes.redeem("../../etc/passwd"));
        assert!(codes.redeem(&code));
        assert!(!codes.redeem(&code));
    }

    /// A workspace with its `.gm/` and the token's path.
    fn workspace() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(ws.join(".gm")).expect("mkdir");
        let path = ws.join(".gm/http.token");
        (dir, ws, path)
    }

    fn plant(path: &Path, mode: u32) {
        std::fs::write(path, "known-value\n").expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).expect("meta").permissions().mode() & 0o7777
    }

    #[test]
    fn one_private_token_per_workspace_is_made_then_kept() {
        let (_dir, ws, path) = workspace();
        let a = load_or_create(&ws, &path).expect("made");
        assert_eq!(a.replaced, None);
        assert_eq!(a.value.len(), 64);
        let b = load_or_create(&ws, &path).expect("read");
        assert_eq!((a.value, b.replaced), (b.value, None));
        assert_eq!(mode_of(&path), 0o600);
        let left: Vec<_> = std::fs::read_dir(ws.join(".gm")).expect("list").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["http.token"], "no temporary file is left");
    }

    #[test]
    fn a_private_token_of_the_users_own_choice_is_kept() {
        let (_dir, ws, path) = workspace();
        plant(&path, 0o600);
        let token = load_or_create(&ws, &path).expect("read");
        assert_eq!((token.value.as_str(), token.replaced), ("known-value", None));
    }

    #[test]
    fn a_token_open_to_others_is_replaced() {
        for mode in [0o644, 0o640, 0o400, 0o4600] {
            let (_dir, ws, path) = workspace();
            plant(&path, mode);
            let token = load_or_create(&ws, &path).expect("made");
            assert_eq!(token.replaced, Some(Unfit::Mode(mode)), "{mode:o}");
            assert_ne!(token.value, "known-value");
            assert_eq!(std::fs::read_to_string(&path).expect("read").trim(), token.value);
            assert_eq!(mode_of(&path), 0o600);
        }
    }

    #[test]
    fn a_symlinked_token_is_replaced_without_writing_through_it() {
        let (dir, ws, path) = workspace();
        let target = dir.path().join("elsewhere");
        plant(&target, 0o600);
        std::os::unix::fs::symlink(&target, &path).expect("link");
        let token = load_or_create(&ws, &path).expect("made");
        assert_eq!(token.replaced, Some(Unfit::Link));
        assert_ne!(token.value, "known-value");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "known-value\n", "the target is untouched");
        assert!(std::fs::symlink_metadata(&path).expect("meta").is_file(), "a regular file in the link's place");
        // A dangling link too: creating through it would make a file wherever it points.
        std::fs::remove_file(&path).expect("rm");
        let nowhere = dir.path().join("nowhere");
        std::os::unix::fs::symlink(&nowhere, &path).expect("link");
        assert_eq!(load_or_create(&ws, &path).expect("made").replaced, Some(Unfit::Link));
        assert!(!nowhere.exists());
    }

    #[test]
    fn an_empty_token_file_is_replaced() {
        let (_dir, ws, path) = workspace();
        std::fs::write(&path, " \n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(load_or_create(&ws, &path).expect("made").replaced, Some(Unfit::Empty));
    }

    #[test]
    fn a_folder_in_the_tokens_place_is_an_error_not_removed() {
        let (_dir, ws, path) = workspace();
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("keep"), "x").expect("write");
        let e = load_or_create(&ws, &path).expect_err("refused");
        assert!(matches!(e, TokenError::Stuck { why: Unfit::NotAFile(_), .. }), "{e}");
        assert!(path.join("keep").exists());
    }

    #[test]
    fn a_token_known_to_git_is_replaced() {
        let commit = |repo: &git2::Repository| {
            let mut index = repo.index().expect("index");
            let tree = repo.find_tree(index.write_tree().expect("tree")).expect("tree");
            let me = git2::Signature::now("t", "t@example.invalid").expect("signature");
            repo.commit(Some("HEAD"), &me, &me, "c", &tree, &[]).expect("commit");
        };
        let stage = |repo: &git2::Repository, rel: &str| {
            let mut index = repo.index().expect("index");
            index.add_path(Path::new(rel)).expect("add");
            index.write().expect("write index");
        };
        // Staged only, in a workspace below the repository's top.
        let (_dir, top, _) = workspace();
        let repo = git2::Repository::init(&top).expect("init");
        let ws = top.join("sub");
        std::fs::create_dir_all(ws.join(".gm")).expect("mkdir");
        let path = ws.join(".gm/http.token");
        plant(&path, 0o600);
        stage(&repo, "sub/.gm/http.token");
        assert_eq!(load_or_create(&ws, &path).expect("made").replaced, Some(Unfit::Tracked));
        // Committed, then taken out of the index: HEAD still holds the known value.
        plant(&path, 0o600);
        stage(&repo, "sub/.gm/http.token");
        commit(&repo);
        assert_eq!(load_or_create(&ws, &path).expect("made").replaced, Some(Unfit::Tracked));
        let mut index = repo.index().expect("index");
        index.remove_path(Path::new("sub/.gm/http.token")).expect("rm --cached");
        index.write().expect("write index");
        plant(&path, 0o600);
        assert_eq!(load_or_create(&ws, &path).expect("made").replaced, Some(Unfit::Committed));
        // The new token, untracked, is kept.
        let token = load_or_create(&ws, &path).expect("read");
        assert_eq!(token.replaced, None);
        assert_eq!(load_or_create(&ws, &path).expect("read again").value, token.value);
    }
}

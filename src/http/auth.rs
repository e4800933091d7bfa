//! Who may speak to the HTTP front: the bearer token in `.gm/http.token` (or the cookie the
//! status page's one-time link sets), and the `Host` and `Origin` checks that keep a web page
//! on another site from reaching a loopback server through DNS rebinding.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::http::{header, HeaderMap, StatusCode};

/// The cookie the status page's login sets.
pub const COOKIE: &str = "gm_token";
/// How long a login code minted by `gm status --open` stays good.
const CODE_LIFE: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no token (remove it and gm makes a new one)")]
    Empty { path: PathBuf },
}

/// A fresh random token: 256 bits from the OS (uuid v4 draws them from getrandom), as hex.
pub fn random_hex() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The workspace's token: the one in `path`, or a new one written there (mode 0600). It is
/// written to a private temporary file and linked into place, so a reader never sees half a
/// token, and two fronts starting at once agree on one.
pub fn load_or_create(path: &Path) -> Result<String, TokenError> {
    let io = |source| TokenError::Io { path: path.to_owned(), source };
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_owned()),
        Ok(_) => return Err(TokenError::Empty { path: path.to_owned() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let token = random_hex();
    let tmp = path.with_extension(format!("token.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    let written = file.write_all(format!("{token}\n").as_bytes()).and_then(|()| file.sync_all());
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(token),
        // Another front made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(path),
        Err(e) => Err(io(e)),
    }
}

/// Equal without an early exit, so the time a comparison takes says nothing of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the front checks on every request.
#[derive(Debug, Clone)]
pub struct Guard {
    /// `None`: `--http-token none`.
    pub token: Option<String>,
    /// `Host` values accepted; empty with `--http-allow-remote` (any host, the token guards).
    pub hosts: Vec<String>,
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
    /// token guess was right), then the token from `Authorization: Bearer` or, for the page,
    /// the login cookie.
    pub fn check(&self, headers: &HeaderMap, cookie_ok: bool) -> Result<(), Denied> {
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
        let Some(token) = &self.token else { return Ok(()) };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim);
        if bearer.is_some_and(|b| same(b.as_bytes(), token.as_bytes())) {
            return Ok(());
        }
        if cookie_ok && cookie(headers, COOKIE).is_some_and(|c| same(c.as_bytes(), token.as_bytes())) {
            return Ok(());
        }
        Err(Denied::Token)
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
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

    fn guard() -> Guard {
        Guard { token: Some("t0k".into()), hosts: Guard::loopback_hosts("127.0.0.1:4000".parse().expect("addr")) }
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
        let cookie = [("host", "localhost:4000"), ("cookie", "a=b; gm_token=t0k")];
        assert_eq!(g.check(&headers(&cookie), true), Ok(()));
        assert_eq!(g.check(&headers(&cookie), false), Err(Denied::Token));
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

    #[test]
    fn one_token_per_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("http.token");
        let a = load_or_create(&path).expect("made");
        let b = load_or_create(&path).expect("read");
        assert_eq!(a, b);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
    }
}

//! Test fixtures for the updater, shared by its unit tests and `tests/updater.rs` (which
//! includes this file by path, so it depends only on std, `tar`, `flate2`, `sha2` and
//! `minisign`): a small real HTTP/1.1 server on 127.0.0.1 that records every request, a fake
//! build archive, and minisign keys and signatures.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// What the server answers for a path.
#[derive(Debug, Clone)]
pub struct Route {
    pub body: Vec<u8>,
    /// Sent as `ETag`; a request whose `If-None-Match` equals it gets `304 Not Modified`.
    pub etag: Option<String>,
    /// Whether `Content-Length` is sent; without it the body ends when the connection closes.
    pub length: bool,
}

#[derive(Default)]
struct Shared {
    routes: Mutex<HashMap<String, Route>>,
    requests: Mutex<Vec<Request>>,
    connections: AtomicUsize,
}

/// An HTTP/1.1 server on 127.0.0.1, one thread per connection, `Connection: close` on every
/// answer. It runs until the test process ends.
pub struct TestServer {
    port: u16,
    shared: Arc<Shared>,
}

impl TestServer {
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("local addr").port();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                accepting.connections.fetch_add(1, Ordering::SeqCst);
                let shared = accepting.clone();
                std::thread::spawn(move || answer(stream, &shared));
            }
        });
        TestServer { port, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Serves `body` at `path` with `Content-Length` (and `ETag` when given).
    pub fn serve(&self, path: &str, body: impl Into<Vec<u8>>, etag: Option<&str>) {
        self.route(path, Route { body: body.into(), etag: etag.map(str::to_owned), length: true });
    }

    pub fn route(&self, path: &str, route: Route) {
        self.shared.routes.lock().expect("routes").insert(path.to_owned(), route);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().expect("requests").clone()
    }

    /// Every TCP connection accepted, whether or not a request came on it.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Waits until `n` requests have come (or `timeout` passes) and returns them all.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Request> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.requests();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A port nothing listens on: a connection to it is refused.
pub fn closed_port_url(path: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}{path}")
}

fn answer(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = h.trim_end().split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let request = Request { path: path.clone(), headers };
    let route = shared.routes.lock().expect("routes").get(&path).cloned();
    let response = match route {
        None => head("404 Not Found", &[("Content-Length", "0".into())]),
        Some(route) if route.etag.is_some() && request.header("if-none-match") == route.etag.as_deref() => {
            let etag = route.etag.clone().unwrap_or_default();
            head("304 Not Modified", &[("ETag", etag)])
        }
        Some(route) => {
            let mut fields = Vec::new();
            if route.length {
                fields.push(("Content-Length", route.body.len().to_string()));
            }
            if let Some(etag) = &route.etag {
                fields.push(("ETag", etag.clone()));
            }
            let mut bytes = head("200 OK", &fields);
            bytes.extend_from_slice(&route.body);
            bytes
        }
    };
    shared.requests.lock().expect("requests").push(request);
    let mut stream = stream;
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

fn head(status: &str, fields: &[(&str, String)]) -> Vec<u8> {
    let mut text = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (name, value) in fields {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// A `gm` that answers `--version` as a build of `version` does (a shell script).
pub fn gm_script(version: &str) -> String {
    format!("#!/bin/sh\necho gm {version}\n")
}

/// A build archive as `gm dist` makes it: `gmnew-<version>-<target>/` holding `gm` (with
/// `gm_body`), `build.json` (release) and `skills/gm/SKILL.md`.
pub fn build_archive(version: &str, target: &str, gm_body: &str) -> Vec<u8> {
    let top = format!("gmnew-{version}-{target}");
    let build_json = format!(r#"{{"version":"{version}","target":"{target}","release":true}}"#);
    archive_of(&[
        (format!("{top}/gm"), gm_body.as_bytes().to_vec(), 0o755),
        (format!("{top}/build.json"), build_json.into_bytes(), 0o644),
        (format!("{top}/skills/gm/SKILL.md"), b"# gm skill\n".to_vec(), 0o644),
    ])
}

/// A tar.gz of regular files: (path in the archive, content, mode).
pub fn archive_of(files: &[(String, Vec<u8>, u32)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, content, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(*mode);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, Path::new(path), content.as_slice()).expect("append");
    }
    tar.into_inner().expect("tar").finish().expect("gzip")
}

/// A new minisign key pair: the public key's base64 line (as `GMNEW_UPDATE_PUBKEY` takes it)
/// and the secret key file's text (unencrypted).
pub fn keypair() -> (String, String) {
    let kp = minisign::KeyPair::generate_unencrypted_keypair().expect("keypair");
    let secret = kp.sk.to_box(None).expect("secret key box").to_string();
    (kp.pk.to_base64(), secret)
}

/// The `.minisig` text of `bytes` signed with `secret` (a secret key file's text).
pub fn sign(bytes: &[u8], secret: &str) -> String {
    let sk =
        minisign::SecretKeyBox::from_string(secret).and_then(|b| b.into_unencrypted_secret_key()).expect("secret key");
    minisign::sign(None, &sk, bytes, Some("file:test"), None).expect("sign").to_string()
}

/// A manifest listing one target's archive.
pub fn manifest_json(version: &str, target: &str, archive: &str, sha256: &str, size: usize) -> String {
    format!(
        r#"{{"version":"{version}","targets":{{"{target}":{{"version":"{version}","archive":"{archive}","sha256":"{sha256}","size":{size}}}}}}}"#
    )
}

/// A manifest listing one target's archive with its signature (the `.minisig` text).
pub fn signed_manifest_json(
    version: &str,
    target: &str,
    archive: &str,
    sha256: &str,
    size: usize,
    signature: &str,
) -> String {
    let entry = format!(
        r#"{{"version":"{version}","archive":"{archive}","sha256":"{sha256}","size":{size},"signature":{}}}"#,
        json_string(signature)
    );
    format!(r#"{{"version":"{version}","targets":{{"{target}":{entry}}}}}"#)
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The SHA-256 of bytes, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

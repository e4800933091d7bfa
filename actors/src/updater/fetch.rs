//! The updater's two requests: the manifest, conditional on the last ETag, and an archive,
//! streamed to a file with its SHA-256 computed on the way and cut off as soon as it is longer
//! than the manifest says.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{CONTENT_LENGTH, ETAG, IF_NONE_MATCH};
use reqwest::{Client, StatusCode};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use url::Url;

use super::manifest::MAX_MANIFEST_BYTES;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest wait for the next bytes of a response: a stalled download fails instead of
/// holding the updater forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The whole manifest request.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot start an HTTP client: {}", chain(.0))]
    Client(reqwest::Error),
    #[error("GET {url}: {}", chain(.source))]
    Http { url: Url, source: reqwest::Error },
    #[error("GET {url}: HTTP {status}")]
    Status { url: Url, status: StatusCode },
    #[error("GET {url}: the manifest is over {MAX_MANIFEST_BYTES} bytes")]
    ManifestTooLong { url: Url },
    /// The archive is longer than the manifest says (`announced` when the server said so
    /// before sending it).
    #[error("GET {url}: {} than the manifest's {limit} bytes", match .announced { Some(n) => format!("the server announces {n} bytes, more"), None => "more bytes".to_owned() })]
    OverSize { url: Url, limit: u64, announced: Option<u64> },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// An error and its causes, one after the other: reqwest's own message hides the cause
/// ("error sending request") that says what to do ("Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

pub fn client(user_agent: &str) -> Result<Client, FetchError> {
    Client::builder()
        .user_agent(user_agent)
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
        .map_err(FetchError::Client)
}

/// What the manifest request found.
#[derive(Debug)]
pub enum Fetched {
    /// 304: the manifest is the one whose ETag was sent.
    NotModified,
    Manifest {
        body: Vec<u8>,
        etag: Option<String>,
    },
}

pub async fn manifest(client: &Client, url: &Url, etag: Option<&str>) -> Result<Fetched, FetchError> {
    let http = |source| FetchError::Http { url: url.clone(), source };
    let mut request = client.get(url.clone()).timeout(MANIFEST_TIMEOUT);
    if let Some(etag) = etag {
        request = request.header(IF_NONE_MATCH, etag);
    }
    let mut response = request.send().await.map_err(http)?;
    match response.status() {
        StatusCode::NOT_MODIFIED => return Ok(Fetched::NotModified),
        StatusCode::OK => {}
        status => return Err(FetchError::Status { url: url.clone(), status }),
    }
    let etag = response.headers().get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(http)? {
        if body.len() as u64 + chunk.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(FetchError::ManifestTooLong { url: url.clone() });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched::Manifest { body, etag })
}

/// A downloaded archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// Streams `url` into a new file at `dest`, refusing as soon as it would pass `limit` bytes.
/// The caller removes `dest` whatever happens.
pub async fn archive(client: &Client, url: &Url, limit: u64, dest: &Path) -> Result<Downloaded, FetchError> {
    let http = |source| FetchError::Http { url: url.clone(), source };
    let io = |source| FetchError::Io { path: dest.to_path_buf(), source };
    let mut response = client.get(url.clone()).send().await.map_err(http)?;
    if response.status() != StatusCode::OK {
        return Err(FetchError::Status { url: url.clone(), status: response.status() });
    }
    let announced = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit) {
        return Err(FetchError::OverSize { url: url.clone(), limit, announced });
    }
    let file = tokio::fs::OpenOptions::new().write(true).create_new(true).open(dest).await.map_err(io)?;
    let mut file = tokio::io::BufWriter::with_capacity(256 * 1024, file);
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(http)? {
        bytes += chunk.len() as u64;
        if bytes > limit {
            return Err(FetchError::OverSize { url: url.clone(), limit, announced: None });
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(Downloaded { bytes, sha256 })
}

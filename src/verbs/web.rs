//! fetch: one HTTP(S) request through reqwest (rustls). Redirects are followed up to 20 hops (a
//! loop is an error); the body stays inline when it is text under the cap, and is saved whole
//! under `.gm/out/` when it is larger or binary. A timeout is an error, never a hang.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Ctx, VerbError};

const MAX_REDIRECTS: usize = 20;
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Text bodies up to this size come back inline.
const INLINE_BODY: usize = 32 * 1024;
/// A body larger than this is refused (the download stops there).
const MAX_BODY: u64 = 1 << 30;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FetchArgs {
    /// An http:// or https:// URL.
    pub url: String,
    /// GET (default), HEAD, POST, PUT, PATCH or DELETE.
    pub method: Option<String>,
    /// Request headers.
    pub headers: Option<BTreeMap<String, String>>,
    /// A request body (text).
    pub body: Option<String>,
    /// Timeout for the whole request in ms (default 30000, at most 600000).
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchReply {
    pub status: u16,
    /// The URL of the final response, after redirects.
    pub url: String,
    pub redirects: usize,
    pub headers: BTreeMap<String, String>,
    /// The body as text, when it is text and under 256 KiB (else its first 256 KiB of text, or
    /// nothing for binary data).
    pub body: String,
    pub body_bytes: u64,
    /// Bytes of the body not in `body`; the whole is in `bodyFile`.
    pub body_cut: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_file: Option<String>,
    pub binary: bool,
}

pub async fn fetch(ctx: Ctx, args: FetchArgs) -> Result<FetchReply, VerbError> {
    let url = reqwest::Url::parse(&args.url)
        .map_err(|e| VerbError::InvalidArgs(format!("malformed URL '{}': {e}", args.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(VerbError::InvalidArgs(format!("fetch speaks http and https, not {}", url.scheme())));
    }
    let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(VerbError::InvalidArgs(format!("timeoutMs must be between 1 and {MAX_TIMEOUT_MS}")));
    }
    let method = args.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let method = match method.as_str() {
        "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" => {
            reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| VerbError::InvalidArgs(e.to_string()))?
        }
        other => return Err(VerbError::InvalidArgs(format!("unsupported method {other}"))),
    };
    let hops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hops.clone();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        counted.store(attempt.previous().len(), std::sync::atomic::Ordering::Relaxed);
        if attempt.previous().iter().any(|u| u == attempt.url()) {
            let chain: Vec<String> = attempt.previous().iter().map(|u| u.to_string()).collect();
            let looped = format!("redirect loop: {} -> {}", chain.join(" -> "), attempt.url());
            attempt.error(looped)
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    let client = reqwest::Client::builder()
        .redirect(policy)
        .timeout(Duration::from_millis(timeout_ms))
        .user_agent(concat!("gm/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| VerbError::Internal(format!("cannot build the HTTP client: {e}")))?;
    let mut req = client.request(method, url);
    for (k, v) in args.headers.unwrap_or_default() {
        req = req.header(k, v);
    }
    if let Some(body) = args.body {
        req = req.body(body);
    }
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            VerbError::Timeout(format!("the request timed out after {timeout_ms} ms"))
        } else if e.is_redirect() {
            let why = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_else(|| e.to_string());
            VerbError::Refused(why)
        } else {
            VerbError::Unavailable(format!("the request failed: {e}"))
        }
    };
    let mut resp = req.send().await.map_err(failed)?;
    let status = resp.status().as_u16();
    let final_url = resp.url().to_string();
    let headers: BTreeMap<String, String> = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let mut body: Vec<u8> = Vec::new();
    let mut spill: Option<(std::path::PathBuf, std::fs::File)> = None;
    let mut total: u64 = 0;
    while let Some(chunk) = resp.chunk().await.map_err(failed)? {
        total += chunk.len() as u64;
        if total > MAX_BODY {
            return Err(VerbError::Refused(format!(
                "the body is larger than {MAX_BODY} bytes; download it with run_shell"
            )));
        }
        if spill.is_none() && body.len() + chunk.len() > INLINE_BODY {
            spill = Some(open_spill(&ctx, &body)?);
        }
        match &mut spill {
            Some((path, file)) => {
                use std::io::Write;
                file.write_all(&chunk).map_err(|e| VerbError::io("cannot save the body", path, e))?;
                if body.len() < INLINE_BODY {
                    let room = INLINE_BODY - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            None => body.extend_from_slice(&chunk),
        }
    }
    let text = inline_text(&body, spill.is_some());
    let binary = text.is_none();
    if binary && spill.is_none() {
        spill = Some(open_spill(&ctx, &body)?);
    }
    let text = text.unwrap_or_default();
    let shown = text.len() as u64;
    Ok(FetchReply {
        status,
        url: final_url,
        redirects: hops.load(std::sync::atomic::Ordering::Relaxed),
        headers,
        body: text,
        body_bytes: total,
        body_cut: total - shown,
        body_file: spill.map(|(p, _)| p.to_string_lossy().into_owned()),
        binary,
    })
}

/// The inline part of a body as text, or `None` when the body is binary (a NUL byte, or bytes
/// that are not UTF-8). When the inline part was cut from a longer body (`cut`), a character
/// the cut split is left out whole, so the text never holds more than the body's bytes.
fn inline_text(body: &[u8], cut: bool) -> Option<String> {
    if body.contains(&0) {
        return None;
    }
    match std::str::from_utf8(body) {
        Ok(text) => Some(text.to_owned()),
        Err(e) if cut && e.error_len().is_none() => {
            std::str::from_utf8(&body[..e.valid_up_to()]).ok().map(str::to_owned)
        }
        Err(_) => None,
    }
}

/// A file under `.gm/out/` holding what was read so far; the rest is appended to it.
fn open_spill(ctx: &Ctx, head: &[u8]) -> Result<(std::path::PathBuf, std::fs::File), VerbError> {
    use std::io::Write;
    let dir = ctx.state_dir.join("out");
    let path = super::out::unique_path(&dir, "fetch", ".body");
    // A new file in gm's folder, reached through no link.
    let mut file = gm_actors::state_file::open_own(&path, gm_actors::state_file::How::NEW)
        .map_err(|e| VerbError::io("cannot save the body", &path, e.into()))?;
    file.write_all(head).map_err(|e| VerbError::io("cannot save the body", &path, e))?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inline_cut_that_splits_a_character_leaves_the_character_out() {
        let mut body = vec![b'a'; 5];
        body.extend_from_slice("é".as_bytes());
        assert_eq!(inline_text(&body[..6], true).as_deref(), Some("aaaaa"));
        assert_eq!(inline_text(&body, false).as_deref(), Some("aaaaaé"));
        assert_eq!(inline_text(&body[..6], false), None, "a whole body that ends mid-character is not text");
        assert_eq!(inline_text(b"a\0b", false), None);
        assert_eq!(inline_text(&[b'a', 0xff, b'b'], true), None, "bad bytes inside are binary");
    }
}

//! The status page: `GET /` is one HTML page (no external assets) that shows what
//! `gm status --json` shows — the worker, its sessions and calls in flight, jobs and background
//! bodies with their output tails, child servers — refreshed every two seconds from
//! `/status.json`, and the run log's last events as a timeline that grows live from `/events`
//! (SSE). It is reached with a login cookie of its own, set by a one-time `/login?t=` link and
//! kept by the front for twelve hours: never the token, and good for these routes only (`/mcp`
//! takes no cookie), since a browser sends a host's cookies to every port of it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde_json::json;

use super::sse::Events;
use super::{auth, Front};

/// Log events the timeline keeps (and shows a new page).
pub const TIMELINE_KEEP: usize = 200;
/// Pages open at once (each holds an SSE stream).
pub const MAX_PAGES: usize = 16;
/// How often the log file is looked at for new events.
const TAIL_EVERY: Duration = Duration::from_millis(200);
/// How much of each job's output the page shows.
const TAIL_BYTES: u64 = 2048;
/// How much of an existing log is read at the start, for the first events of the timeline.
const TAIL_START: u64 = 256 << 10;

pub async fn index(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if let Err(denied) = front.guard.check(&headers, true) {
        let hint = "Open the one-time link that `gm serve --http` printed, or run `gm status --open` in the workspace.";
        return (denied.status(), Html(format!("<!doctype html><title>gm</title><p>{}. {hint}</p>", denied.message())))
            .into_response();
    }
    let page = PAGE.replace("{{URL}}", &front.url);
    ([(header::CACHE_CONTROL, "no-store")], Html(page)).into_response()
}

#[derive(serde::Deserialize)]
pub struct Login {
    t: String,
}

/// `/login?t=CODE`: a live one-time code makes a page login, sets its cookie, and goes to the
/// page.
pub async fn login(State(front): State<Arc<Front>>, headers: HeaderMap, Query(q): Query<Login>) -> Response {
    // The site checks hold here too; the token is what the code stands for.
    if let Err(denied) = front.guard.check_site(&headers) {
        return super::refuse(denied);
    }
    if !front.codes.redeem(&q.t) {
        return (
            StatusCode::UNAUTHORIZED,
            "this link was used already or is too old; `gm status --open` makes another",
        )
            .into_response();
    }
    let pages = &front.guard.pages;
    let mut response = Redirect::to("/").into_response();
    let login = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        pages.cookie_name(),
        pages.open(),
        auth::PAGE_LOGIN_LIFE.as_secs()
    );
    // gm once set the token itself as this cookie: a browser holding it would send it to any
    // server on this host. Expire it.
    let old = format!("{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0", auth::OLD_COOKIE);
    for cookie in [login, old] {
        if let Ok(v) = header::HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// What `gm status --json` prints, and the sessions the front holds.
pub async fn status(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if let Err(denied) = front.guard.check(&headers, true) {
        return super::refuse(denied);
    }
    let workspace = front.files.workspace.clone();
    let queried = tokio::task::spawn_blocking(move || {
        crate::worker::status::query(&workspace).map(|status| status.map(with_tails))
    })
    .await;
    let (status, error) = match queried {
        Ok(Ok(s)) => (s, None),
        Ok(Err(e)) => (None, Some(e.to_string())),
        Err(e) => (None, Some(e.to_string())),
    };
    let http: Vec<String> = super::lock(&front.sessions).keys().cloned().collect();
    let body = json!({
        "workspace": front.files.workspace,
        "running": status.is_some(),
        "status": status,
        "error": error,
        "front": { "pid": std::process::id(), "url": format!("{}/mcp", front.url), "httpSessions": http },
    });
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body.to_string())
        .into_response()
}

/// The status with each job's and body's output tail read from its log (the worker's list
/// leaves them out: it is for `gm status`, which shows no output).
fn with_tails(mut status: serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Seek, SeekFrom};
    for key in ["jobs", "bodies"] {
        let Some(items) = status.get_mut(key).and_then(|v| v.as_array_mut()) else { continue };
        for item in items {
            let Some(path) = item["logPath"].as_str().map(PathBuf::from) else { continue };
            let Ok(mut file) = std::fs::File::open(&path) else { continue };
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let mut tail = Vec::new();
            if file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES))).is_ok()
                && file.take(TAIL_BYTES).read_to_end(&mut tail).is_ok()
            {
                item["tail"] = json!(String::from_utf8_lossy(&tail));
            }
        }
    }
    status
}

/// The timeline: the log's kept events, then each new one.
pub async fn events(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if let Err(denied) = front.guard.check(&headers, true) {
        return super::refuse(denied);
    }
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    match front.timeline.open(Some(after)) {
        Some((open, replay, live)) => super::sse::respond(open, replay, live, Some("log")).into_response(),
        None => (StatusCode::TOO_MANY_REQUESTS, "too many pages open").into_response(),
    }
}

/// Follows the run log: each new complete line becomes a timeline event. A log that shrank
/// (a new workspace state) is read again from its start.
pub async fn tail_log(path: PathBuf, timeline: Arc<Events>) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut offset: Option<u64> = None;
    let mut partial: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if let Ok(mut file) = tokio::fs::File::open(&path).await {
            let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
            let from = match offset {
                Some(o) if o <= len => o,
                Some(_) => 0,
                None => len.saturating_sub(TAIL_START),
            };
            // Starting mid-file: the first line is cut, and dropped.
            let mut skip_first = offset.is_none() && from > 0;
            if offset != Some(len) && file.seek(std::io::SeekFrom::Start(from)).await.is_ok() {
                if offset.is_none_or(|o| o > len) {
                    partial.clear();
                }
                let mut at = from;
                while let Ok(n) = file.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    at += n as u64;
                    partial.extend_from_slice(&buf[..n]);
                    while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = partial.drain(..=end).collect();
                        if std::mem::take(&mut skip_first) {
                            continue;
                        }
                        let text = String::from_utf8_lossy(&line[..line.len() - 1]).trim().to_owned();
                        if !text.is_empty() {
                            timeline.push(text.into());
                        }
                    }
                }
                offset = Some(at);
            } else if offset.is_none() {
                offset = Some(len);
            }
        }
        tokio::time::sleep(TAIL_EVERY).await;
    }
}

const PAGE: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gm status</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.2em 0 .4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%} td,th{text-align:left;padding:2px 8px;vertical-align:top;border-bottom:1px solid #eee}
pre{margin:0;white-space:pre-wrap;font:12px/1.3 ui-monospace,monospace;background:#f0f0f0;padding:4px;max-height:12em;overflow:auto}
.muted{color:#777} #timeline td{font:12px ui-monospace,monospace} .kind{font-weight:bold}
#live{display:inline-block;width:.7em;height:.7em;border-radius:50%;background:#bbb} #live.on{background:#2a2}
</style></head><body>
<h1>gm <span id="live" title="live"></span></h1>
<div class="muted" id="where">{{URL}}/mcp</div>
<div id="error" style="color:#a00"></div>
<h2>Worker</h2><div id="worker" class="muted">…</div>
<h2>Sessions</h2><table id="sessions"></table>
<h2>Jobs</h2><table id="jobs"></table>
<h2>Background bodies</h2><table id="bodies"></table>
<h2>Child servers</h2><table id="children"></table>
<h2>Timeline <span class="muted" id="count"></span></h2><table id="timeline"></table>
<script>
"use strict";
const $ = id => document.getElementById(id);
const esc = s => String(s ?? "").replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]));
const ms = n => { n = Math.round((n||0)/1000); return n < 60 ? n+"s" : n < 3600 ? Math.floor(n/60)+"m"+(n%60)+"s" : Math.floor(n/3600)+"h"+Math.floor(n%3600/60)+"m"; };
function rows(el, head, items, row) {
  el.innerHTML = items.length ? "<tr>" + head.map(h => "<th>"+h+"</th>").join("") + "</tr>" + items.map(x => "<tr>" + row(x).map(c => "<td>"+c+"</td>").join("") + "</tr>").join("")
                              : "<tr><td class=muted>none</td></tr>";
}
async function refresh() {
  try {
    const r = await fetch("/status.json", {cache: "no-store"});
    if (!r.ok) throw new Error("status: " + r.status);
    const s = await r.json();
    $("error").textContent = s.error || "";
    const st = s.status || {};
    if (!s.status) { $("worker").textContent = "no worker runs (one starts with the next session)"; }
    else {
      const w = st.worker;
      $("worker").innerHTML = esc(`pid ${w.pid} · gm ${w.version} · up ${ms(w.uptimeMs)} · rss ${((w.rssBytes||0)/1048576).toFixed(1)} MiB · ${w.workspace}`);
    }
    rows($("sessions"), ["session","client","protocol","run / step","calls in flight"], (st.sessions||[]), x =>
      [esc(x.session), esc((x.client||{}).name || "(not initialized)"), esc(x.protocolVersion), esc((x.run||{}).id)+" / "+esc((x.run||{}).step), esc(x.callsInFlight)]);
    const job = x => [esc(x.name), esc(x.state), ms(x.durationMs), "<code>"+esc(x.command)+"</code>", "<pre>"+esc(x.tail)+"</pre>"];
    rows($("jobs"), ["name","state","time","command","output"], st.jobs||[], job);
    rows($("bodies"), ["name","state","time","code","output"], st.bodies||[], job);
    rows($("children"), ["server","state","tools"], st.children||[], x => [esc(x.name), esc(x.state), esc(x.tools)]);
  } catch (e) { $("error").textContent = String(e); }
}
let count = 0;
function event(data) {
  let e; try { e = JSON.parse(data); } catch { return; }
  const t = $("timeline");
  const tr = document.createElement("tr");
  const when = e.ts ? new Date(e.ts).toLocaleTimeString() : "";
  const what = e.tool || e.verb || e.name || e.state || "";
  const extra = Object.entries(e).filter(([k]) => !["seq","ts","kind","session","tool","verb","name","state","run"].includes(k)).map(([k,v]) => k+"="+(typeof v === "string" ? v : JSON.stringify(v))).join(" ");
  tr.innerHTML = `<td>${esc(e.seq)}</td><td>${esc(when)}</td><td class=kind>${esc(e.kind)}</td><td>${esc(what)}</td><td>${esc(e.session)}</td><td>${esc(extra.slice(0, 300))}</td>`;
  t.insertBefore(tr, t.firstChild);
  while (t.rows.length > 200) t.deleteRow(t.rows.length - 1);
  $("count").textContent = "(" + (++count) + " events)";
}
const source = new EventSource("/events");
source.addEventListener("log", m => event(m.data));
source.onopen = () => $("live").className = "on";
source.onerror = () => $("live").className = "";
refresh(); setInterval(refresh, 2000);
</script></body></html>
"##;

//! `gm status`: asks the workspace's worker what it runs — its build, its sessions, jobs and
//! background bodies, child servers — over its socket, and prints it for a person or as JSON.

use gm_actors::sys::local::Stream as UnixStream;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::hello::First;
use super::paths;

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("workspace {path}: {source}")]
    Workspace { path: std::path::PathBuf, source: std::io::Error },
    #[error("the socket folder: {0}")]
    SocketDir(std::io::Error),
    #[error("talking to the worker: {0}")]
    Io(#[from] std::io::Error),
    #[error("the worker's answer is not JSON: {0}")]
    Answer(#[from] serde_json::Error),
}

/// The status of `workspace`'s worker, or `None` when no worker serves it.
pub fn query(workspace: &Path) -> Result<Option<Value>, StatusError> {
    let workspace = std::fs::canonicalize(workspace)
        .map_err(|source| StatusError::Workspace { path: workspace.to_owned(), source })?;
    let socket = paths::socket_path(&workspace).map_err(StatusError::SocketDir)?;
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut line = serde_json::to_vec(&First::Status)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    if answer.trim().is_empty() {
        return Ok(None); // a worker that was leaving
    }
    Ok(Some(serde_json::from_str(&answer)?))
}

/// The status for a person: a few lines per part.
pub fn render(workspace: &Path, status: Option<&Value>) -> String {
    let Some(s) = status else {
        return format!("no gm worker serves {} (one starts with the first `gm serve` there)\n", workspace.display());
    };
    let w = &s["worker"];
    let mut out = String::new();
    let mib = |v: &Value| v.as_u64().map_or("?".to_owned(), |b| format!("{:.1} MiB", b as f64 / 1048576.0));
    out.push_str(&format!(
        "worker  pid {}  gm {}  up {}  rss {}\n        {}\n        workspace {}\n",
        w["pid"],
        text(&w["version"]),
        duration(w["uptimeMs"].as_u64().unwrap_or(0)),
        mib(&w["rssBytes"]),
        text(&w["exe"]),
        text(&w["workspace"]),
    ));
    let sandbox = &w["sandbox"];
    if sandbox["mode"].as_str().is_some_and(|m| m != "off") {
        let list = |v: &Value| v.as_array().into_iter().flatten().map(text).collect::<Vec<_>>().join(", ");
        out.push_str(&format!(
            "        sandbox {}  writable [{}]  read-only [{}]  network {}\n",
            text(&sandbox["mode"]),
            list(&sandbox["writable"]),
            list(&sandbox["readOnly"]),
            text(&sandbox["network"]),
        ));
    }
    let sessions = s["sessions"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("sessions ({})\n", sessions.len()));
    for x in &sessions {
        let client = x["client"]["name"].as_str().unwrap_or("(not initialized)");
        let task = x["run"]["task"].as_str().map(|t| format!("  task: {}", first_line(t))).unwrap_or_default();
        out.push_str(&format!(
            "  {}  {} {}  {}  {}  run {} step {}  calls in flight {}{}\n",
            text(&x["session"]),
            client,
            x["client"]["version"].as_str().unwrap_or(""),
            x["protocolVersion"].as_str().unwrap_or("-"),
            text(&x["surface"]),
            text(&x["run"]["id"]),
            x["run"]["step"],
            x["callsInFlight"],
            task,
        ));
        for n in x["notInForce"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "    not in force: {} {} (the worker has {}): {}\n",
                text(&n["option"]),
                n["asked"],
                n["inForce"],
                text(&n["why"])
            ));
        }
    }
    for (title, key) in [("jobs", "jobs"), ("background bodies", "bodies")] {
        let items = s[key].as_array().cloned().unwrap_or_default();
        out.push_str(&format!("{title} ({})\n", items.len()));
        for j in &items {
            out.push_str(&format!(
                "  {}  {}  {}  {}\n",
                text(&j["name"]),
                text(&j["state"]),
                duration(j["durationMs"].as_u64().unwrap_or(0)),
                first_line(j["command"].as_str().unwrap_or(""))
            ));
        }
    }
    let children = s["children"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("child servers ({})\n", children.len()));
    for c in &children {
        let tools = c["tools"].as_u64().map(|n| format!("  {n} tools")).unwrap_or_default();
        out.push_str(&format!("  {}  {}{}\n", text(&c["name"]), text(&c["state"]), tools));
    }
    out
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > 60 {
        format!("{}…", line.chars().take(59).collect::<String>())
    } else {
        line.to_owned()
    }
}

fn duration(ms: u64) -> String {
    match ms / 1000 {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

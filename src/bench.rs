//! `gm bench`: replays the tool calls of a recorded run log against a fresh `gm serve` child in
//! a scratch copy of the workspace (never the user's files), and reports throughput and
//! latency per tool.
//!
//! Calls that depended on each other in the recording — one file touched, with a write among
//! them, or a call with effects gm cannot see (a shell, run_code, git, rows) — keep their
//! order; the rest overlap, up to `--concurrency`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gm_actors::mcp_client::stdio::{percentile, ClientError, Stderr, StdioClient};
use serde::Serialize;
use serde_json::{json, Value};

use crate::blobs::Blobs;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot read the log {path}: {source}")]
    Log { path: PathBuf, source: std::io::Error },
    #[error("the log {0} holds no action events to replay")]
    Empty(PathBuf),
    #[error(
        "the log {0} does not say which workspace it was recorded in (no start event names one): pass --workspace"
    )]
    NoWorkspace(PathBuf),
    #[error("the workspace {path} (from {from}) is not a directory: {source}")]
    Workspace { path: PathBuf, from: &'static str, source: std::io::Error },
    #[error("cannot prepare the scratch workspace {path}: {source}")]
    Scratch { path: PathBuf, source: std::io::Error },
    #[error("the gm server under test failed: {0}")]
    Server(String),
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub log: PathBuf,
    /// The workspace as it was when the recording started (default: the log's workspace).
    pub workspace: Option<PathBuf>,
    pub surface: Option<String>,
    pub max_inflight: usize,
    pub concurrency: usize,
    pub repeat: usize,
    /// Replay into this directory (which must not exist) and keep it, instead of a temp dir.
    pub keep: Option<PathBuf>,
    pub progress: bool,
}

#[derive(Debug, Clone)]
struct Call {
    seq: u64,
    tool: String,
    args: Value,
    /// The file it touches and whether it writes it; `None` with `barrier` for calls with
    /// effects gm cannot see.
    file: Option<(String, bool)>,
    barrier: bool,
}

#[derive(Debug, Serialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ToolStats {
    pub calls: usize,
    pub errors: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Serialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub seq: u64,
    pub tool: String,
    pub error: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    pub log: PathBuf,
    pub surface: String,
    pub calls: usize,
    pub repeat: usize,
    pub concurrency: usize,
    pub wall_ms: f64,
    pub calls_per_s: f64,
    pub errors: usize,
    pub tools: BTreeMap<String, ToolStats>,
    /// Calls that could not be replayed or failed, by the seq of their recorded event (the
    /// first 100).
    pub failures: Vec<Failure>,
    /// Where the last replay ran (kept with --keep).
    pub workspace: PathBuf,
}

fn classify(tool: &str, args: &Value) -> (Option<(String, bool)>, bool) {
    let path = args.get("path").and_then(Value::as_str).map(str::to_owned);
    match tool {
        "read_file" | "stat_file" | "list_dir" => (Some((path.unwrap_or_else(|| ".".into()), false)), false),
        "write_file" | "edit_file" => (path.map(|p| (p, true)), false),
        "wiki_write" => (args.get("page").and_then(Value::as_str).map(|p| (format!(".gm/wiki/{p}"), true)), false),
        "search" | "grep" | "callers" | "impact" | "wiki_search" | "query_log" | "next_context" | "fetch"
        | "job_status" | "git_status" | "git_state" | "git_log" | "git_diff" | "git_show" | "prd_list"
        | "unknown_list" => (None, false),
        _ => (None, true),
    }
}

/// What a recorded log says: its calls, and the surface and workspace of its first start.
struct Recording {
    calls: Vec<Call>,
    surface: Option<String>,
    workspace: Option<PathBuf>,
}

/// The action events of a log, as calls.
fn read_calls(log: &Path) -> Result<Recording, BenchError> {
    let file = std::fs::File::open(log).map_err(|source| BenchError::Log { path: log.to_owned(), source })?;
    let mut calls = Vec::new();
    let mut surface = None;
    let mut workspace = None;
    let mut started = false;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|source| BenchError::Log { path: log.to_owned(), source })?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        match v["kind"].as_str() {
            Some("start") if !started => {
                started = true;
                surface = v["surface"].as_str().map(str::to_owned);
                workspace = v["workspace"].as_str().map(PathBuf::from);
            }
            Some("action") => {
                let Some(tool) = v["tool"].as_str() else { continue };
                let args = v.get("args").cloned().unwrap_or(json!({}));
                let (file, barrier) = classify(tool, &args);
                calls.push(Call { seq: v["seq"].as_u64().unwrap_or(0), tool: tool.to_owned(), args, file, barrier });
            }
            _ => {}
        }
    }
    Ok(Recording { calls, surface, workspace })
}

/// Puts back the blobs a call's arguments refer to, from the first store that has them all.
fn restore(stores: &[Blobs], args: &mut Value) -> Result<(), String> {
    let mut last = Ok(());
    for store in stores {
        let mut candidate = args.clone();
        last = store.restore(&mut candidate);
        if last.is_ok() {
            *args = candidate;
            return Ok(());
        }
    }
    last
}

/// The workspace to copy: the one given, else the one the log's first start event names, else
/// the one a log at `<workspace>/.gm/log.jsonl` sits in.
fn source_workspace(opts: &BenchOptions, recorded: Option<PathBuf>) -> Result<PathBuf, BenchError> {
    let beside = || {
        let log = std::fs::canonicalize(&opts.log).ok()?;
        let state = log.parent()?;
        (state.file_name()? == ".gm").then(|| state.parent().map(Path::to_path_buf)).flatten()
    };
    let (path, from) = match (&opts.workspace, recorded) {
        (Some(w), _) => (w.clone(), "--workspace"),
        (None, Some(w)) => (w, "the log's start event"),
        (None, None) => (beside().ok_or_else(|| BenchError::NoWorkspace(opts.log.clone()))?, "the log's location"),
    };
    let path =
        std::fs::canonicalize(&path).map_err(|source| BenchError::Workspace { path: path.clone(), from, source })?;
    if !path.is_dir() {
        let source = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
        return Err(BenchError::Workspace { path, from, source });
    }
    Ok(path)
}

/// Copies the workspace into `to`, leaving out gm's own `.gm/` and what `.gitignore` excludes
/// (build output); `.git` comes along, so git verbs replay too. When `to` lies inside `from`
/// (a workspace that holds the temp directory), `to` itself is left out: the copy never
/// copies itself.
fn copy_workspace(from: &Path, to: &Path) -> Result<(), BenchError> {
    let err = |source| BenchError::Scratch { path: to.to_owned(), source };
    std::fs::create_dir_all(to).map_err(err)?;
    let to_real = std::fs::canonicalize(to).map_err(err)?;
    let walk = ignore::WalkBuilder::new(from)
        .hidden(false)
        .require_git(false)
        .filter_entry(move |e| e.file_name() != ".gm" && !e.path().starts_with(&to_real))
        .build();
    for entry in walk.filter_map(Result::ok) {
        let Ok(rel) = entry.path().strip_prefix(from) else { continue };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dest = to.join(rel);
        let Some(t) = entry.file_type() else { continue };
        if t.is_dir() {
            std::fs::create_dir_all(&dest).map_err(err)?;
        } else if t.is_file() {
            std::fs::copy(entry.path(), &dest).map_err(err)?;
        } else if t.is_symlink() {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                let _ = gm_actors::sys::symlink(&target, &dest);
            }
        }
    }
    // .git is not walked by the ignore rules when it is a directory named .git: copy it whole.
    let git = from.join(".git");
    if git.is_dir() && !to.join(".git/HEAD").exists() {
        copy_dir(&git, &to.join(".git")).map_err(err)?;
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// The gm under test: a `gm serve` child, spoken to through gm's one stdio client.
struct Served {
    client: StdioClient,
}

impl Served {
    fn start(workspace: &Path, surface: &str, max_inflight: usize) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::Server(e.to_string()))?;
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--surface", surface, "--max-inflight", &max_inflight.to_string(), "--workspace"])
            .arg(workspace)
            // The scratch copy's worker leaves as soon as the replay's session ends.
            .env("GM_WORKER_IDLE_MS", "1");
        let mut client = StdioClient::spawn(cmd, Stderr::Discard)
            .map_err(|e| BenchError::Server(format!("cannot start gm serve: {e}")))?;
        let handshake = |e: ClientError| BenchError::Server(format!("the handshake failed: {e}"));
        client.initialize("2025-11-25", "gm-bench").map_err(handshake)?;
        client
            .call("resources/read", json!({ "uri": "skill://gm/SKILL.md" }), Some(Duration::from_secs(60)))
            .map_err(handshake)?;
        Ok(Self { client })
    }

    fn send(&mut self, v: &Value) -> Result<(), BenchError> {
        self.client.send(v).map_err(|e| BenchError::Server(format!("gm serve went away: {e}")))
    }

    /// The next reply (a message with an id), at most `timeout` from now.
    fn reply(&mut self, timeout: Duration) -> Result<Value, BenchError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.client.recv(Some(left)) {
                Ok(Some(v)) if v.get("id").is_some() => return Ok(v),
                Ok(Some(_)) => {}
                Ok(None) => return Err(BenchError::Server(format!("a call got no reply within {timeout:?}"))),
                Err(e) => return Err(BenchError::Server(format!("gm serve went away: {e}"))),
            }
        }
    }
}

pub fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    let Recording { calls, surface: recorded_surface, workspace: recorded_workspace } = read_calls(&opts.log)?;
    if calls.is_empty() {
        return Err(BenchError::Empty(opts.log.clone()));
    }
    let surface = opts.surface.clone().or(recorded_surface).unwrap_or_else(|| "tools".into());
    let source = source_workspace(opts, recorded_workspace)?;
    // Long strings were logged as blobs: put them back, from beside the log or from the
    // recorded workspace's store. A call whose blob is gone is reported, not replayed.
    let stores: Vec<Blobs> =
        opts.log.parent().map(Blobs::new).into_iter().chain(std::iter::once(Blobs::new(&source.join(".gm")))).collect();
    let mut unreplayable = Vec::new();
    let calls: Vec<Call> = calls
        .into_iter()
        .filter_map(|mut call| match restore(&stores, &mut call.args) {
            Ok(()) => Some(call),
            Err(error) => {
                unreplayable.push(Failure { seq: call.seq, tool: call.tool.clone(), error });
                None
            }
        })
        .collect();
    let repeat = opts.repeat.max(1);
    let concurrency = opts.concurrency.max(1);
    let progress = opts.progress.then(|| {
        let bar = indicatif::ProgressBar::new((calls.len() * repeat) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} calls ({per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut latencies: HashMap<String, Vec<f64>> = HashMap::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    for f in &unreplayable {
        *errors.entry(f.tool.clone()).or_default() += repeat;
    }
    let mut failures = unreplayable;
    let mut wall = Duration::ZERO;
    let mut workspace = PathBuf::new();
    for round in 0..repeat {
        // A fresh copy each round, removed after it unless it is the one to keep.
        let mut scratch = None;
        let target = match (&opts.keep, round + 1 == repeat) {
            (Some(keep), true) => keep.clone(),
            _ => {
                let dir = tempfile::Builder::new()
                    .prefix("gm-bench-")
                    .tempdir()
                    .map_err(|source| BenchError::Scratch { path: std::env::temp_dir(), source })?;
                let p = dir.path().join("ws");
                scratch = Some(dir);
                p
            }
        };
        if target.exists() && opts.keep.as_ref() == Some(&target) {
            return Err(BenchError::Scratch {
                path: target.clone(),
                source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "--keep names a directory that exists"),
            });
        }
        copy_workspace(&source, &target)?;
        let mut server = Served::start(&target, &surface, opts.max_inflight)?;
        let started = Instant::now();
        replay(&mut server, &calls, concurrency, |call, ms, reply| {
            latencies.entry(call.tool.clone()).or_default().push(ms);
            let error = reply.get("error").map(|e| e["message"].as_str().unwrap_or("error").to_owned()).or_else(|| {
                (reply["result"]["isError"] == true).then(|| {
                    reply["result"]["structuredContent"]["error"]["message"].as_str().unwrap_or("error").to_owned()
                })
            });
            if let Some(error) = error {
                *errors.entry(call.tool.clone()).or_default() += 1;
                if failures.len() < 100 {
                    failures.push(Failure { seq: call.seq, tool: call.tool.clone(), error });
                }
            }
            if let Some(bar) = &progress {
                bar.inc(1);
            }
        })?;
        wall += started.elapsed();
        drop(server);
        drop(scratch);
        workspace = target;
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let mut tools = BTreeMap::new();
    for (tool, mut ms) in latencies {
        ms.sort_by(|a, b| a.total_cmp(b));
        tools.insert(
            tool.clone(),
            ToolStats {
                calls: ms.len(),
                errors: errors.get(&tool).copied().unwrap_or(0),
                p50_ms: percentile(&ms, 0.5),
                p95_ms: percentile(&ms, 0.95),
                p99_ms: percentile(&ms, 0.99),
                max_ms: ms.last().copied().unwrap_or(0.0),
            },
        );
    }
    let total = calls.len() * repeat;
    let wall_ms = wall.as_secs_f64() * 1000.0;
    Ok(BenchReport {
        log: opts.log.clone(),
        surface,
        calls: total,
        repeat,
        concurrency,
        wall_ms,
        calls_per_s: total as f64 / wall.as_secs_f64().max(1e-9),
        errors: errors.values().sum(),
        tools,
        failures,
        workspace,
    })
}

/// Sends the calls, overlapping the independent ones, and reports each reply.
fn replay(
    server: &mut Served,
    calls: &[Call],
    concurrency: usize,
    mut on_reply: impl FnMut(&Call, f64, &Value),
) -> Result<(), BenchError> {
    let mut next = 0;
    let mut inflight: HashMap<u64, (usize, Instant)> = HashMap::new();
    let mut id: u64 = 0;
    while next < calls.len() || !inflight.is_empty() {
        // Start what may start now.
        while next < calls.len() && inflight.len() < concurrency && can_start(&calls[next], &inflight, calls) {
            id += 1;
            let c = &calls[next];
            server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": c.tool, "arguments": c.args } }))?;
            inflight.insert(id, (next, Instant::now()));
            next += 1;
        }
        let reply = server.reply(Duration::from_secs(600))?;
        let Some(rid) = reply["id"].as_u64() else { continue };
        if let Some((index, t)) = inflight.remove(&rid) {
            on_reply(&calls[index], t.elapsed().as_secs_f64() * 1000.0, &reply);
        }
    }
    Ok(())
}

fn can_start(call: &Call, inflight: &HashMap<u64, (usize, Instant)>, calls: &[Call]) -> bool {
    if inflight.is_empty() {
        return true;
    }
    if call.barrier {
        return false;
    }
    inflight.values().all(|(i, _)| {
        let other = &calls[*i];
        if other.barrier {
            return false;
        }
        match (&call.file, &other.file) {
            (Some((a, aw)), Some((b, bw))) => a != b || (!aw && !bw),
            _ => true,
        }
    })
}

/// The report as a table.
pub fn table(r: &BenchReport) -> String {
    let mut t = format!(
        "replayed {} calls from {} ({} surface, concurrency {}, {} round{}) in {:.1} ms: {:.0} calls/s, {} errors\n\n",
        r.calls,
        r.log.display(),
        r.surface,
        r.concurrency,
        r.repeat,
        if r.repeat == 1 { "" } else { "s" },
        r.wall_ms,
        r.calls_per_s,
        r.errors
    );
    t.push_str("| tool | calls | errors | p50 ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|\n");
    for (tool, s) in &r.tools {
        t.push_str(&format!(
            "| {tool} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            s.calls, s.errors, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms
        ));
    }
    for f in &r.failures {
        t.push_str(&format!("\nseq {} {}: {}", f.seq, f.tool, f.error));
    }
    t
}

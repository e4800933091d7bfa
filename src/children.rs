//! gm as an MCP client: the child servers its config names, started with gm, and their tools
//! as `gm.<server>_<tool>(args)` inside run_code.
//!
//! Each server has an McpClient actor (crate gm-actors) that starts, restarts and stops it.
//! This module keeps what the rest of gm asks of them: the tools they offer under their gm
//! names and the servers still starting (run_code's description names both; nothing waits
//! for every server to start), a version that moves when those change (each session then
//! tells its host `notifications/tools/list_changed`), and a call, which goes straight to the
//! server's connection. A call to a server that is starting, or that failed to start and may
//! be tried again, waits for that start, and stops waiting when the call is cancelled.
//!
//! A server the workspace's `.gm/mcp.json` names starts only once the user approved that exact
//! entry (`crate::trust`). Until then it waits, unstarted and unexpanded: an `mcp-server` event
//! `untrusted` shows what it would run, a body's call to it fails `untrusted`, and it starts at
//! the first call after `gm trust` approved it, or when [`Children::approve`] is called.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use futures::future::join_all;
use gm_actors::cancel::CancelToken;
use gm_actors::log_writer::{Event, LogWriter};
use gm_actors::mcp_client::{
    ClientEvent, ConnError, Connect, Launch, McpClient, ServerSpec, Session, StartFailure, Stop,
};
use gm_actors::sandbox::Confinement;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::gitignore;
use crate::mcp_config::{self, Config, Named, NotStarted, Resolved};
use crate::trust::{self, Pending, TrustError, TrustStore};
use crate::verbs::error::VerbError;

/// A tool of a child server, under the name a body calls it by.
#[derive(Debug, Clone)]
pub struct ChildTool {
    /// `<server>_<tool>`, with characters a JavaScript name cannot hold replaced by `_`.
    pub name: String,
    pub server: String,
    pub tool: String,
    pub description: String,
    pub input_schema: Value,
}

struct Server {
    spec: Resolved,
    client: Addr<McpClient>,
    /// The running session, for calls to use without asking the actor.
    session: Option<Arc<Session>>,
    failure: Option<StartFailure>,
    settled: bool,
    /// Being started (at first or again), without tools to offer yet.
    starting: bool,
    /// Whether its .gitignore lines were seen to (once, at its first start).
    ignored: bool,
}

/// A workspace server that waits for the user's approval: not started, nothing expanded.
struct Waiting {
    named: Named,
    pending: Pending,
}

/// How a server approved at run time is started: on gm's main arbiter, reporting to the hub.
struct Launcher {
    arbiter: ArbiterHandle,
    events: Recipient<ClientEvent>,
    depth: u32,
}

/// Whether a name is taken by one of gm's own verbs: a child tool of that name is skipped.
/// Given by the worker, so that child servers need not know the verbs.
pub type NativeNames = fn(&str) -> bool;

pub struct Children {
    workspace: PathBuf,
    native: NativeNames,
    log: Option<Addr<LogWriter>>,
    servers: Mutex<HashMap<String, Server>>,
    /// Moves whenever what run_code's description says of the servers changes (tools came,
    /// changed or went; a server failed).
    offered: watch::Sender<u64>,
    /// Tools last reported as skipped, so each skip is logged once.
    skipped: Mutex<Vec<String>>,
    /// Workspace servers not approved yet, by name.
    waiting: Mutex<HashMap<String, Waiting>>,
    /// Where approvals are kept; why not, when there is no home.
    store: Result<TrustStore, String>,
    launcher: Option<Launcher>,
    /// The entries of the config last applied, by name: what [`Children::reconfigure`]
    /// compares a config read again with.
    applied: Mutex<HashMap<String, Named>>,
    /// The box of `--sandbox`: every workspace server runs in it, a server of the user's own
    /// layers when its entry says `"sandbox": true`.
    sandbox: Option<Arc<Confinement>>,
}

/// Why [`Children::approve`] did not start a server.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("{0} is not a workspace server waiting for approval")]
    NotWaiting(String),
    #[error("the approval could not be recorded: {0}")]
    Trust(#[from] TrustError),
    #[error("{0}")]
    NoStore(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Children {
    /// No child servers (the one-shot CLI).
    pub fn none() -> Arc<Self> {
        Arc::new(Self {
            workspace: PathBuf::new(),
            native: |_| false,
            log: None,
            servers: Mutex::default(),
            offered: watch::Sender::new(0),
            skipped: Mutex::default(),
            waiting: Mutex::default(),
            store: Err("the one-shot CLI starts no child servers".into()),
            launcher: None,
            applied: Mutex::default(),
            sandbox: None,
        })
    }

    /// Starts every server the config names, in parallel, without waiting for any; logs why
    /// each one that is not started is not. A workspace server that is not approved waits.
    /// Call inside the actix system (on gm's main arbiter).
    pub fn start(
        config: &Config,
        workspace: &Path,
        log: Addr<LogWriter>,
        depth: u32,
        native: NativeNames,
        sandbox: Option<Arc<Confinement>>,
    ) -> Arc<Self> {
        let store = TrustStore::from_home().map_err(|e| e.to_string());
        Self::start_with(config, workspace, log, depth, native, store, sandbox)
    }

    /// [`Children::start`] with approvals kept in `store`.
    pub fn start_with(
        config: &Config,
        workspace: &Path,
        log: Addr<LogWriter>,
        depth: u32,
        native: NativeNames,
        store: Result<TrustStore, String>,
        sandbox: Option<Arc<Confinement>>,
    ) -> Arc<Self> {
        for p in &config.problems {
            log.do_send(Event::new("mcp-config", json!({ "file": p.file, "problem": p.why })));
        }
        let at_depth_limit = depth >= mcp_config::MAX_DEPTH;
        let children = Arc::new_cyclic(|me| Self {
            workspace: workspace.to_owned(),
            native,
            log: Some(log.clone()),
            servers: Mutex::default(),
            offered: watch::Sender::new(0),
            skipped: Mutex::default(),
            waiting: Mutex::default(),
            store,
            launcher: (!at_depth_limit).then(|| Launcher {
                arbiter: Arbiter::current(),
                events: ChildEvents { children: me.clone() }.start().recipient(),
                depth,
            }),
            applied: Mutex::new(config.servers.iter().map(|n| (n.name.clone(), n.clone())).collect()),
            sandbox,
        });
        if at_depth_limit {
            if config.servers.iter().any(|s| !s.entry.disabled) {
                log.do_send(Event::new(
                    "mcp-config",
                    json!({ "problem": format!("this gm is at depth {depth} ({}): it starts no child servers", mcp_config::DEPTH_VAR) }),
                ));
            }
            return children;
        }
        for named in &config.servers {
            children.admit(named);
        }
        children
    }

    /// Starts a server the config names, or, for a workspace server the user has not
    /// approved in this exact form, puts it with the waiting ones.
    fn admit(self: &Arc<Self>, named: &Named) {
        if trust::needs_consent(named) {
            let pending = trust::Pending::of(named, &self.workspace);
            match self.is_approved(&pending) {
                Ok(true) => {}
                not => {
                    self.log_untrusted(&pending, not.err());
                    lock(&self.waiting).insert(named.name.clone(), Waiting { named: named.clone(), pending });
                    return;
                }
            }
        }
        self.launch(named);
    }

    /// Applies a config read again while the worker runs (a layer was edited): a server whose
    /// entry went is stopped; one whose entry changed is stopped and admitted again (a
    /// workspace entry waits for approval of its new form); a new one is admitted. Each change
    /// is an `mcp-server` event, and the sessions hear that the tools changed.
    pub fn reconfigure(self: &Arc<Self>, config: &Config) {
        if self.launcher.is_none() {
            return;
        }
        // A shipped defaults file that is not found is said at start and stands in built in;
        // any other problem is a file that did not read.
        let unread: Vec<_> = config.problems.iter().filter(|p| !p.why.starts_with("not found")).collect();
        if !unread.is_empty() {
            // A file caught half-edited (or with a typo) must not stop the servers it named:
            // the last good config stays in force until the file reads again.
            for p in unread {
                self.log(
                    "mcp-config",
                    json!({ "file": p.file, "problem": p.why, "kept": "the last config that read" }),
                );
            }
            return;
        }
        let wanted: HashMap<String, Named> = config.servers.iter().map(|n| (n.name.clone(), n.clone())).collect();
        let before = std::mem::replace(&mut *lock(&self.applied), wanted.clone());
        let mut changed = false;
        for (name, old) in &before {
            let state = match wanted.get(name) {
                None => "removed",
                Some(new) if new.entry != old.entry || new.layer != old.layer => "changed",
                Some(_) => continue,
            };
            let stopped = lock(&self.servers).remove(name);
            let was_waiting = lock(&self.waiting).remove(name).is_some();
            if let Some(server) = &stopped {
                server.client.do_send(Stop);
            }
            self.log("mcp-server", json!({ "name": name, "state": state, "from": old.from, "stopped": stopped.is_some(), "wasWaiting": was_waiting }));
            changed = true;
        }
        let mut names: Vec<&String> = wanted.keys().collect();
        names.sort();
        for name in names {
            let new = &wanted[name];
            if before.get(name).is_some_and(|old| old.entry == new.entry && old.layer == new.layer) {
                continue;
            }
            self.admit(new);
            changed = true;
        }
        if changed {
            self.offered_changed();
        }
    }

    /// The approvals file, when there is a home to keep it in.
    pub fn approvals_file(&self) -> Option<PathBuf> {
        self.store.as_ref().ok().map(TrustStore::path)
    }

    /// Starts the waiting servers the user has approved since (with `gm trust`, in another
    /// terminal): called when the approvals file changes.
    pub fn recheck_approvals(self: &Arc<Self>) {
        let approved: Vec<String> = lock(&self.waiting)
            .values()
            .filter(|w| self.is_approved(&w.pending) == Ok(true))
            .map(|w| w.named.name.clone())
            .collect();
        for name in &approved {
            self.start_approved(name, "gm-trust");
        }
        if !approved.is_empty() {
            self.offered_changed();
        }
    }

    /// Whether the user approved this exact entry (read from the store each time: `gm trust`
    /// may have approved it since).
    fn is_approved(&self, pending: &Pending) -> Result<bool, String> {
        let store = self.store.as_ref().map_err(Clone::clone)?;
        store.approved(&self.workspace, &pending.name, &pending.sha256).map_err(|e| e.to_string())
    }

    fn log_untrusted(&self, p: &Pending, problem: Option<String>) {
        let mut fields = json!({
            "name": p.name, "state": "untrusted", "from": p.from,
            "commandLine": p.command_line, "command": p.command, "args": p.args, "cwd": p.cwd, "envNames": p.env_names,
            "why": "a server of the workspace's .gm/mcp.json starts only once you approved this exact entry",
            "approve": trust::how_to_approve(&self.workspace),
        });
        if let (Some(problem), Some(f)) = (problem, fields.as_object_mut()) {
            f.insert("trustProblem".into(), json!(problem));
        }
        self.log("mcp-server", fields);
    }

    /// Resolves an entry (its `${NAME}`s from gm's environment) and starts its server, or logs
    /// why it is not started.
    fn launch(self: &Arc<Self>, named: &Named) {
        let Some(launcher) = &self.launcher else { return };
        let env = |name: &str| std::env::var(name).ok();
        let spec = match mcp_config::resolve(named, &self.workspace, &env, launcher.depth) {
            Ok(spec) => spec,
            Err(why) => {
                let state = match why {
                    NotStarted::Disabled => "disabled",
                    NotStarted::Remote(_) => "refused",
                    _ => "failed",
                };
                self.log(
                    "mcp-server",
                    json!({ "name": named.name, "state": state, "why": why.to_string(), "from": named.from }),
                );
                return;
            }
        };
        // The stranger's code is confined whatever its entry says; the user's own servers
        // when they asked.
        let confined = match named.layer {
            mcp_config::Layer::Workspace => true,
            _ => named.entry.sandbox == Some(true),
        };
        let launch = Launch {
            command: spec.command.clone(),
            args: spec.args.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
            confine: self.sandbox.clone().filter(|_| confined),
        };
        let server_spec = ServerSpec { name: spec.name.clone(), launch, startup_timeout: spec.startup_timeout };
        let events = launcher.events.clone();
        let client = McpClient::start_in_arbiter(&launcher.arbiter, move |_| McpClient::new(server_spec, events));
        lock(&self.servers).insert(
            spec.name.clone(),
            Server {
                spec,
                client: client.clone(),
                session: None,
                failure: None,
                settled: false,
                starting: true,
                ignored: false,
            },
        );
        // Start it now: nothing waits for it but the calls to its tools.
        client.do_send(Connect);
    }

    /// The workspace servers waiting for the user's approval, with what each would run.
    pub fn pending(&self) -> Vec<Pending> {
        let mut all: Vec<Pending> = lock(&self.waiting).values().map(|w| w.pending.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The waiting server a body's `gm.<name>` would reach, if any.
    pub fn waiting_for(&self, name: &str) -> Option<Pending> {
        let waiting = lock(&self.waiting);
        waiting.values().find(|w| name.starts_with(&format!("{}_", js_name(&w.named.name)))).map(|w| w.pending.clone())
    }

    /// Approves a waiting server (recorded in `~/.gmnew/trust.json`, as `gm trust` does) and
    /// starts it; a call to it waits for the start ([`Self::find_or_start`]). For the server,
    /// once the user said yes through the host (elicitation). Call from any thread.
    pub fn approve(self: &Arc<Self>, server: &str) -> Result<(), ApproveError> {
        let pending = lock(&self.waiting)
            .get(server)
            .map(|w| w.pending.clone())
            .ok_or_else(|| ApproveError::NotWaiting(server.to_owned()))?;
        let store = self.store.as_ref().map_err(|e| ApproveError::NoStore(e.clone()))?;
        store.approve(&self.workspace, &pending)?;
        self.start_approved(server, "approved");
        Ok(())
    }

    /// The tool a body calls as `gm.<name>`: a started server's; or, when the server it
    /// belongs to is starting, failed a while ago, or waits for an approval the user gave
    /// since (with `gm trust`), that server's once it has started. `Ok(None)`: no started
    /// server offers it (see [`Self::why_missing`]). Waiting stops when `cancel` is tripped.
    pub async fn find_or_start(
        self: &Arc<Self>,
        name: &str,
        cancel: &CancelToken,
    ) -> Result<Option<ChildTool>, VerbError> {
        if let Some(tool) = self.find(name) {
            return Ok(Some(tool));
        }
        if let Some(pending) = self.waiting_for(name) {
            if self.is_approved(&pending) != Ok(true) {
                return Ok(None);
            }
            self.start_approved(&pending.name, "approved with gm trust");
        }
        let Some(server) = self.server_of(name) else { return Ok(None) };
        self.connect(&server, cancel).await?;
        Ok(self.find(name))
    }

    /// The started server whose tools `gm.<name>` would be one of.
    fn server_of(&self, name: &str) -> Option<String> {
        let servers = lock(&self.servers);
        servers.keys().find(|server| name.starts_with(&format!("{}_", js_name(server)))).cloned()
    }

    /// The server's live session, starting it first when it is not running (and may be
    /// started: see the McpClient's backoff). Stops waiting when `cancel` is tripped.
    async fn connect(&self, server: &str, cancel: &CancelToken) -> Result<Arc<Session>, VerbError> {
        let (cached, client) = {
            let servers = lock(&self.servers);
            let s = servers.get(server).ok_or_else(|| VerbError::UnknownVerb(server.to_owned()))?;
            (s.session.clone(), s.client.clone())
        };
        if let Some(session) = cached.filter(|s| s.conn.is_open()) {
            return Ok(session);
        }
        let connected = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(VerbError::Cancelled),
            connected = client.send(Connect) => connected,
        };
        let connected = connected.map_err(|e| VerbError::Internal(format!("the client of {server} is gone: {e}")))?;
        match connected {
            Ok(session) => {
                // The Ready event says so too, but maybe after this call looks for the tool.
                if let Some(s) = lock(&self.servers).get_mut(server) {
                    if s.session.as_ref().is_none_or(|old| old.generation <= session.generation) {
                        s.session = Some(session.clone());
                        s.failure = None;
                    }
                }
                Ok(session)
            }
            Err(failure) => Err(VerbError::Unavailable(failure_message(&failure))),
        }
    }

    /// Moves a waiting server to the started ones.
    fn start_approved(self: &Arc<Self>, server: &str, how: &str) {
        // Another call may have started it meanwhile.
        let Some(waiting) = lock(&self.waiting).remove(server) else { return };
        self.log(
            "mcp-server",
            json!({ "name": server, "state": "approved", "how": how, "sha256": waiting.pending.sha256 }),
        );
        self.launch(&waiting.named);
    }

    /// A receiver whose value moves when the child tools or the servers still starting change
    /// (what run_code's description says of them).
    pub fn offered_changes(&self) -> watch::Receiver<u64> {
        self.offered.subscribe()
    }

    fn offered_changed(&self) {
        self.offered.send_modify(|n| *n += 1);
    }

    fn log(&self, kind: &str, fields: Value) {
        if let Some(log) = &self.log {
            log.do_send(Event::new(kind, fields));
        }
    }

    /// What run_code's description says of the child servers: their tools, and the servers
    /// still starting (whose tools a call waits for).
    pub fn offered(&self) -> Offered {
        let tools = self.tools();
        let servers = lock(&self.servers);
        let mut starting: Vec<String> =
            servers.iter().filter(|(_, s)| s.starting && s.session.is_none()).map(|(n, _)| n.clone()).collect();
        starting.sort();
        Offered { tools, starting }
    }

    /// The child tools a body can call, under their gm names. A denied tool is left out; one
    /// whose gm name is a native verb's (or another child tool's) is left out and logged once.
    pub fn tools(&self) -> Vec<ChildTool> {
        let servers = lock(&self.servers);
        let mut names: Vec<&String> = servers.keys().collect();
        names.sort();
        let mut out: Vec<ChildTool> = Vec::new();
        let mut skipped = Vec::new();
        for name in names {
            let server = &servers[name];
            let Some(session) = &server.session else { continue };
            for t in &session.tools {
                let Some(tool) = t.get("name").and_then(Value::as_str) else { continue };
                if server.spec.deny.iter().any(|d| d == tool) {
                    continue;
                }
                let gm_name = js_name(&format!("{name}_{tool}"));
                let clash = if (self.native)(&gm_name) || RESERVED.contains(&gm_name.as_str()) {
                    Some("a native verb has that name")
                } else if out.iter().any(|o| o.name == gm_name) {
                    Some("another child tool has that name")
                } else {
                    None
                };
                if let Some(why) = clash {
                    skipped.push((gm_name, name.clone(), tool.to_owned(), why));
                    continue;
                }
                out.push(ChildTool {
                    name: gm_name,
                    server: name.clone(),
                    tool: tool.to_owned(),
                    description: t.get("description").and_then(Value::as_str).unwrap_or("").to_owned(),
                    input_schema: t.get("inputSchema").cloned().unwrap_or_else(|| json!({ "type": "object" })),
                });
            }
        }
        drop(servers);
        let mut logged = lock(&self.skipped);
        for (gm_name, server, tool, why) in skipped {
            if !logged.contains(&gm_name) {
                logged.push(gm_name.clone());
                self.log("mcp-tool-skipped", json!({ "name": gm_name, "server": server, "tool": tool, "why": why }));
            }
        }
        out
    }

    /// The tool a body calls as `gm.<name>`, if a child server offers it.
    pub fn find(&self, name: &str) -> Option<ChildTool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    /// Calls a child tool. The child's result comes back as it sent it; a result with
    /// `isError: true` is a failed call. Past the server's `timeoutMs`, or on `cancel`, the call
    /// is withdrawn and the child is sent `notifications/cancelled`. A server that is not
    /// running is started first (waiting for it stops on `cancel` too).
    ///
    /// `parent`: the span the call is made under, while export is on; the call's CLIENT span
    /// goes under it, and its traceparent to the child in `params._meta`.
    pub async fn call(
        &self,
        tool: &ChildTool,
        args: Value,
        cancel: &CancelToken,
        parent: Option<&opentelemetry::Context>,
    ) -> Result<Value, VerbError> {
        let span = parent.zip(crate::telemetry::get()).map(|(p, t)| t.child_call(p, &tool.server, &tool.tool));
        let result = self.call_traced(tool, args, cancel, span.as_ref()).await;
        if let Some(span) = span {
            span.end(result.as_ref().err().map(VerbError::code));
        }
        result
    }

    async fn call_traced(
        &self,
        tool: &ChildTool,
        args: Value,
        cancel: &CancelToken,
        span: Option<&crate::telemetry::ToolSpan>,
    ) -> Result<Value, VerbError> {
        let timeout = {
            let servers = lock(&self.servers);
            let server = servers.get(&tool.server).ok_or_else(|| VerbError::UnknownVerb(tool.name.clone()))?;
            server.spec.call_timeout
        };
        let session = self.connect(&tool.server, cancel).await?;
        let mut params = json!({ "name": tool.tool, "arguments": args });
        if let Some(traceparent) = span.and_then(|s| crate::telemetry::traceparent(s.context())) {
            params["_meta"] = json!({ "traceparent": traceparent });
        }
        let result = session.conn.request("tools/call", params, timeout, cancel).await.map_err(|e| match e {
            ConnError::Cancelled => VerbError::Cancelled,
            ConnError::Timeout { .. } => VerbError::Timeout(format!("{}: {e}", tool.name)),
            ConnError::Rpc { .. } => VerbError::InvalidArgs(e.to_string()),
            ConnError::Gone { .. } | ConnError::Spawn { .. } => VerbError::Unavailable(e.to_string()),
        })?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(VerbError::ToolError { tool: tool.name.clone(), result });
        }
        Ok(result)
    }

    /// Stops every server, in parallel, within about half a second.
    pub async fn stop(&self) {
        let clients: Vec<Addr<McpClient>> = lock(&self.servers).values().map(|s| s.client.clone()).collect();
        let stops = join_all(clients.iter().map(|c| c.send(Stop)));
        let _ = tokio::time::timeout(Duration::from_millis(900), stops).await;
    }

    fn on_event(&self, event: ClientEvent) {
        match event {
            ClientEvent::Starting { server, attempt } => {
                let newly = lock(&self.servers)
                    .get_mut(&server)
                    .is_some_and(|s| !std::mem::replace(&mut s.starting, true) && s.session.is_none());
                if newly {
                    self.offered_changed();
                }
                self.log("mcp-server", json!({ "name": server, "state": "starting", "attempt": attempt }));
            }
            ClientEvent::Ready { server, session } => {
                if !self.workspace.as_os_str().is_empty() {
                    crate::child_groups::ChildGroups::of(&self.workspace.join(".gm")).record(session.conn.pgid());
                }
                let ignore = {
                    let mut servers = lock(&self.servers);
                    let Some(s) = servers.get_mut(&server) else { return };
                    s.session = Some(session.clone());
                    s.failure = None;
                    s.starting = false;
                    let first = !std::mem::replace(&mut s.ignored, true);
                    first.then(|| s.spec.ignore.clone())
                };
                self.settle(&server);
                self.offered_changed();
                if let Some(t) = crate::telemetry::get() {
                    t.child_start(&server, true);
                }
                self.log(
                    "mcp-server",
                    json!({
                        "name": server, "state": "ready", "tools": session.tools.len(),
                        "protocolVersion": session.protocol, "serverInfo": session.server_info, "start": session.generation,
                    }),
                );
                if let Some(lines) = ignore.filter(|l| !l.is_empty()) {
                    self.ensure_ignored(&server, &lines);
                }
            }
            ClientEvent::Failed { failure } => {
                let server = failure.server.clone();
                if let Some(s) = lock(&self.servers).get_mut(&server) {
                    s.failure = Some(failure.clone());
                    s.session = None;
                    s.starting = false;
                }
                self.settle(&server);
                self.offered_changed();
                if let Some(t) = crate::telemetry::get() {
                    t.child_start(&server, false);
                }
                self.log(
                    "mcp-server",
                    json!({
                        "name": server, "state": "failed", "causes": failure.causes, "startupBudgetMs": failure.budget_ms,
                        "stderr": failure.stderr, "retryInMs": failure.retry_in_ms,
                    }),
                );
            }
            ClientEvent::Exited { server, why } => {
                self.log(
                    "mcp-server",
                    json!({ "name": server, "state": "exited", "why": why, "then": "its next call starts it again" }),
                );
            }
            ClientEvent::ToolsChanged { server, session } => {
                let n = session.tools.len();
                if let Some(s) = lock(&self.servers).get_mut(&server) {
                    s.session = Some(session);
                }
                self.offered_changed();
                self.log("mcp-server", json!({ "name": server, "state": "tools-changed", "tools": n }));
            }
        }
    }

    /// Marks a server settled: it started or failed once.
    fn settle(&self, server: &str) {
        if let Some(s) = lock(&self.servers).get_mut(server) {
            s.settled = true;
        }
    }

    /// Adds a server's wanted lines to the workspace's .gitignore.
    fn ensure_ignored(&self, server: &str, lines: &[String]) {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        match gitignore::ensure(&self.workspace, &lines) {
            Ok(gitignore::Outcome::Added(added)) if !added.is_empty() => {
                self.log("gitignore", json!({ "added": added, "for": server }));
            }
            Ok(gitignore::Outcome::Added(_)) => {}
            Ok(gitignore::Outcome::NotARepository) => {
                self.log("gitignore", json!({ "state": "skipped", "why": "not a git repository", "for": server }));
            }
            Err(e) => self.log("gitignore", json!({ "state": "failed", "error": e.to_string(), "for": server })),
        }
    }

    /// Why `gm.<name>` is not a tool of a child: the server it would belong to waits for
    /// approval (`untrusted`), or did not start (`unavailable`, with every attempt's cause), or
    /// `None` when no server's name prefixes it.
    pub fn why_missing(&self, name: &str) -> Option<VerbError> {
        if let Some(p) = self.waiting_for(name) {
            let message = format!(
                "{} is a server of this workspace's .gm/mcp.json that the user has not approved, so gm has not started it \
                 (it would run: {} in {}). Only the user can approve it: ask them to run `{}` in a terminal, which shows \
                 the whole entry and asks; then call again.",
                p.name,
                p.command_line,
                p.cwd,
                trust::how_to_approve(&self.workspace)
            );
            let server = json!({
                "name": p.name, "commandLine": p.command_line, "command": p.command, "args": p.args, "cwd": p.cwd,
                "envNames": p.env_names, "approve": trust::how_to_approve(&self.workspace),
            });
            return Some(VerbError::Untrusted { message, server });
        }
        let servers = lock(&self.servers);
        let (server, s) = servers.iter().find(|(server, _)| name.starts_with(&format!("{}_", js_name(server))))?;
        Some(VerbError::Unavailable(match &s.failure {
            Some(f) => failure_message(f),
            None => format!("{server} has no tool for gm.{name}; gm.verbs() lists its tools"),
        }))
    }
}

impl Children {
    /// Each server and its state, for `gm status`.
    pub fn describe(&self) -> Vec<Value> {
        let servers = lock(&self.servers);
        let mut names: Vec<&String> = servers.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let s = &servers[name];
                let state = match (&s.session, &s.failure, s.settled) {
                    (Some(session), _, _) if session.conn.is_open() => "ready",
                    (Some(_), _, _) => "exited",
                    (None, Some(_), _) => "failed",
                    (None, None, false) => "starting",
                    (None, None, true) => "stopped",
                };
                json!({
                    "name": name,
                    "state": state,
                    "command": s.spec.command,
                    "tools": s.session.as_ref().map(|x| x.tools.len()),
                    "why": s.failure.as_ref().map(failure_message),
                })
            })
            .collect()
    }
}

/// What run_code's description says of the child servers.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// The tools of the servers that started.
    pub tools: Vec<ChildTool>,
    /// Servers still starting: a call to one of their tools waits for them.
    pub starting: Vec<String>,
}

/// Names the `gm` object has of its own.
const RESERVED: &[&str] = &["verbs", "try"];

/// A name a body can write as `gm.<name>`: characters a JavaScript name cannot hold become `_`.
fn js_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '$' { c } else { '_' }).collect()
}

fn failure_message(f: &StartFailure) -> String {
    let mut m = f.to_string();
    if !f.stderr.trim().is_empty() {
        m.push_str(&format!("; the end of its stderr:\n{}", f.stderr.trim_end()));
    }
    m
}

/// Hands the McpClients' events to the hub (a small actor, so clients need no handle on it).
struct ChildEvents {
    children: std::sync::Weak<Children>,
}

impl Actor for ChildEvents {
    type Context = Context<Self>;
}

impl Handler<ClientEvent> for ChildEvents {
    type Result = ();
    fn handle(&mut self, event: ClientEvent, _: &mut Context<Self>) {
        if let Some(children) = self.children.upgrade() {
            children.on_event(event);
        }
    }
}

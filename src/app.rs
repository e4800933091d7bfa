//! What every call can use: the worker's [`App`], fixed for the worker's life and shared by
//! every session, and each connection's [`Conn`], fixed for that connection's life.

use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;
use gm_actors::js_engine::JsEngines;
use gm_actors::transport::Send as SendLine;

use crate::run_state::RunStore;
use crate::verbs::Ctx;

/// The worker's shared state: one of each for the workspace, whatever number of sessions.
pub struct App {
    pub ctx: Ctx,
    /// Where each session's run is kept between workers.
    pub runs: RunStore,
    pub js: JsEngines,
    /// How often a long call with a progressToken reports progress.
    pub progress_every: Duration,
    /// The reply budget (`--max-result-bytes`) and how far a run_code call may raise it.
    /// Worker-wide, like `--max-inflight`: a relay that joins a running worker gets its own.
    pub budget: crate::budget::Limits,
}

/// One host connection (a session): where its replies go and the settings its relay asked for.
pub struct Conn {
    /// The session's id: the relay's (kept across worker restarts), or one made for stdio.
    pub session: Arc<str>,
    pub surface: Surface,
    pub out: Recipient<SendLine>,
    pub max_line_bytes: usize,
    pub page_size: usize,
    /// The step budget of a new run, unless its first step sets one.
    pub step_budget: u64,
    /// The relay's process and build as it said them (`None` for stdio), for `gm status`.
    pub relay: Option<serde_json::Value>,
    /// The HTTP listener's connection for stateless (2026-07-28) requests of any client.
    pub stateless: bool,
    /// The worker reads and writes the host's own stdin and stdout (`crate::worker::direct`).
    pub direct: bool,
    /// The host speaks HTTP to the HTTP listener.
    pub http: bool,
}

/// Which tools a session is served: `code` (default) — `next_context`, `run_code`, `finish`,
/// every verb inside run_code — or `tools`, every verb as its own tool (`crate::server::surface`
/// derives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Surface {
    Code,
    Tools,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Code => "code",
            Surface::Tools => "tools",
        }
    }
}

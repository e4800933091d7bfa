//! The first line on a worker's socket, before any MCP message: a relay's hello (who it is,
//! its session, the settings its host asked for) answered by the worker's welcome, or a
//! status request answered by the worker's status. The relay writes these lines itself; a
//! host's lines are never read as one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Raised when the lines change in a way an older relay or worker would misread.
pub const PROTOCOL: u32 = 1;

/// What a connection says first. One is read per connection and moved on at once: its size
/// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "gm", rename_all = "lowercase")]
pub enum First {
    Hello(Hello),
    /// `gm status`: the worker answers with one line and closes.
    Status,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub protocol: u32,
    /// Made by the relay at its start and kept across worker restarts.
    pub session: String,
    pub relay: Build,
    /// `code` or `tools`.
    pub surface: String,
    pub page_size: usize,
    pub step_budget: u64,
    pub max_line_bytes: usize,
    /// What the relay's command line asked of the worker itself; a worker that is already
    /// running keeps its own and says where they differ.
    pub worker: WorkerSettings,
    /// Events the relay has to report and cannot log itself (the log has one writer): each
    /// `{ "kind": ..., fields... }`, logged by the worker as the session's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<serde_json::Value>,
    /// The connection carries stateless (2026-07-28) requests of any number of clients (the
    /// HTTP listener's): it serves that revision only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stateless: bool,
    /// The hello came with two pipes (SCM_RIGHTS): the session's lines to the worker, then
    /// its answers back. A pipe each way spares every message the socket's costs: a buffer
    /// allocated and charged per write, and a wake-up of the relay's reading thread each time
    /// the worker reads (both directions of a socket share one wait queue). A worker that
    /// does not know of them (an older build) drops them and answers on the socket.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipes: bool,
    /// The hello came with the host's own stdin and stdout and the session's journal
    /// (`crate::relay::journal`): the worker reads and writes the host itself, with no relay
    /// between them (see `crate::worker::direct`). A worker that does not know of it (an older
    /// build) drops them and answers on the socket.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// The session's host speaks Streamable HTTP to the HTTP listener (`network.transport`
    /// `tcp` on its spans); an older build leaves it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http: bool,
}

/// A gm process: its pid, version and binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    pub pid: u32,
    pub version: String,
    pub exe: Option<PathBuf>,
}

impl Build {
    pub fn this_process() -> Self {
        Self {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            exe: std::env::current_exe().ok(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSettings {
    pub max_inflight: usize,
    pub mcp_config: Option<PathBuf>,
    /// The box the relay's flags and the user's config chose (absent from an older relay: off).
    #[serde(default)]
    pub sandbox: crate::sandbox_config::SandboxSettings,
    /// The reply budget the relay was given (absent from an older relay: not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<usize>,
}

/// The worker's answer to a hello.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "gm", rename_all = "lowercase")]
pub enum Answer {
    Welcome(Welcome),
    Refused { why: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Welcome {
    pub protocol: u32,
    pub worker: Build,
    /// What the relay asked of the worker that the running worker does otherwise.
    pub differs: Vec<String>,
    /// The session's lines go over the pipes that came with the hello from now on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipes: bool,
    /// The worker reads and writes the host's stdio that came with the hello from now on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
}

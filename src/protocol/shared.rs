//! What both eras of MCP share: the versions gm speaks (the `initialize` era's and the
//! stateless revision's), who gm says it is, and the `_meta` key that says it. `mcp.rs` (the
//! handshake era and the result shapes) and `modern.rs` (2026-07-28) both build on this and
//! neither on the other.

use serde::Serialize;
use serde_json::Value;

/// Versions gm speaks in the `initialize` era, newest first. `initialize` echoes one of these
/// and answers any other with the first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07"];
pub const LATEST_VERSION: &str = "2025-11-25";

/// The stateless revisions gm serves (the `initialize` era is negotiated by `initialize`).
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
pub const MODERN_VERSION: &str = "2026-07-28";

/// Where a 2026-07-28 result says who answered it.
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// What `server/discover` offers: the stateless revision first, then the `initialize` era's.
pub fn discover_versions() -> Vec<&'static str> {
    MODERN_VERSIONS.iter().chain(PROTOCOL_VERSIONS).copied().collect()
}

#[derive(Debug, Serialize)]
pub struct Implementation {
    pub name: &'static str,
    pub title: &'static str,
    pub version: &'static str,
}

pub fn server_info() -> Implementation {
    Implementation { name: "gm", title: "gm", version: env!("CARGO_PKG_VERSION") }
}

/// A result shape as a JSON value (they always serialize).
pub fn to_value<T: Serialize>(result: &T) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

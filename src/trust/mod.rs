//! Consent for a workspace's servers. A repository can ship `.gm/mcp.json`, and gm starts in
//! every folder a host opens: a server it names runs only once the user approved that exact
//! entry (`entry.rs`: what it runs, and its hash), an approval kept in `~/.gmnew/trust.json`
//! (`store.rs`) per workspace and server. A changed command, argument, cwd or environment
//! value needs approval again. `gm trust` (`cli.rs`) asks on a terminal; the server can ask
//! through its host and approve at run time (`crate::children::Children::approve`).
//!
//! `defaults/mcp.json` (shipped with gm) and the `--mcp-config` file (named by the user) need
//! no approval.

pub mod ask;
pub mod cli;
pub mod entry;
pub mod store;

pub use entry::Pending;
pub use store::{Approval, TrustError, TrustStore};

use crate::mcp_config::{self, Layer, Named};

/// Whether an entry needs the user's approval before it starts: it comes from the workspace and
/// would start (an entry that is disabled or remote runs nothing).
pub fn needs_consent(named: &Named) -> bool {
    named.layer == Layer::Workspace && mcp_config::check_shape(named).is_ok()
}

/// How to approve a workspace's servers from a terminal.
pub fn how_to_approve(workspace: &std::path::Path) -> String {
    format!("gm trust --workspace {}", entry::quote(&workspace.display().to_string()))
}

//! gm: the worker of a single-worker, long-horizon agent loop, served over MCP.
//!
//! A guided tour:
//!
//! - [`protocol`]: the edge. JSON-RPC framing and MCP shapes; no other module sees them.
//! - [`server`]: method dispatch for one stdio connection; tools/call admission and logging.
//! - [`surface`]: the default surface (`next_context`, `run_code`, `finish`) and
//!   `--surface tools`, both derived from the verb registry.
//! - [`run`]: the run loop's tools: a step, a JS body, the end of a run.
//! - [`run_state`]: the run's id, task and step in `.gm/run.json`, so a restart continues it.
//! - [`verbs`]: the registry and the verbs themselves, as plain library code.
//! - [`search`]: tracked files, grep, the BM25 line index and the wiki, as library code.
//! - [`js`]: the bridge from run_code bodies to verbs and child tools (`gm.<verb>(args)`).
//! - [`mcp_config`]: the three layers of child MCP server config, merged and resolved.
//! - [`children`]: the child MCP servers gm starts, and their tools as `gm.<server>_<tool>`.
//! - [`skills`]: the skill files served as resources, SEP-2640 skills and prompts.
//! - [`blobs`]: `.gm/blobs/`, the long strings of logged calls, kept once by their sha256.
//! - [`secrets`]: `.gm/secrets.env`: values given to shells, replaced in everything returned.
//! - [`git`]: the workspace's repository through libgit2, as a small library the verbs share.
//! - [`gitignore`]: adding lines to the workspace's .gitignore without disturbing it.
//! - [`docs`]: reference tables printed from the code (`gm docs`), so the README cannot drift.
//! - [`bench`]: `gm bench`, replaying a recorded log against a fresh server.
//! - [`serve`]: wiring the actors (crate `gm-actors`) together for `gm serve` and the CLI.
//!
//! Invariants: protocol types live only in `protocol` and `server`; verbs never see
//! JSON-RPC; actors never see verbs; the LogWriter actor is the only writer of the run log.

pub mod app;
pub mod bench;
pub mod blobs;
pub mod children;
pub mod docs;
pub mod git;
pub mod gitignore;
pub mod js;
pub mod mcp_config;
pub mod protocol;
pub mod run;
pub mod run_state;
pub mod search;
pub mod secrets;
pub mod serve;
pub mod server;
pub mod skills;
pub mod text;
pub mod verbs;
pub mod walk;

//! gm: the worker of a single-worker, long-horizon agent loop, served over MCP on stdio.
//!
//! `ARCHITECTURE.md` at the repository's root is the map: what each module owns, the
//! invariants, the threads, and a call walked from the stdin line to the reply. In short:
//! [`protocol`] and [`server`] are the MCP edge, [`run`] is the loop's own tools, [`verbs`] is
//! the one registry every surface comes from, [`js`] and [`children`] are what a body's
//! `gm.<name>()` reaches, and [`serve`] wires the actors of crate `gm-actors` together.

pub mod app;
pub mod bench;
pub mod blobs;
pub mod budget;
pub mod child_groups;
pub mod children;
pub mod config_watch;
pub mod dist;
pub mod docs;
pub mod dts;
pub mod git;
pub mod gitignore;
pub mod http;
pub mod install;
pub mod js;
pub mod mcp_config;
pub mod protocol;
pub mod relay;
pub mod run;
pub mod run_state;
pub mod sandbox_config;
pub mod search;
pub mod secrets;
pub mod serve;
pub mod server;
pub mod skills;
pub mod telemetry;
pub mod text;
pub mod trust;
pub mod update;
pub mod verbs;
pub mod walk;
pub mod watch;
pub mod worker;

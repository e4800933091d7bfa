//! gm's actors and OS-facing pieces: each concern that owns state is an actor reached by
//! typed messages (the run log, jobs, the JS engines, child MCP servers), beside the scheduler
//! lock, file locks, cancel tokens and [`sys`], the one module of OS calls. Nothing here knows
//! about verbs, MCP shapes or JSON-RPC methods. `ARCHITECTURE.md` says what each module owns.

pub mod builds;
pub mod cancel;
pub mod capture;
pub mod clock;
pub mod file_locks;
pub mod fs;
pub mod jobs;
pub mod js_engine;
pub mod log_reader;
pub mod log_writer;
pub mod mcp_client;
pub mod sandbox;
pub mod scheduler;
pub mod state_file;
pub mod sys;
pub mod transport;
pub mod updater;

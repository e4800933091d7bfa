//! gm's actors and OS-facing pieces: each concern that owns state is an actor reached by
//! typed messages (the run log, jobs, the JS engines, child MCP servers), beside the scheduler
//! lock, file locks, cancel tokens and [`sys`], the one module of OS calls. Nothing here knows
//! about verbs, MCP shapes or JSON-RPC methods. `ARCHITECTURE.md` says what each module owns.

/// `eprintln!` that never panics. gm's stderr is often a file (the worker's `.gm/worker.log`)
/// that a full disk or a file size limit refuses, or a pipe its host has closed; `eprintln!`
/// panics when the write fails, and a message lost there must not take down the thread (the
/// log's writer, an arbiter) that was reporting a problem.
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

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

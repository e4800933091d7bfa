//! gm's actors. Each concern is an actor that owns its state and is reached only by typed
//! messages; nothing here knows about verbs, MCP or JSON-RPC.
//!
//! - [`transport`]: the stdin reader thread and the stdout writer (protocol lines only).
//! - [`scheduler`]: the `--max-inflight` slots and the rule that a shell runs alone (a lock
//!   shared by handles, not an actor: verbs are admitted from several threads, see its docs).
//! - [`clock`]: the time in milliseconds and as RFC 3339 text.
//! - [`fs`]: replacing a file whole (temporary file and rename), for every state file gm keeps.
//! - [`file_locks`]: reader/writer locks keyed by file identity (device + inode), so a symlink
//!   or a hard link to a file shares that file's lock.
//! - [`log_writer`]: the run log's only writer; assigns `seq`, group-commits, answers queries.
//! - [`log_reader`]: reading the log back from a seq or from its end, without reading it whole.
//! - [`js_engine`]: QuickJS runtimes for run_code bodies, on a thread of their own.
//! - [`cancel`]: the cancel token shared by everything that can be stopped mid-way.
//! - [`jobs`]: every process gm starts: foreground shells and background jobs, in process
//!   groups; [`capture`] keeps their output's head and tail and spills the whole.
//!
//! - [`sys`]: every OS call beyond the standard library (stdin flags, process groups,
//!   signals, `/proc`), so a port to another OS changes one module.
//!
//! - [`mcp_client`]: one actor per child MCP server (start, handshake, tools, restart, stop)
//!   over a stdio connection that routes replies by id and fails every waiting call at once
//!   when the child goes.
//!
//! The Updater is a later actor; it follows the same shape.

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
pub mod scheduler;
pub mod sys;
pub mod transport;

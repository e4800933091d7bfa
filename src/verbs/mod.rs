//! The verb registry: every verb declared once — name, description, argument type (whose doc
//! comments become the JSON Schema), and what it touches. Every surface is derived from it:
//! run_code's `gm.<verb>`, `--surface tools`, the CLI, `gm.verbs()`.
//!
//! Verbs never see JSON-RPC or MCP: they take a [`Ctx`] and typed arguments and return a
//! serializable value or a [`VerbError`].

pub mod ci;
mod edit_diff;
pub mod error;
pub mod files;
pub mod git;
pub mod lines;
pub mod log;
pub mod out;
pub mod paths;
pub mod review;
pub mod rows;
pub mod search;
pub mod shell;
pub mod web;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use actix::Addr;
use futures::future::BoxFuture;
use gm_actors::cancel::CancelToken;
use gm_actors::file_locks::FileLocks;
use gm_actors::jobs::Jobs;
use gm_actors::scheduler::{Pool, Scheduler};

use crate::search::calls::CallIndex;
use crate::search::index_actor::SearchIndex;
use gm_actors::log_writer::{Event, LogWriter, Scope};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

pub use error::{VerbError, ERROR_CODES};

use crate::blobs::Blobs;
use crate::children::Children;
use crate::secrets::SecretsFile;
use crate::skills::Skills;

/// What a verb is allowed to touch; the scheduler and the tool annotations use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads files or state only.
    Read,
    /// Writes files, or changes something outside gm (a POST, a push).
    Write,
    /// Runs a shell: runs alone.
    Shell,
}

/// A verb's result as JSON text: verbs serialize their reply structs straight to text, which
/// every surface passes on as it is (no JSON value is built on a call's path).
pub type Json = Box<RawValue>;

pub type VerbFuture = BoxFuture<'static, Result<Json, VerbError>>;

pub struct Verb {
    pub name: &'static str,
    pub family: &'static str,
    pub description: &'static str,
    pub effect: Effect,
    pub traits: Traits,
    pub schema: fn() -> Value,
    pub run: fn(Ctx, &RawValue) -> VerbFuture,
}

/// How a call behaves while it runs, for the server: whether a cancel may end it and whether
/// it reports progress. Declared per verb (and per run-loop tool), never by name in the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traits {
    /// A `notifications/cancelled` (or the end of the body that called it) stops it where it
    /// can stop safely, and its call gets no answer: a shell's process group is killed, a
    /// network transfer is dropped, a wait ends (a git pull that has begun its checkout
    /// finishes it). A cancel of any other call is logged as `cancel-ignored` and it runs on.
    pub cancellable: bool,
    /// With a progressToken in the call's `_meta`, it sends `notifications/progress` while it
    /// runs.
    pub progress: bool,
}

/// A call that answers from local state at once.
pub const QUICK: Traits = Traits { cancellable: false, progress: false };
/// A call that can wait long (a process, the network, a big tree): cancellable, with progress.
pub const LONG: Traits = Traits { cancellable: true, progress: true };

/// What a verb may use: the server's shared handles plus this call's cancel token. Cloned
/// per call, so the handles sit behind one `Arc` (cloning each actor address would allocate).
/// `Send`, so verbs run on any arbiter.
#[derive(Clone)]
pub struct Ctx {
    shared: Arc<Shared>,
    /// Tripped when the call this verb serves is cancelled.
    pub cancel: CancelToken,
    /// The host session (and its run) the call belongs to: its events carry them.
    pub scope: Option<Scope>,
    /// Files outside the workspace this call wrote through a link (a repository's committed
    /// `notes.md -> ~/.bashrc`): named in the reply and in the call's log event.
    wrote_outside: Arc<std::sync::Mutex<Vec<String>>>,
}

/// The handles every call shares; fixed for the life of the server.
pub struct Shared {
    pub workspace: Arc<Path>,
    /// `<workspace>/.gm`: the log, spilled outputs, jobs.
    pub state_dir: Arc<Path>,
    pub locks: Addr<FileLocks>,
    /// The log writer; `None` in the one-shot CLI, which only reads the log.
    pub log: Option<Addr<LogWriter>>,
    pub skills: Arc<Skills>,
    pub jobs: Addr<Jobs>,
    pub search: Addr<SearchIndex>,
    pub calls: Addr<CallIndex>,
    pub secrets: Arc<SecretsFile>,
    /// Admits every verb call, whichever surface it came from.
    pub scheduler: Scheduler,
    /// Where the long strings of logged calls are kept.
    pub blobs: Arc<Blobs>,
    /// The child MCP servers and their tools.
    pub children: Arc<Children>,
    /// The box shells, jobs and the workspace's servers run in; `None`: `--sandbox off`.
    pub sandbox: Option<Arc<gm_actors::sandbox::Confinement>>,
}

impl std::ops::Deref for Ctx {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Ctx {
    pub fn new(shared: Shared) -> Self {
        Self { shared: Arc::new(shared), cancel: CancelToken::default(), scope: None, wrote_outside: Arc::default() }
    }

    /// The same handles for a call of a session, with its own cancel token.
    pub fn for_call(&self, cancel: CancelToken, scope: Option<Scope>) -> Self {
        Self { shared: self.shared.clone(), cancel, scope, wrote_outside: Arc::default() }
    }

    /// The same handles and session with another cancel token.
    pub fn with_cancel(&self, cancel: CancelToken) -> Self {
        Self { shared: self.shared.clone(), cancel, scope: self.scope.clone(), wrote_outside: Arc::default() }
    }

    /// Notes that this call wrote `real`, outside the workspace, where it was asked to write
    /// `asked`, which a link led there; returns what the reply says (`realPath`). `None` when
    /// the write stayed in the workspace or went where it was asked.
    pub fn wrote_through_link(&self, asked: &Path, real: &Path) -> Option<String> {
        if real == asked || real.starts_with(&*self.workspace) {
            return None;
        }
        let real = real.to_string_lossy().into_owned();
        if let Ok(mut wrote) = self.wrote_outside.lock() {
            wrote.push(real.clone());
        }
        Some(real)
    }

    /// Logs an event of this call's session (a no-op without a log: the one-shot CLI).
    pub fn log(&self, event: Event) {
        if let Some(log) = &self.shared.log {
            log.do_send(event.in_scope(self.scope.as_ref()));
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.state_dir.join("log.jsonl")
    }
}

/// Parses a verb's arguments from their JSON text; `null` (no arguments) reads as `{}`.
pub fn parse_args<A: DeserializeOwned>(args: &RawValue) -> Result<A, VerbError> {
    let text = args.get().trim();
    let text = if text == "null" { "{}" } else { text };
    serde_json::from_str(text).map_err(|e| VerbError::InvalidArgs(without_position(e)))
}

/// A parse error's message without serde_json's "at line 1 column 12": arguments are one
/// object, and the message names the field.
fn without_position(e: serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) if e.line() > 0 => message[..at].to_owned(),
        _ => message,
    }
}

/// Serializes a verb's reply (or any value) as JSON text.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Json, VerbError> {
    serde_json::value::to_raw_value(value).map_err(|e| VerbError::Internal(e.to_string()))
}

/// JSON text as a value, for the few places that look inside a result.
pub fn to_value(json: &RawValue) -> Value {
    serde_json::from_str(json.get()).unwrap_or(Value::Null)
}

/// The JSON Schema (2020-12) of an argument type, as an MCP tool input schema, in the plain
/// subset every host reads (see [`plain_schema`]).
pub fn schema_of<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    // No `$ref`s: argument types are small and never recursive.
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<A>();
    let mut v = serde_json::to_value(schema).unwrap_or_default();
    plain_schema(&mut v);
    if let Some(m) = v.as_object_mut() {
        m.entry("type").or_insert_with(|| "object".into());
        m.entry("properties").or_insert_with(|| Value::Object(Default::default()));
    }
    v
}

/// Rewrites a generated schema into the subset hosts read without complaint: an optional field
/// is a plain optional property (absent, not null) instead of a `type` array or an `anyOf` with
/// a null branch — MCP Inspector's strict lint warns on those, and hosts that map schemas onto
/// a single-type dialect (the OpenAPI subset behind Gemini function declarations) reject them;
/// a choice of strings is an `enum`; formats JSON Schema does not define (`uint64`) are dropped.
pub fn plain_schema(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(types)) = m.get("type") {
                let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                let single = if rest.len() == 1 { rest[0].clone() } else { Value::Array(rest) };
                m.insert("type".into(), single);
            }
            if let Some(Value::Array(values)) = m.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            for key in ["anyOf", "oneOf"] {
                let Some(Value::Array(branches)) = m.get(key) else { continue };
                let rest: Vec<Value> =
                    branches.iter().filter(|b| b.get("type") != Some(&"null".into())).cloned().collect();
                m.remove(key);
                match rest.as_slice() {
                    [one] => {
                        // The one real branch takes the branch list's place; the property's
                        // own keys (its description) win.
                        if let Value::Object(branch) = one {
                            for (k, v) in branch {
                                m.entry(k.clone()).or_insert_with(|| v.clone());
                            }
                        }
                    }
                    _ if !rest.is_empty() && rest.iter().all(|b| b.get("const").is_some_and(Value::is_string)) => {
                        m.insert("type".into(), "string".into());
                        m.insert("enum".into(), rest.iter().filter_map(|b| b.get("const").cloned()).collect());
                    }
                    _ => {
                        m.insert(key.into(), Value::Array(rest));
                    }
                }
            }
            if m.get("format").and_then(Value::as_str).is_some_and(|f| !STANDARD_FORMATS.contains(&f)) {
                m.remove("format");
            }
            m.values_mut().for_each(plain_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(plain_schema),
        _ => {}
    }
}

/// The formats JSON Schema 2020-12 defines.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

macro_rules! verb {
    ($name:literal, $family:literal, $effect:expr, $args:ty, $func:path, $desc:literal) => {
        verb!($name, $family, $effect, QUICK, $args, $func, $desc)
    };
    ($name:literal, $family:literal, $effect:expr, $traits:expr, $args:ty, $func:path, $desc:literal) => {
        Verb {
            name: $name,
            family: $family,
            description: $desc,
            effect: $effect,
            traits: $traits,
            schema: || schema_of::<$args>(),
            run: |ctx, args| {
                let parsed: Result<$args, VerbError> = parse_args(args);
                Box::pin(async move {
                    let out = $func(ctx, parsed?).await?;
                    to_json(&out)
                })
            },
        }
    };
}

/// Every verb, in the order surfaces list them.
pub fn registry() -> &'static [Verb] {
    static REGISTRY: OnceLock<Vec<Verb>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        vec![
            verb!("read_file", "files", Effect::Read, files::ReadFileArgs, files::read_file,
                "Read a text file (or a skill:// file), whole or a page of lines; long files come in pages with `next`."),
            verb!("write_file", "files", Effect::Write, files::WriteFileArgs, files::write_file,
                "Write a whole file atomically (temp file + rename), creating parent directories."),
            verb!("edit_file", "files", Effect::Write, files::EditFileArgs, files::edit_file,
                "Replace an exact string in a file (unique match unless all: true); returns a unified diff."),
            verb!("stat_file", "files", Effect::Read, files::StatFileArgs, files::stat_file,
                "Size, type, mode and modification time of a path; exists: false when there is nothing there."),
            verb!("list_dir", "files", Effect::Read, files::ListDirArgs, files::list_dir,
                "List a directory's entries sorted by name, in pages (prefix, offset, limit); replies with total and next."),
            verb!("run_shell", "shell", Effect::Shell, LONG, shell::RunShellArgs, shell::run_shell,
                "Run a shell command (bash -c, stdin closed, own process group, runs alone); exit code, stdout, stderr; long output keeps head and tail and is spilled whole to .gm/out/."),
            verb!("job_start", "jobs", Effect::Write, shell::JobStartArgs, shell::job_start,
                "Start a background job and return at once; its output goes to .gm/jobs/<name>.log and it outlives gm."),
            verb!("job_status", "jobs", Effect::Read, LONG, shell::JobStatusArgs, shell::job_status,
                "A job's state, exit code, duration and output tail; with wait (ms) it first waits for the job to end or print more."),
            verb!("job_stop", "jobs", Effect::Write, shell::JobStopArgs, shell::job_stop,
                "Kill a job's whole process group."),
            verb!("search", "search", Effect::Read, LONG, search::SearchArgs, search::search,
                "BM25 search over the lines of the workspace's git-tracked text files; identifiers and paths match whole and by their parts."),
            verb!("grep", "search", Effect::Read, LONG, search::GrepArgs, search::grep,
                "Find a literal, regex or whole-word pattern in the workspace's git-tracked files; capped, saying how many matches were left out."),
            verb!("callers", "code", Effect::Read, LONG, search::CallersArgs, search::callers,
                "Call sites of a function or method (tree-sitter; JavaScript, TypeScript, Python, Rust, Go, Java, C, C++, C#, Ruby, PHP, Kotlin, Swift, Scala, Lua, Bash, Elixir, Haskell, Zig, Dart, OCaml, R, Julia): file, line, enclosing function, narrowed by receiver types, qualifiers and imports; says when a call stays ambiguous."),
            verb!("impact", "code", Effect::Read, LONG, search::ImpactArgs, search::impact,
                "What a change to a function reaches: its callers, their callers, up to depth (default 3), as a graph of nodes and edges with the files."),
            verb!("symbols", "code", Effect::Read, LONG, search::SymbolsArgs, search::symbols,
                "Definitions with kind, line range and signature: one file's outline (nested), or the workspace's by name (exact, prefix, identifier parts); paged."),
            verb!("map", "code", Effect::Read, LONG, search::MapArgs, search::map,
                "The repository at a glance within a token budget: the definitions the rest of the tree references most (PageRank over files' references), focus files and words raised, as file headers with signatures."),
            verb!("git_status", "git", Effect::Read, git::NoArgs, git::git_status,
                "Changed files of the workspace's repository, staged (index) and unstaged (worktree), like git status --porcelain."),
            verb!("git_state", "git", Effect::Read, git::NoArgs, git::git_state,
                "Branch, HEAD sha, upstream with ahead/behind, an operation in progress (merge, rebase...), dirty, conflicts."),
            verb!("git_add", "git", Effect::Write, git::AddArgs, git::git_add,
                "Stage paths (deletions too), like git add."),
            verb!("git_rm", "git", Effect::Write, git::RmArgs, git::git_rm,
                "Stop tracking paths and delete them (cached: true keeps the files)."),
            verb!("git_commit", "git", Effect::Write, git::CommitArgs, git::git_commit,
                "Commit the index with the configured author; refuses an empty commit unless allowEmpty."),
            verb!("git_push", "git", Effect::Write, LONG, git::PushArgs, git::git_push,
                "Push a branch or refspec to a remote (default origin); a non-fast-forward rejection is a clear error."),
            verb!("git_log", "git", Effect::Read, git::LogArgs, git::git_log,
                "Commits of a revision or range, optionally only those touching a path."),
            verb!("git_diff", "git", Effect::Read, git::DiffArgs, git::git_diff,
                "Unified diff with per-file stats: worktree vs index, staged (index vs HEAD), or between revisions."),
            verb!("git_show", "git", Effect::Read, git::ShowArgs, git::git_show,
                "A commit's metadata, message and diff against its first parent."),
            verb!("git_fetch", "git", Effect::Write, LONG, git::FetchArgs, git::git_fetch,
                "Fetch a remote's branches (default origin)."),
            verb!("git_pull", "git", Effect::Write, LONG, git::PullArgs, git::git_pull,
                "Fetch and fast-forward (ffOnly: false allows a merge commit); a conflict is an error that changes nothing."),
            verb!("git_checkout", "git", Effect::Write, git::CheckoutArgs, git::git_checkout,
                "Switch to a branch (create: true makes it first) or detach at a revision; refuses to overwrite local changes."),
            verb!("git_branch", "git", Effect::Write, git::BranchArgs, git::git_branch,
                "List, create or delete local branches."),
            verb!("prd_add", "rows", Effect::Write, rows::PrdAddArgs, rows::prd_add,
                "Add a requirement row (work/rows/prd-NNNN.json), open."),
            verb!("prd_list", "rows", Effect::Read, rows::ListArgs, rows::prd_list,
                "Requirement rows, optionally only open, parked or resolved ones."),
            verb!("prd_park", "rows", Effect::Write, rows::ParkArgs, rows::prd_park,
                "Park an open requirement row, with a reason."),
            verb!("prd_reopen", "rows", Effect::Write, rows::IdArgs, rows::prd_reopen,
                "Move a parked row back to open (a resolved row is never reopened)."),
            verb!("prd_delete", "rows", Effect::Write, rows::IdArgs, rows::prd_delete,
                "Delete a requirement row's file."),
            verb!("prd_resolve", "rows", Effect::Write, rows::ResolveArgs, rows::prd_resolve,
                "Resolve a row in place with { event, commit } witnesses, or with { witness, push: true } commit work/closes/<id>.txt on top of origin/main and push it."),
            verb!("unknown_add", "rows", Effect::Write, rows::UnknownAddArgs, rows::unknown_add,
                "Record an open question (work/rows/unknown-NNNN.json)."),
            verb!("unknown_list", "rows", Effect::Read, rows::ListArgs, rows::unknown_list,
                "Open questions, optionally by state."),
            verb!("unknown_resolve", "rows", Effect::Write, rows::UnknownResolveArgs, rows::unknown_resolve,
                "Answer an open question."),
            verb!("review_packet", "review", Effect::Write, review::PacketArgs, review::review_packet,
                "Assemble a review packet — the spec, the referenced files, a commit range's diff, the log events that witness the work — as the wiki page reviews/<id>."),
            verb!("review_record", "review", Effect::Write, review::RecordArgs, review::review_record,
                "Record one reviewer's verdict (pass or fail) and findings on a packet."),
            verb!("review_join", "review", Effect::Write, review::JoinArgs, review::review_join,
                "Join a packet's records: pass only when every recorded verdict passes (none recorded is a fail), with every finding listed."),
            verb!("wiki_write", "wiki", Effect::Write, search::WikiWriteArgs, search::wiki_write,
                "Write a markdown page of the wiki (.gm/wiki/<page>.md), atomically."),
            verb!("wiki_search", "wiki", Effect::Read, search::WikiSearchArgs, search::wiki_search,
                "Rank the wiki's pages against a query by BM25, with each page's best-matching line."),
            verb!("ci_status", "git", Effect::Read, LONG, ci::CiStatusArgs, ci::ci_status,
                "CI runs of HEAD (or rev) through the GitHub CLI on origin's host, every page: state success, failure, pending or none, and each run."),
            verb!("fetch", "web", Effect::Write, LONG, web::FetchArgs, web::fetch,
                "One HTTP(S) request (GET by default): status, headers and body; follows up to 20 redirects; a large or binary body is saved under .gm/out/."),
            verb!("query_log", "log", Effect::Read, log::QueryLogArgs, log::query_log,
                "Read events of the run log (.gm/log.jsonl), filtered by kind, seq and session (\"mine\": the calling session's own)."),
        ]
    })
}

impl Verb {
    /// The argument schema, computed once per verb.
    pub fn input_schema(&self) -> Value {
        static SCHEMAS: OnceLock<Vec<Value>> = OnceLock::new();
        let all = SCHEMAS.get_or_init(|| registry().iter().map(|v| (v.schema)()).collect());
        registry().iter().position(|v| v.name == self.name).map(|i| all[i].clone()).unwrap_or_default()
    }
}

pub fn find(name: &str) -> Option<&'static Verb> {
    registry().iter().find(|v| v.name == name)
}

/// A verb call's result, and the verbs running when it was admitted (itself included).
pub struct Called {
    pub result: Result<Json, VerbError>,
    pub in_flight: usize,
    /// Files outside the workspace the call wrote through a link, for its log event.
    pub wrote_outside: Vec<String>,
}

/// Runs a verb by name: the one place every verb call goes through, from every surface.
///
/// The call waits for a verb slot (a shell for the whole pool), then runs; a panic inside it
/// becomes its error. Waiting for a slot can always be abandoned, since nothing has started;
/// a running verb is abandoned on cancel only when its traits say it can be.
pub async fn call(ctx: Ctx, name: &str, args: &RawValue) -> Called {
    use futures::FutureExt;
    let Some(verb) = find(name) else {
        return Called {
            result: Err(VerbError::UnknownVerb(name.to_owned())),
            in_flight: 0,
            wrote_outside: Vec::new(),
        };
    };
    // Each call its own record of what it wrote outside (a body's calls share one Ctx).
    let ctx = Ctx { wrote_outside: Arc::default(), ..ctx };
    let wrote = ctx.wrote_outside.clone();
    let cancel = ctx.cancel.clone();
    let permit = tokio::select! {
        biased;
        () = cancel.cancelled() => return Called { result: Err(VerbError::Cancelled), in_flight: 0, wrote_outside: Vec::new() },
        permit = ctx.scheduler.admit(Pool::Verb, verb.effect == Effect::Shell) => permit,
    };
    let in_flight = permit.as_ref().map_or(0, |p| p.in_flight);
    let run = std::panic::AssertUnwindSafe((verb.run)(ctx, args)).catch_unwind().map(|outcome| match outcome {
        Ok(result) => result,
        Err(panic) => Err(VerbError::Internal(format!("verb {name} panicked: {}", panic_message(&panic)))),
    });
    let result = if verb.traits.cancellable {
        // A verb that sees the cancel may end on its own in the same turn (a wait cut short):
        // the cancel still decides how the call ended.
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(VerbError::Cancelled),
            result = run => result,
        }
    } else {
        run.await
    };
    drop(permit);
    let wrote_outside = wrote.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
    Called { result, in_flight, wrote_outside }
}

pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        #[allow(dead_code)]
        path: String,
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("JSON")
    }

    #[test]
    fn argument_errors_name_the_problem_without_a_text_position() {
        for (text, expected) in [
            (r#"{}"#, "missing field `path`"),
            (r#"{"path":1}"#, "invalid type: integer `1`, expected a string"),
            (r#"{"path":"a","x":1}"#, "unknown field `x`, expected `path`"),
            ("null", "missing field `path`"),
        ] {
            match parse_args::<Args>(&raw(text)) {
                Err(VerbError::InvalidArgs(message)) => assert_eq!(message, expected, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(parse_args::<Args>(&raw(r#"{"path":"a"}"#)).is_ok());
    }
}

//! The run loop's own tools — next_context (one step), run_code (a body in the JS engine) and
//! finish (the end of the run) — declared once in a table beside the verb registry, with the
//! per-connection state they change.
//!
//! A tool's `arrive` runs when its call arrives, in the server actor, in arrival order: it
//! changes the connection's run state there (the read gate is judged, the step counted) and
//! returns the rest of the call as a future that touches no connection state.

pub mod body;
pub mod step;

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use gm_actors::cancel::CancelToken;
use gm_actors::log_writer::{Event, Scope};
use gm_actors::scheduler::Pool;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::app::App;
use crate::children::Offered;
use crate::run_state::{Opened, RunState};
use crate::verbs::{self, schema_of, Json, Traits, VerbError, QUICK};

pub const NEXT_CONTEXT: &str = "next_context";
pub const RUN_CODE: &str = "run_code";
pub const FINISH: &str = "finish";

/// What the run loop keeps per connection (per host session).
pub struct RunSession {
    pub session: Arc<str>,
    /// This connection has read skill://gm/SKILL.md: run_code is open.
    pub skill_read: bool,
    pub run: RunState,
    /// How the run was found when the session opened, until the first step says so.
    pub resumed: Option<Opened>,
    /// The number of the last body started.
    pub next_body: u64,
    /// The step budget of a new run of this session, unless its first step sets one.
    pub step_budget: u64,
    /// The session and its current run, for the events of its calls.
    scope: Scope,
    /// Asks the session's user (through its host) whether a workspace server may start.
    pub consent: Option<actix::Recipient<crate::trust::ask::AskConsent>>,
    /// A `next_context` opens run_code as the skill read does (stateless connections).
    pub step_opens_gate: bool,
    /// The call arriving now (its request id as a key), for the bodies it starts to ask with.
    pub arriving: String,
}

impl RunSession {
    /// The session `session` with `run`, found as `opened` says.
    pub fn new(session: Arc<str>, run: RunState, opened: Opened, step_budget: u64) -> Self {
        let scope = Scope { session: session.clone(), run: run.run_id.as_str().into() };
        let resumed = (opened != Opened::New).then_some(opened);
        Self {
            session,
            skill_read: false,
            run,
            resumed,
            next_body: 0,
            step_budget,
            scope,
            consent: None,
            step_opens_gate: false,
            arriving: String::new(),
        }
    }

    /// The session and its current run, for its events.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Starts the session's next run (after a finish).
    fn start_new_run(&mut self) {
        self.run = RunState::new(crate::run_state::new_run_id(), self.step_budget);
        self.resumed = None;
        self.scope = Scope { session: self.session.clone(), run: self.run.run_id.as_str().into() };
    }
}

/// The rest of a call, after its arrival.
pub type ToolFuture = LocalBoxFuture<'static, Result<ToolOutput, Value>>;

/// A call at its arrival: the rest to run, and the reply budget it asked for (run_code's
/// `maxResultBytes`), settled before it runs so that an error reply keeps to it too.
pub struct Arrived {
    pub rest: ToolFuture,
    pub max_result_bytes: Option<usize>,
}

impl From<ToolFuture> for Arrived {
    fn from(rest: ToolFuture) -> Self {
        Self { rest, max_result_bytes: None }
    }
}

/// One of the run loop's own tools.
pub struct LoopTool {
    pub name: &'static str,
    /// Its description, given the child servers' tools (run_code's names them).
    pub description: fn(&Offered) -> String,
    pub schema: fn() -> Value,
    pub traits: Traits,
    /// The slots a call of it takes (verbs take theirs inside `verbs::call`).
    pub pool: Pool,
    /// Listed on `--surface tools` too (run_code is the code surface's alone).
    pub on_tools_surface: bool,
    pub annotations: fn() -> Value,
    /// The call, at its arrival: see the module's docs.
    pub arrive: fn(&Rc<App>, &mut RunSession, &RawValue, CancelToken) -> Arrived,
}

/// The run loop's tools, in the order surfaces list them (run_code and the verbs go between
/// the first and the last).
pub fn loop_tools() -> &'static [LoopTool] {
    static TOOLS: [LoopTool; 3] = [
        LoopTool {
            name: NEXT_CONTEXT,
            description: |_| {
                "One step of the run: the governance rules (re-read from skill://gm/SKILL.md every call), the task, the step number and the steps left, open rows, background work and the last log events. Pass { task } to set the run's task and { stepBudget } to set how many steps it may take.".into()
            },
            schema: schema_of::<step::NextContextArgs>,
            traits: QUICK,
            pool: Pool::Verb,
            on_tools_surface: true,
            annotations: || json!({ "readOnlyHint": false, "idempotentHint": false }),
            arrive: arrive_next_context,
        },
        LoopTool {
            name: RUN_CODE,
            description: body::run_code_description,
            schema: schema_of::<body::RunCodeArgs>,
            traits: Traits { cancellable: true, progress: true },
            pool: Pool::Body,
            on_tools_surface: false,
            annotations: || json!({ "readOnlyHint": false, "openWorldHint": true }),
            arrive: arrive_run_code,
        },
        LoopTool {
            name: FINISH,
            description: |_| {
                "End the run: logs an end event with the summary and the gaps (what is not done, not verified or not known). stopBackground: true also stops background work still running. The next next_context starts a new run.".into()
            },
            schema: schema_of::<step::FinishArgs>,
            traits: QUICK,
            pool: Pool::Verb,
            on_tools_surface: true,
            annotations: || json!({ "readOnlyHint": false, "idempotentHint": false }),
            arrive: arrive_finish,
        },
    ];
    &TOOLS
}

pub fn loop_tool(name: &str) -> Option<&'static LoopTool> {
    loop_tools().iter().find(|t| t.name == name)
}

/// A call that fails at its arrival.
fn refused(error: Value) -> ToolFuture {
    Box::pin(futures::future::ready(Err(error)))
}

fn arrive_next_context(app: &Rc<App>, s: &mut RunSession, args: &RawValue, _: CancelToken) -> Arrived {
    let parsed: step::NextContextArgs = match verbs::parse_args(args) {
        Ok(a) => a,
        Err(e) => return refused(e.to_json()).into(),
    };
    if parsed.step_budget == Some(0) {
        return refused(VerbError::InvalidArgs("stepBudget must be at least 1".into()).to_json()).into();
    }
    // The step after a finish starts the next run.
    if s.run.finished {
        s.start_new_run();
    }
    s.run.step += 1;
    if s.step_opens_gate && !s.skill_read {
        s.skill_read = true;
        app.js.start();
    }
    if let Some(task) = parsed.task {
        s.run.task = Some(task);
    }
    if let Some(budget) = parsed.step_budget {
        s.run.step_budget = budget;
    }
    let (state, resumed) = (s.run.clone(), s.resumed.take());
    save_run(app, s);
    let app = app.clone();
    let session = s.session.to_string();
    let rest: ToolFuture = Box::pin(async move {
        step::next_context(&app, state, resumed, session).await.map(|v| ToolOutput::value(&v)).map_err(|e| e.to_json())
    });
    rest.into()
}

fn arrive_finish(app: &Rc<App>, s: &mut RunSession, args: &RawValue, _: CancelToken) -> Arrived {
    // Bad arguments change nothing: the run stays open.
    let parsed: step::FinishArgs = match verbs::parse_args(args) {
        Ok(a) => a,
        Err(e) => return refused(e.to_json()).into(),
    };
    s.run.finished = true;
    let state = s.run.clone();
    save_run(app, s);
    let app = app.clone();
    let scope = s.scope().clone();
    let rest: ToolFuture = Box::pin(async move {
        step::finish(&app, parsed, state, scope).await.map(|v| ToolOutput::value(&v)).map_err(|e| e.to_json())
    });
    rest.into()
}

fn arrive_run_code(app: &Rc<App>, s: &mut RunSession, args: &RawValue, cancel: CancelToken) -> Arrived {
    // The read gate is judged in arrival order: a run_code sent before the skill read is
    // refused even if it would start after it.
    if !s.skill_read {
        return refused(json!({
            "code": "skill_not_read",
            "message": "run_code is closed until this connection has read the gm skill: call resources/read with { \"uri\": \"skill://gm/SKILL.md\" } (ReadMcpResourceTool, server gm), then call run_code again.",
            "read": { "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } },
        }))
        .into();
    }
    let parsed = match body::parse_run_code(args, &app.budget) {
        Ok(parsed) => parsed,
        Err(e) => return refused(e.to_json()).into(),
    };
    s.next_body += 1;
    let number = s.next_body;
    let app = app.clone();
    let scope = s.scope().clone();
    let consent = s.consent.clone().map(|to| crate::trust::ask::Asker { to, call: s.arriving.clone() });
    // Child servers still starting are not waited for: a body's call to one of their tools
    // waits for that server alone (`Children::find_or_start`).
    let max_result_bytes = Some(parsed.max_result_bytes);
    let rest: ToolFuture = Box::pin(async move { body::run_code(&app, parsed, number, cancel, scope, consent).await });
    Arrived { rest, max_result_bytes }
}

/// Sets the run's task (the `gm` prompt's `task` argument).
pub fn set_task(app: &App, s: &mut RunSession, task: &str) {
    s.run.task = Some(task.to_owned());
    save_run(app, s);
}

/// Keeps the session's run for the next worker; a failure is logged, never a failed call.
fn save_run(app: &App, s: &RunSession) {
    if let Err(e) = app.runs.save(&s.session, &s.run) {
        if let Some(log) = &app.ctx.log {
            let event = Event::new("run-state", json!({ "state": "failed", "error": e.to_string() }));
            log.do_send(event.in_scope(Some(s.scope())));
        }
    }
}

/// What a run-loop tool or a verb call gives back to the server.
pub struct ToolOutput {
    /// The result as JSON text.
    pub value: Json,
    /// A second text block (run_code's console), if any.
    pub extra: Option<String>,
    /// The call handed work to the background (a run_code body past its budget): what it
    /// started must not be stopped when the call returns.
    pub detached: bool,
}

impl ToolOutput {
    pub fn json(value: Json) -> Self {
        Self { value, extra: None, detached: false }
    }

    pub fn value(value: &Value) -> Self {
        Self::json(raw(value))
    }
}

/// Keeps the whole of what a reply leaves out (a result, a body's console) in a new file under
/// `<state_dir>/out/`, reached through no link; returns its path as the model names it to
/// `read_file`: relative to the workspace.
pub fn spill(state_dir: &Path, workspace: &Path, kind: &str, extension: &str, bytes: &[u8]) -> Result<String, String> {
    let path = crate::verbs::out::unique_path(&state_dir.join("out"), kind, extension);
    gm_actors::state_file::write_new(&path, bytes).map_err(|e| e.to_string())?;
    Ok(path.strip_prefix(workspace).unwrap_or(&path).to_string_lossy().into_owned())
}

/// A JSON value as text; serializing a value cannot fail.
pub(crate) fn raw(value: &Value) -> Json {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| gm_actors::js_engine::null_json())
}

//! The run's state — its id, task, step and step budget — kept in `.gm/run.json`, so a new gm
//! (after a crash, a restart by the host, or a new worker under the relay) continues the run
//! instead of starting one.
//!
//! The file is replaced whole (temp file and rename) at every step, so a reader never sees half
//! of it. It is not synced: a crash of the machine can lose the last step's count, never the
//! file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Steps a run may take unless the host (`gm serve --step-budget`) or the task
/// (`next_context({ stepBudget })`) says otherwise.
pub const DEFAULT_STEP_BUDGET: u64 = 200;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    pub run_id: String,
    pub task: Option<String>,
    /// Steps taken: the number of next_context calls of this run.
    pub step: u64,
    pub step_budget: u64,
    /// `finish` ended the run; the next step starts a new one.
    pub finished: bool,
}

impl RunState {
    pub fn new(run_id: String, step_budget: u64) -> Self {
        Self { run_id, task: None, step: 0, step_budget, finished: false }
    }

    pub fn steps_left(&self) -> u64 {
        self.step_budget.saturating_sub(self.step)
    }
}

/// Where the state is kept, and how it was found at start.
pub struct RunStateFile {
    path: PathBuf,
}

/// What [`RunStateFile::load`] found.
#[derive(Debug)]
pub enum Loaded {
    /// A run that was not finished: this gm continues it.
    Unfinished(RunState),
    /// No file, or the last run was finished: a new run starts.
    None,
    /// A file gm cannot read: a new run starts, and the reason is logged.
    Unreadable(String),
}

impl RunStateFile {
    /// The state file of the workspace whose state directory is `state_dir` (`.gm`).
    pub fn new(state_dir: &Path) -> Self {
        Self { path: state_dir.join("run.json") }
    }

    pub fn load(&self) -> Loaded {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::None,
            Err(e) => return Loaded::Unreadable(format!("{}: {e}", self.path.display())),
        };
        match serde_json::from_slice::<RunState>(&bytes) {
            Ok(state) if !state.finished => Loaded::Unfinished(state),
            Ok(_) => Loaded::None,
            Err(e) => Loaded::Unreadable(format!("{}: {e}", self.path.display())),
        }
    }

    /// Replaces the file with `state`.
    pub fn save(&self, state: &RunState) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
        text.push(b'\n');
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        gm_actors::fs::replace(&self.path, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_run_is_found_again_and_a_finished_one_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = RunStateFile::new(dir.path());
        assert!(matches!(file.load(), Loaded::None));
        let mut state = RunState::new("r1".into(), 10);
        state.step = 3;
        state.task = Some("ship it".into());
        file.save(&state).expect("save");
        match file.load() {
            Loaded::Unfinished(found) => assert_eq!(found, state),
            other => panic!("{other:?}"),
        }
        state.finished = true;
        file.save(&state).expect("save");
        assert!(matches!(file.load(), Loaded::None));
        std::fs::write(dir.path().join("run.json"), "{ not json").expect("write");
        assert!(matches!(file.load(), Loaded::Unreadable(_)));
    }
}

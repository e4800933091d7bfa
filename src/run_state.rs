//! Each host session's run — its id, task, step and step budget — kept in
//! `.gm/runs/<session>.json`, so a session whose worker died (and was started again) continues
//! its run, and a new session (a host restarted after a crash) continues the newest unfinished
//! run that no connected session holds, instead of starting one.
//!
//! A file is replaced whole (temp file and rename) at every step, so a reader never sees half
//! of it. It is not synced: a crash of the machine can lose the last step's count, never the
//! file. `.gm/run.json`, where gm kept the one run before runs were per session, is taken over
//! like any other unfinished run.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Steps a run may take unless the host (`gm serve --step-budget`) or the task
/// (`next_context({ stepBudget })`) says otherwise.
pub const DEFAULT_STEP_BUDGET: u64 = 200;

/// A run id: UTC start time plus a random suffix, sortable and unique.
pub fn new_run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    let stamp =
        now.format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z")).unwrap_or_default();
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{stamp}-{}", &id[..8])
}

/// A session id: `s-`, the UTC time the session started, and 128 random bits in hex. Over
/// HTTP it is the `Mcp-Session-Id` a client names its session by, so it must not be guessable
/// (a run id's 32 bits are not enough); 51 characters, within [`valid_session_id`]'s 64.
pub fn new_session_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    let stamp =
        now.format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z")).unwrap_or_default();
    // A v4 uuid is 122 random bits from the OS and 6 fixed ones (version, variant); a second
    // one turned half-way round puts random bits over the first's fixed ones: 128 in all.
    let random = uuid::Uuid::new_v4().as_u128() ^ uuid::Uuid::new_v4().as_u128().rotate_left(64);
    format!("s-{stamp}-{random:032x}")
}

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
        match self.read() {
            Ok(state) if !state.finished => Loaded::Unfinished(state),
            Ok(_) | Err(None) => Loaded::None,
            Err(Some(why)) => Loaded::Unreadable(why),
        }
    }

    /// The state in the file; `Err(None)` when there is no file, `Err(Some(why))` when it
    /// cannot be read.
    fn read(&self) -> Result<RunState, Option<String>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
            Err(e) => return Err(Some(format!("{}: {e}", self.path.display()))),
        };
        serde_json::from_slice::<RunState>(&bytes).map_err(|e| Some(format!("{}: {e}", self.path.display())))
    }

    /// Replaces the file with `state`.
    pub fn save(&self, state: &RunState) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
        text.push(b'\n');
        if let Some(dir) = self.path.parent() {
            gm_actors::state_file::open_own_folder(dir)?;
        }
        gm_actors::fs::replace(&self.path, &text)
    }
}

/// Every session's run file, under `.gm/runs/`.
pub struct RunStore {
    dir: PathBuf,
    /// `.gm/run.json` of gm before sessions: an unfinished run there is taken over once.
    legacy: PathBuf,
}

/// How a session's run was found when it opened.
#[derive(Debug, Clone, PartialEq)]
pub enum Opened {
    /// A new run.
    New,
    /// The session's own unfinished run (its worker was started again), at this step.
    Resumed { step: u64 },
    /// An unfinished run another session left (a host that went away), at this step.
    TakenOver { from: String, step: u64 },
}

impl RunStore {
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("runs"), legacy: state_dir.join("run.json") }
    }

    fn file(&self, session: &str) -> RunStateFile {
        RunStateFile { path: self.dir.join(format!("{session}.json")) }
    }

    /// The run of `session`: its own if it has an unfinished one, else the newest unfinished
    /// run of a session not in `live`, else a new run (`new_run` makes its id). Finished runs
    /// of sessions not in `live` are removed on the way. Problems (an unreadable file) are
    /// returned to be logged; they never stop a session.
    pub fn open(
        &self,
        session: &str,
        live: &dyn Fn(&str) -> bool,
        new_run: impl FnOnce() -> RunState,
    ) -> (RunState, Opened, Vec<String>) {
        let mut problems = Vec::new();
        match self.file(session).load() {
            Loaded::Unfinished(run) => {
                let step = run.step;
                return (run, Opened::Resumed { step }, problems);
            }
            Loaded::Unreadable(why) => problems.push(why),
            Loaded::None => {}
        }
        let mut orphans: Vec<(std::time::SystemTime, String, PathBuf, RunState)> = Vec::new();
        let entries = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        let files = entries.map(|e| e.path()).chain(std::iter::once(self.legacy.clone()));
        for path in files {
            let Some(owner) = self.owner_of(&path) else { continue };
            if owner == session || live(&owner) {
                continue;
            }
            let file = RunStateFile { path: path.clone() };
            let modified = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
            match file.read() {
                Ok(run) if run.finished => {
                    let _ = std::fs::remove_file(&path);
                }
                Ok(run) => orphans.push((modified, owner, path, run)),
                Err(Some(why)) => problems.push(why),
                Err(None) => {}
            }
        }
        orphans.sort_by_key(|o| std::cmp::Reverse(o.0));
        for (_, owner, path, run) in orphans {
            // Taken over by renaming: the file is this session's from now on, once.
            if std::fs::create_dir_all(&self.dir).is_ok() && std::fs::rename(&path, self.file(session).path).is_ok() {
                let step = run.step;
                return (run, Opened::TakenOver { from: owner, step }, problems);
            }
        }
        (new_run(), Opened::New, problems)
    }

    /// Which session a run file belongs to (`legacy` for `.gm/run.json`); `None` for anything
    /// that is not a run file.
    fn owner_of(&self, path: &Path) -> Option<String> {
        if path == self.legacy {
            return path.exists().then(|| "legacy".to_owned());
        }
        let name = path.file_name()?.to_str()?;
        let session = name.strip_suffix(".json")?;
        valid_session_id(session).then(|| session.to_owned())
    }

    /// Replaces the session's run file with `state`.
    pub fn save(&self, session: &str, state: &RunState) -> std::io::Result<()> {
        self.file(session).save(state)
    }

    /// Removes the session's run file when its run is finished (an unfinished run stays, to be
    /// continued).
    pub fn forget_if_finished(&self, session: &str) {
        let file = self.file(session);
        if matches!(file.read(), Ok(run) if run.finished) {
            let _ = std::fs::remove_file(&file.path);
        }
    }
}

/// A session id gm accepts: short, and safe as a file name.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
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

    fn run(id: &str, step: u64, finished: bool) -> RunState {
        RunState { run_id: id.into(), task: Some(format!("task of {id}")), step, step_budget: 10, finished }
    }

    #[test]
    fn a_session_resumes_its_own_run_and_a_new_one_takes_over_the_newest_orphan_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RunStore::new(dir.path());
        let nobody = |_: &str| false;
        let (first, how, _) = store.open("s1", &nobody, || run("r1", 0, false));
        assert_eq!((first.run_id.as_str(), how), ("r1", Opened::New));
        store.save("s1", &run("r1", 3, false)).expect("save");
        let (again, how, _) = store.open("s1", &nobody, || run("new", 0, false));
        assert_eq!((again.run_id.as_str(), how), ("r1", Opened::Resumed { step: 3 }));

        // s1 is connected: s2 gets a run of its own.
        let s1_live = |s: &str| s == "s1";
        let (second, how, _) = store.open("s2", &s1_live, || run("r2", 0, false));
        assert_eq!((second.run_id.as_str(), how), ("r2", Opened::New));

        // s1 left: s3 takes its run over, and nobody else can.
        let (third, how, _) = store.open("s3", &nobody, || run("r3", 0, false));
        assert_eq!((third.run_id.as_str(), how), ("r1", Opened::TakenOver { from: "s1".into(), step: 3 }));
        let (fourth, how, _) = store.open("s4", &|s: &str| s == "s3", || run("r4", 0, false));
        assert_eq!((fourth.run_id.as_str(), how), ("r4", Opened::New));
    }

    #[test]
    fn the_run_json_of_an_older_gm_is_taken_over_and_finished_runs_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        RunStateFile::new(dir.path()).save(&run("old", 7, false)).expect("save");
        let store = RunStore::new(dir.path());
        store.save("gone", &run("done", 2, true)).expect("save");
        let (taken, how, _) = store.open("s1", &|_: &str| false, || run("new", 0, false));
        assert_eq!((taken.run_id.as_str(), how), ("old", Opened::TakenOver { from: "legacy".into(), step: 7 }));
        assert!(!dir.path().join("run.json").exists());
        assert!(!dir.path().join("runs/gone.json").exists(), "a finished run of a gone session is removed");
    }

    #[test]
    fn session_ids_are_plain_file_names() {
        assert!(valid_session_id("s-20261203T101010Z-ab12cd34"));
        for bad in ["", "../x", "a/b", "a.json", &"x".repeat(65)] {
            assert!(!valid_session_id(bad), "{bad}");
        }
    }
}

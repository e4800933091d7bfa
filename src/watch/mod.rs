//! The workspace watcher: which files changed since a reader last asked, whoever changed them
//! (gm's verbs, the host's own edit tool, a shell, an editor, `git checkout`).
//!
//! Search, callers and the like subscribe; before answering, a reader calls
//! [`Subscription::changes`], which first makes sure every change made before the call has
//! been seen, then hands over the paths changed since its last call. Events arrive on the
//! watcher's thread some time after the write that caused them, so "seen" needs a barrier:
//! the reader creates a cookie file in `.gm/watch/` and waits for the watcher to see it
//! (watchman's sync cookies). A backend delivers one directory's events in order, and the
//! cookie directory is watched by the same backend, so once the cookie is seen every earlier
//! change has been seen too.
//!
//! When the watcher cannot work (no backend, the watch limit reached, an error, turned off
//! with `GM_WATCH=0`), `changes` says so and readers fall back to stat-based rescans. A
//! directory that alone cannot be watched (EACCES, a FUSE mount) does not stop the rest: it is
//! named in every [`Dirty::unwatched`], and readers check what they know under it by size and
//! modification time at each call.
//!
//! An idle worker lets go of its inotify instance and watches ([`Status::Released`]: no
//! reader asked for [`idle_after`], two minutes unless `GM_WATCH_IDLE_MS` says otherwise), so
//! that a hundred idle workers do not take the instances and watches the user's editors need;
//! the next reader wakes it, waits for the watches to be placed again, and rescans everything
//! once (what changed meanwhile was not seen).
//!
//! When the kernel's queue overflows, events were lost: readers are told to rescan everything
//! ([`Dirty::all`]), and the backend walks the tree again, so that directories made while the
//! events were lost are watched from then on.
//!
//! Backends: inotify on Linux (`linux.rs`: one watch per directory, skipping what git
//! ignores, and without the open events the `notify` crate also asks for: every file a grep
//! opens would otherwise be an event); the `notify` crate elsewhere (`portable.rs`: FSEvents,
//! kqueue, ReadDirectoryChangesW), which `GM_WATCH=notify` also selects on Linux.

#[cfg(target_os = "linux")]
mod linux;
mod portable;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a reader waits for its cookie: past this the events are late (a stalled
/// watcher thread) and the reader rescans instead of trusting them.
const COOKIE_WAIT: Duration = Duration::from_secs(2);
/// How long a reader waits for the first watches to be in place (walking a big tree).
const READY_WAIT: Duration = Duration::from_secs(60);
/// How long the watcher keeps its watches with no reader asking.
const IDLE_AFTER: Duration = Duration::from_secs(120);

/// [`IDLE_AFTER`], or `GM_WATCH_IDLE_MS`.
pub(crate) fn idle_after() -> Duration {
    static IDLE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *IDLE.get_or_init(|| {
        std::env::var("GM_WATCH_IDLE_MS")
            .ok()
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(IDLE_AFTER, Duration::from_millis)
    })
}

/// What changed for one subscriber since its last [`Subscription::changes`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dirty {
    /// Workspace-relative paths (with `/`) of files or directories that changed; a directory
    /// stands for everything that was under it (it was created, removed or renamed).
    pub paths: BTreeSet<String>,
    /// git's index or HEAD changed (`git add`, a checkout, a pull): the tracked set may differ.
    pub tracked: bool,
    /// Events were lost (the kernel's queue overflowed): only a full rescan is right.
    pub all: bool,
    /// Workspace-relative directories the watcher could not watch (it was refused a watch on
    /// them): their changes are not in `paths`, so a reader checks the files it knows under
    /// them itself. Given at every call, not only once.
    pub unwatched: BTreeSet<String>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && !self.tracked && !self.all && self.unwatched.is_empty()
    }

    /// Whether anything changed (the directories the watcher cannot watch aside).
    pub fn changed(&self) -> bool {
        !self.paths.is_empty() || self.tracked || self.all
    }

    /// Adds `later`'s changes to these: what a reader that held on to its changes still has
    /// to bring up to date.
    pub fn merge(&mut self, later: Dirty) {
        self.paths.extend(later.paths);
        self.tracked |= later.tracked;
        self.all |= later.all;
        self.unwatched = later.unwatched;
    }
}

/// The answer to [`Subscription::changes`].
#[derive(Debug)]
pub enum Changes {
    /// Everything that changed before the call, as the watcher saw it.
    Watched(Dirty),
    /// The watcher cannot say (why): rescan.
    Unwatched(String),
}

/// How the watcher is doing, for the `watch` log event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The first watches are in place; `unwatched` are the directories it was refused.
    Watching {
        backend: &'static str,
        dirs: u64,
        ms: u64,
        unwatched: Vec<Unwatched>,
    },
    /// A directory made later could not be watched; the rest still is.
    Skipped(Unwatched),
    Failed {
        why: String,
    },
    /// No reader asked for `idle_ms`: the watches and the inotify instance are given back
    /// until the next reader.
    Released {
        idle_ms: u64,
    },
}

/// A directory the watcher was refused a watch on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwatched {
    /// Relative to the workspace, with `/`.
    pub dir: String,
    pub why: String,
}

/// Which backend watches: the platform's own (inotify on Linux) or the `notify` crate's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Native,
    Portable,
}

/// The watcher of one workspace. Cheap to clone; the watching thread lives as long as gm.
#[derive(Clone)]
pub struct Watcher {
    shared: Arc<Shared>,
}

/// A reader's view: its own set of changes.
pub struct Subscription {
    shared: Arc<Shared>,
    id: usize,
}

/// What hears the watcher's status (a `watch` log event, in gm).
type Report = Box<dyn Fn(Status) + Send>;

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    cookie_dir: PathBuf,
    next_cookie: AtomicU64,
    /// Hears how the watcher is doing. Called from a reader's [`Subscription::changes`], not
    /// from the watcher's thread, so that what it logs lands inside a call, in order, and
    /// never after gm's last event.
    report: Mutex<Option<Report>>,
}

#[derive(Default)]
struct State {
    ready: bool,
    failed: Option<String>,
    /// Statuses not reported yet, in order.
    unreported: Vec<Status>,
    subscribers: Vec<Dirty>,
    cookies_seen: HashSet<u64>,
    /// Directories the backend was refused a watch on, by relative path.
    unwatched: BTreeSet<String>,
    /// The watches are given back for idleness; `wanted`: a reader asked for them again.
    released: bool,
    wanted: bool,
    /// When a reader last asked (or the watcher started).
    last_asked: Option<Instant>,
}

/// What a backend reports, in the order its events came.
pub(crate) trait Sink: Send + Sync {
    fn changed(&self, rel: String);
    fn tracked_changed(&self);
    fn overflowed(&self);
    fn cookie(&self, name: &str);
    /// A directory could not be watched (and is not under one already reported).
    fn unwatched(&self, dir: Unwatched);
    /// A directory reported unwatched is watched now (it was made again).
    fn rewatched(&self, rel: &str);
    /// Whether no reader has asked for [`idle_after`]; if so the backend gives its watches back
    /// (it returns `Ok`), and readers from this moment wait for them to be back.
    fn release_if_idle(&self) -> bool;
}

/// Where a backend finds things: the workspace, git's directory, the cookies.
pub(crate) struct Layout {
    pub workspace: PathBuf,
    /// `.git` (or a worktree's git directory): its `index` and `HEAD` say when the tracked
    /// set changed.
    pub git_dir: Option<PathBuf>,
    pub cookie_dir: PathBuf,
    /// gm's own state (`.gm/`): never reported.
    pub state_dir: PathBuf,
}

impl Watcher {
    /// Starts watching `workspace` on a thread of its own; `report` hears how it went (once
    /// the first watches are in place, and when it fails), at the next reader's call. `GM_WATCH=0` turns it off;
    /// `GM_WATCH=notify` picks the portable backend.
    pub fn start(workspace: &Path, state_dir: &Path, report: impl Fn(Status) + Send + 'static) -> Watcher {
        let choice = std::env::var("GM_WATCH").unwrap_or_default();
        let backend = match choice.trim() {
            "0" | "off" | "false" => return Watcher::off("the watcher is turned off (GM_WATCH=0)"),
            "notify" => Backend::Portable,
            _ => Backend::Native,
        };
        Watcher::start_with(workspace, state_dir, backend, report)
    }

    /// [`Watcher::start`] with the backend chosen.
    pub fn start_with(
        workspace: &Path,
        state_dir: &Path,
        backend: Backend,
        report: impl Fn(Status) + Send + 'static,
    ) -> Watcher {
        let cookie_dir = state_dir.join("watch");
        let watcher = Watcher {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                cond: Condvar::new(),
                cookie_dir: cookie_dir.clone(),
                next_cookie: AtomicU64::new(1),
                report: Mutex::new(Some(Box::new(report))),
            }),
        };
        // Cookies of an earlier gm are stale; a missing directory is made here.
        let _ = std::fs::remove_dir_all(&cookie_dir);
        if let Err(e) = std::fs::create_dir_all(&cookie_dir) {
            watcher.shared.fail(format!("cannot create {}: {e}", cookie_dir.display()));
            return watcher;
        }
        let (workspace, state_dir) = (workspace.to_owned(), state_dir.to_owned());
        let shared = watcher.shared.clone();
        let portable = backend == Backend::Portable || !cfg!(target_os = "linux");
        shared.lock().last_asked = Some(Instant::now());
        let spawned = std::thread::Builder::new().name("gm-watch".into()).spawn(move || {
            let git_dir = crate::git::git_dir(&workspace);
            let layout = Layout { workspace, git_dir, cookie_dir, state_dir };
            loop {
                let started = Instant::now();
                let sink: Arc<dyn Sink> = shared.clone();
                let ready = |backend: &'static str, dirs: u64| {
                    let ms = started.elapsed().as_millis() as u64;
                    shared.set_ready(|unwatched| Status::Watching { backend, dirs, ms, unwatched });
                };
                let outcome =
                    if portable { portable::run(&layout, sink, ready) } else { run_native(&layout, sink, ready) };
                match outcome {
                    // Given back for idleness: wait for a reader, then watch again.
                    Ok(()) => shared.released(),
                    Err(why) => {
                        shared.fail(why);
                        return;
                    }
                }
            }
        });
        if let Err(e) = spawned {
            watcher.shared.fail(format!("cannot start the watcher thread: {e}"));
        }
        watcher
    }

    /// A watcher that never watches (the one-shot CLI): every reader rescans.
    pub fn off(why: &str) -> Watcher {
        let watcher = Watcher {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                cond: Condvar::new(),
                cookie_dir: PathBuf::new(),
                next_cookie: AtomicU64::new(1),
                report: Mutex::new(None),
            }),
        };
        watcher.shared.lock().failed = Some(why.to_owned());
        watcher
    }

    pub fn subscribe(&self) -> Subscription {
        let mut state = self.shared.lock();
        state.subscribers.push(Dirty::default());
        Subscription { shared: self.shared.clone(), id: state.subscribers.len() - 1 }
    }
}

#[cfg(target_os = "linux")]
fn run_native(layout: &Layout, sink: Arc<dyn Sink>, ready: impl FnOnce(&'static str, u64)) -> Result<(), String> {
    linux::run(layout, sink, ready)
}

#[cfg(not(target_os = "linux"))]
fn run_native(layout: &Layout, sink: Arc<dyn Sink>, ready: impl FnOnce(&'static str, u64)) -> Result<(), String> {
    portable::run(layout, sink, ready)
}

/// A way to wait until the watcher's first watches are in place, without taking anyone's
/// changes (for a thread that scans the tree and must not start before then).
#[derive(Clone)]
pub struct Readiness {
    shared: Arc<Shared>,
}

impl Readiness {
    /// Waits until the first watches are in place (or the watcher failed); true when watching.
    pub fn wait(&self) -> bool {
        let deadline = Instant::now() + READY_WAIT;
        let mut state = self.shared.lock();
        self.shared.asked(&mut state);
        while !state.ready && state.failed.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.shared.cond.wait_timeout(state, left).map(|(s, _)| s).unwrap_or_else(|e| e.into_inner().0);
        }
        state.failed.is_none()
    }

    /// Whether the watcher failed (or is off), without waiting.
    pub fn failed(&self) -> bool {
        self.shared.lock().failed.is_some()
    }
}

impl Subscription {
    /// See [`Readiness`].
    pub fn readiness(&self) -> Readiness {
        Readiness { shared: self.shared.clone() }
    }

    /// [`Subscription::changes`], or `None` while the first watches are still being placed
    /// (the watcher has not failed): for a reader that can check every file itself sooner than
    /// the watcher's first walk ends.
    pub fn changes_if_ready(&self) -> Option<Changes> {
        let mut state = self.shared.lock();
        self.shared.asked(&mut state);
        let waiting = !state.ready && state.failed.is_none();
        drop(state);
        (!waiting).then(|| self.changes())
    }

    /// Everything that changed since this subscriber last asked, including every change made
    /// before this call. Blocks for the round trip of one cookie (tens of microseconds), or
    /// until the first watches are in place.
    pub fn changes(&self) -> Changes {
        let shared = &self.shared;
        let deadline = Instant::now() + READY_WAIT;
        let mut state = shared.lock();
        shared.asked(&mut state);
        while !state.ready && state.failed.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Changes::Unwatched("the watcher is still setting up its watches".into());
            }
            state = shared.cond.wait_timeout(state, left).map(|(s, _)| s).unwrap_or_else(|e| e.into_inner().0);
        }
        let unreported = std::mem::take(&mut state.unreported);
        let failed = state.failed.clone();
        drop(state);
        for status in unreported {
            shared.report(status);
        }
        if let Some(why) = failed {
            return Changes::Unwatched(why);
        }
        let n = shared.next_cookie.fetch_add(1, Ordering::Relaxed);
        let cookie = shared.cookie_dir.join(format!("{}-{n}", std::process::id()));
        if let Err(e) = std::fs::File::create(&cookie) {
            return Changes::Unwatched(format!("cannot write the watcher's cookie {}: {e}", cookie.display()));
        }
        let seen = shared.wait_for_cookie(n);
        let _ = std::fs::remove_file(&cookie);
        let mut state = shared.lock();
        if let Some(why) = &state.failed {
            return Changes::Unwatched(why.clone());
        }
        if !seen {
            return Changes::Unwatched("the watcher's events are late".into());
        }
        let unwatched = state.unwatched.clone();
        match state.subscribers.get_mut(self.id) {
            Some(dirty) => Changes::Watched(Dirty { unwatched, ..std::mem::take(dirty) }),
            None => Changes::Unwatched("no such subscriber".into()),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first watches are in place: the status says which directories were refused.
    fn set_ready(&self, status: impl FnOnce(Vec<Unwatched>) -> Status) {
        let mut state = self.lock();
        state.ready = true;
        // Those found during the walk are in the ready status, not each on its own; the rest
        // (a release before it) keep their place.
        let (skipped, others): (Vec<Status>, Vec<Status>) =
            std::mem::take(&mut state.unreported).into_iter().partition(|s| matches!(s, Status::Skipped(_)));
        let skipped = skipped
            .into_iter()
            .filter_map(|s| match s {
                Status::Skipped(u) => Some(u),
                _ => None,
            })
            .collect();
        state.unreported = others;
        state.unreported.push(status(skipped));
        drop(state);
        self.cond.notify_all();
    }

    /// A reader asks: the watcher is not idle, and a released one is wanted back.
    fn asked(&self, state: &mut State) {
        state.last_asked = Some(Instant::now());
        if state.released && !state.wanted {
            state.wanted = true;
            self.cond.notify_all();
        }
    }

    /// The backend gave its watches back: every reader must check everything once it is
    /// back (what changes meanwhile is not seen); waits, on the watcher's thread, for a reader.
    fn released(&self) {
        let mut state = self.lock();
        let idle_ms = state.last_asked.map_or(0, |t| t.elapsed().as_millis() as u64);
        state.ready = false;
        state.released = true;
        state.unreported.push(Status::Released { idle_ms });
        for d in state.subscribers.iter_mut() {
            d.all = true;
        }
        // A reader that asked after the backend looked is not idle: straight back.
        state.wanted |= state.last_asked.is_some_and(|t| t.elapsed() < idle_after());
        while !state.wanted && state.failed.is_none() {
            state = self.cond.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.wanted = false;
        state.released = false;
    }

    fn fail(&self, why: String) {
        let mut state = self.lock();
        if state.failed.is_none() {
            state.failed = Some(why.clone());
            state.unreported.push(Status::Failed { why });
        }
        drop(state);
        self.cond.notify_all();
    }

    fn report(&self, status: Status) {
        if let Some(report) = self.report.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            report(status);
        }
    }

    fn wait_for_cookie(&self, n: u64) -> bool {
        let deadline = Instant::now() + COOKIE_WAIT;
        let mut state = self.lock();
        loop {
            if state.cookies_seen.remove(&n) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || state.failed.is_some() {
                return false;
            }
            state = self.cond.wait_timeout(state, left).map(|(s, _)| s).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn each(&self, f: impl Fn(&mut Dirty)) {
        for dirty in self.lock().subscribers.iter_mut() {
            f(dirty);
        }
    }
}

impl Sink for Shared {
    fn changed(&self, rel: String) {
        self.each(|d| {
            d.paths.insert(rel.clone());
        });
    }

    fn tracked_changed(&self) {
        self.each(|d| d.tracked = true);
    }

    fn overflowed(&self) {
        self.each(|d| d.all = true);
    }

    fn unwatched(&self, dir: Unwatched) {
        let mut state = self.lock();
        // A reader that asked before may have stale lines from it: its files are checked
        // from now on, and once now by their directory.
        for d in state.subscribers.iter_mut() {
            d.paths.insert(dir.dir.clone());
        }
        state.unwatched.insert(dir.dir.clone());
        state.unreported.push(Status::Skipped(dir));
    }

    fn rewatched(&self, rel: &str) {
        self.lock().unwatched.remove(rel);
    }

    fn release_if_idle(&self) -> bool {
        let mut state = self.lock();
        let idle = !state.subscribers.is_empty() && state.last_asked.is_some_and(|t| t.elapsed() >= idle_after());
        // Not ready from here, under the lock readers ask under: a reader in the moment before
        // `released` would otherwise send its cookie to an instance being closed, wait the
        // cookie's two seconds for nothing, and answer `rescan`.
        if idle {
            state.ready = false;
        }
        idle
    }

    fn cookie(&self, name: &str) {
        let Some((pid, n)) = name.split_once('-') else { return };
        if pid != std::process::id().to_string() {
            return;
        }
        if let Ok(n) = n.parse() {
            self.lock().cookies_seen.insert(n);
            self.cond.notify_all();
        }
    }
}

/// `path` relative to the workspace, with `/`, or `None` outside it.
pub(crate) fn relative(workspace: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(workspace).ok()?;
    let rel = rel.to_string_lossy().replace('\\', "/");
    (!rel.is_empty()).then_some(rel)
}

/// The files under the workspace-relative directory `dir` that `.gitignore` does not exclude,
/// relative to the workspace: what a reader lists in a directory the watcher could not watch.
pub fn files_under<'a>(workspace: &'a Path, dir: &str) -> impl Iterator<Item = String> + 'a {
    ignore::WalkBuilder::new(workspace.join(dir))
        .hidden(false)
        .require_git(false)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter_map(move |e| relative(workspace, e.path()))
}

/// Whether git's directory holds the file `name` that says the tracked set changed.
pub(crate) fn is_tracked_marker(name: &str) -> bool {
    name == "index" || name == "HEAD"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes_now(sub: &Subscription) -> Dirty {
        match sub.changes() {
            Changes::Watched(d) => d,
            Changes::Unwatched(why) => panic!("unwatched: {why}"),
        }
    }

    fn git_init(dir: &Path) {
        git2::Repository::init(dir).expect("git init");
    }

    const BACKENDS: [Backend; 2] = [Backend::Native, Backend::Portable];

    /// A backend about to give its watches back for idleness, and a reader in the moment
    /// before it says so: the reader must see a watcher that is not ready (and wait for the
    /// watches to be back), not send a cookie to an instance being closed and answer
    /// `rescan` two seconds later.
    #[test]
    fn a_reader_that_comes_as_the_watches_are_given_back_waits_for_them_instead_of_a_lost_cookie() {
        let watcher = Watcher::off("a shared state with no backend");
        let sub = watcher.subscribe();
        {
            let mut state = watcher.shared.lock();
            state.failed = None;
            state.ready = true;
            state.last_asked = Instant::now().checked_sub(idle_after() + Duration::from_secs(1));
        }
        assert!(watcher.shared.release_if_idle(), "no reader asked for longer than the idle time");
        assert!(sub.changes_if_ready().is_none(), "the watches are going: the reader waits for them");
        // Having asked, it is not idle: the backend that looks again keeps its watches.
        assert!(!watcher.shared.release_if_idle());
    }

    fn watcher(dir: &Path, backend: Backend) -> Watcher {
        Watcher::start_with(dir, &dir.join(".gm"), backend, |_| {})
    }

    #[test]
    fn a_write_just_before_the_call_is_in_its_changes() {
        for backend in BACKENDS {
            let dir = tempfile::tempdir().expect("tempdir");
            git_init(dir.path());
            std::fs::create_dir_all(dir.path().join("src/deep")).expect("mkdir");
            let w = watcher(dir.path(), backend);
            let sub = w.subscribe();
            assert!(changes_now(&sub).is_empty());
            // Many rounds: the event and the call race, and the cookie must always win.
            for i in 0..200 {
                let rel = format!("src/deep/f{}.txt", i % 7);
                std::fs::write(dir.path().join(&rel), format!("round {i}")).expect("write");
                let d = changes_now(&sub);
                assert!(d.paths.contains(&rel), "{backend:?} round {i}: {d:?}");
            }
        }
    }

    #[test]
    fn a_new_directory_is_watched_and_its_files_reported() {
        for backend in BACKENDS {
            let dir = tempfile::tempdir().expect("tempdir");
            git_init(dir.path());
            let w = watcher(dir.path(), backend);
            let sub = w.subscribe();
            changes_now(&sub);
            std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
            std::fs::write(dir.path().join("a/b/x.txt"), "x").expect("write");
            let d = changes_now(&sub);
            assert!(d.paths.iter().any(|p| p == "a" || p == "a/b" || p == "a/b/x.txt"), "{d:?}");
            // The new directory is watched now: a later write in it is reported by name.
            std::fs::write(dir.path().join("a/b/x.txt"), "y").expect("write");
            let d = changes_now(&sub);
            assert!(d.paths.contains("a/b/x.txt"), "{backend:?}: {d:?}");
        }
    }

    #[test]
    fn git_add_says_the_tracked_set_changed_and_gm_state_is_not_reported() {
        for backend in BACKENDS {
            let dir = tempfile::tempdir().expect("tempdir");
            git_init(dir.path());
            std::fs::write(dir.path().join("a.txt"), "a").expect("write");
            let w = watcher(dir.path(), backend);
            let sub = w.subscribe();
            changes_now(&sub);
            let status = std::process::Command::new("git")
                .args(["add", "a.txt"])
                .current_dir(dir.path())
                .status()
                .expect("git add");
            assert!(status.success());
            std::fs::write(dir.path().join(".gm/log.jsonl"), "{}").expect("write");
            let d = changes_now(&sub);
            assert!(d.tracked, "{d:?}");
            assert!(d.paths.iter().all(|p| !p.starts_with(".gm") && !p.starts_with(".git")), "{d:?}");
        }
    }

    #[test]
    fn ignored_directories_are_not_watched() {
        for backend in BACKENDS {
            let dir = tempfile::tempdir().expect("tempdir");
            git_init(dir.path());
            std::fs::write(dir.path().join(".gitignore"), "target/\n").expect("write");
            std::fs::create_dir_all(dir.path().join("target/debug")).expect("mkdir");
            let w = watcher(dir.path(), backend);
            let sub = w.subscribe();
            changes_now(&sub);
            std::fs::write(dir.path().join("target/debug/out.o"), "x").expect("write");
            std::fs::create_dir_all(dir.path().join("target/new")).expect("mkdir");
            std::fs::write(dir.path().join("target/new/y.o"), "x").expect("write");
            let d = changes_now(&sub);
            assert!(d.paths.iter().all(|p| !p.starts_with("target/")), "{d:?}");
        }
    }

    #[test]
    fn each_subscriber_takes_its_own_changes() {
        for backend in BACKENDS {
            let dir = tempfile::tempdir().expect("tempdir");
            let w = watcher(dir.path(), backend);
            let (a, b) = (w.subscribe(), w.subscribe());
            changes_now(&a);
            changes_now(&b);
            std::fs::write(dir.path().join("f.txt"), "1").expect("write");
            assert!(changes_now(&a).paths.contains("f.txt"));
            let again = changes_now(&a);
            assert!(again.paths.is_empty(), "{backend:?}: {again:?}");
            assert!(changes_now(&b).paths.contains("f.txt"));
        }
    }

    #[test]
    fn a_watcher_turned_off_says_why() {
        let w = Watcher::off("no watcher in the one-shot CLI");
        match w.subscribe().changes() {
            Changes::Unwatched(why) => assert!(why.contains("one-shot")),
            Changes::Watched(d) => panic!("watched: {d:?}"),
        }
    }
}

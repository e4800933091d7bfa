//! A build the Updater staged that cannot start a worker is not kept. The Updater already runs
//! a new build's `gm --version` before it switches `current`; a build can still pass that and
//! fail as a worker (a library it loads later, a bad default). When a relay that starts its
//! workers through `~/.gmnew/current/gm` sees two starts in a row fail while `current` is a
//! build the Updater staged, it marks that version bad (never staged again), points `current`
//! back at `previous`, and starts that; the next worker logs the rollback as an `update` event.

use std::path::Path;

use gm_actors::builds;
use gm_actors::updater::state;
use serde_json::{json, Value};

/// Failed starts in a row after which a build the Updater staged is rolled back.
pub const FAILED_STARTS: usize = 2;

/// Whether a failed start of `exe` could be a bad update: `exe` is `~/.gmnew/current/gm` and
/// `current` is a build the Updater staged.
pub fn is_update(exe: &Path) -> bool {
    let Ok(root) = builds::root() else { return false };
    exe == builds::current_exe_path(&root) && state::staged_by_updater(&root).is_some()
}

/// Rolls back the build `current` points at, when the Updater staged it: the `update` event's
/// fields for the next worker to log, or `None` when there was nothing to roll back.
pub fn roll_back(exe: &Path, causes: &[String]) -> Option<Value> {
    let root = builds::root().ok()?;
    if exe != builds::current_exe_path(&root) {
        return None;
    }
    let version = state::staged_by_updater(&root)?;
    let marked = state::mark_bad(&root, &version, causes).err().map(|e| e.to_string());
    match builds::roll_back(&root) {
        Ok(done) => Some(json!({
            "kind": "update",
            "status": "rolled-back",
            "from": version,
            "to": done.to,
            "causes": causes,
            "markBadFailed": marked,
        })),
        Err(e) => {
            gm_actors::stderr_line!("gm: the build {version} does not start and cannot be rolled back: {e}");
            None
        }
    }
}

//! A diff as a verb shows it: per-file stats and the patch text.

use std::path::Path;

use git2::{Diff, DiffFormat};
use serde::Serialize;
use serde_json::{json, Value};

use super::GitError;

/// Inline bytes of a diff's patch text; past this the reply keeps the head and spills the rest.
pub const INLINE_PATCH: usize = 32 * 1024;

#[derive(Debug, Serialize)]
pub struct DiffSummary {
    pub files: Vec<Value>,
    pub insertions: usize,
    pub deletions: usize,
    pub patch: String,
    /// Bytes of the patch left out of `patch`; the whole is in `patchFile`.
    #[serde(rename = "patchCut")]
    pub patch_cut: usize,
    #[serde(rename = "patchFile", skip_serializing_if = "Option::is_none")]
    pub patch_file: Option<String>,
}

/// A diff's per-file stats and its patch text; a patch longer than [`INLINE_PATCH`] keeps its
/// head and is saved whole to a file of its own in `out_dir`.
pub fn describe(diff: &Diff, out_dir: &Path) -> Result<DiffSummary, GitError> {
    let stats = diff.stats()?;
    let mut files = Vec::new();
    for (i, d) in diff.deltas().enumerate() {
        let path = d.new_file().path().or_else(|| d.old_file().path()).map(|p| p.to_string_lossy().into_owned());
        let (mut add, mut del) = (0, 0);
        if let Ok(Some(p)) = git2::Patch::from_diff(diff, i) {
            if let Ok((_, a, r)) = p.line_stats() {
                add = a;
                del = r;
            }
        }
        files.push(json!({ "path": path, "status": format!("{:?}", d.status()).to_lowercase(), "insertions": add, "deletions": del }));
    }
    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    let whole = String::from_utf8_lossy(&patch).into_owned();
    let (text, cut, file) = if whole.len() > INLINE_PATCH {
        let path = crate::verbs::out::unique_path(out_dir, "diff", ".patch");
        let saved = gm_actors::state_file::write_new(&path, whole.as_bytes()).is_ok();
        let keep = crate::text::head(&whole, INLINE_PATCH).len();
        (whole[..keep].to_owned(), whole.len() - keep, saved.then(|| path.to_string_lossy().into_owned()))
    } else {
        (whole, 0, None)
    };
    Ok(DiffSummary {
        files,
        insertions: stats.insertions(),
        deletions: stats.deletions(),
        patch: text,
        patch_cut: cut,
        patch_file: file,
    })
}

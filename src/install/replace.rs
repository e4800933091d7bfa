//! Rewriting a file another program may be writing at the same time (Claude Code rewrites
//! `~/.claude.json` whenever its state changes). The new content goes to a temporary file
//! beside the target and is synced; the target is read again just before the rename, and when
//! it changed since it was read the edit is made again from what it holds now, so the other
//! writer's change is merged rather than lost. The window left is between that second read and
//! the rename, a few microseconds instead of the whole edit.

use std::fs;
use std::io;
use std::path::Path;

use super::InstallError;

/// Times the edit is made again before giving up on a file that keeps changing.
const ATTEMPTS: usize = 5;

/// What an edit of the file's text decided.
pub enum Edit {
    /// The file already says what it should: nothing is written.
    Unchanged,
    Write(String),
}

/// Runs `edit` on the text of `path` (`None`: no such file) and writes what it returns, as
/// described above. `after_write` runs once the temporary file is written and synced, before
/// the target is read again (tests change the target there). Returns whether anything was
/// written.
pub fn rewrite(
    path: &Path,
    mut edit: impl FnMut(Option<&str>) -> Result<Edit, InstallError>,
    after_write: &mut dyn FnMut(&Path),
) -> Result<bool, InstallError> {
    let io_err = |source| InstallError::Io { path: path.to_owned(), source };
    for _ in 0..ATTEMPTS {
        let before = read_text(path)?;
        let Edit::Write(new) = edit(before.as_deref())? else { return Ok(false) };
        // The user's file keeps its permissions; a new one is owner-only.
        let mode = match before {
            Some(_) => fs::metadata(path).ok().and_then(|m| gm_actors::sys::permission_bits(&m)),
            None => Some(0o600),
        };
        let staged = gm_actors::fs::Staged::write(path, new.as_bytes(), mode, true).map_err(io_err)?;
        after_write(path);
        if read_text(path)? != before {
            // Dropping the staged file removes it.
            continue;
        }
        staged.commit().map_err(io_err)?;
        return Ok(true);
    }
    Err(InstallError::KeptChanging { path: path.to_owned(), attempts: ATTEMPTS })
}

/// The file's text; `None` when there is no such file.
pub fn read_text(path: &Path) -> Result<Option<String>, InstallError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(InstallError::Io { path: path.to_owned(), source }),
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| InstallError::NotUtf8 { path: path.to_owned(), why: e.utf8_error().to_string() })
}

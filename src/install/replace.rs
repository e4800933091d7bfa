//! Rewriting a file another program may be writing at the same time (Claude Code rewrites
//! `~/.claude.json` whenever its state changes). The new content goes to a temporary file
//! beside the target and is synced; the target is read again just before the rename, and when
//! it changed since it was read the edit is made again from what it holds now, so the other
//! writer's change is merged rather than lost. The window left is between that second read and
//! the rename, a few microseconds instead of the whole edit.

use std::fs;
use std::io::{self, Write};
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
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    for _ in 0..ATTEMPTS {
        let before = read_text(path)?;
        let Edit::Write(new) = edit(before.as_deref())? else { return Ok(false) };

        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".gm-tmp")
            .tempfile_in(dir)
            .map_err(|source| InstallError::Io { path: dir.to_owned(), source })?;
        tmp.write_all(new.as_bytes()).map_err(io_err)?;
        if before.is_some() {
            // The user's file keeps its permissions (a new one stays owner-only, as tempfile
            // makes it).
            if let Ok(meta) = fs::metadata(path) {
                tmp.as_file().set_permissions(meta.permissions()).map_err(io_err)?;
            }
        }
        tmp.as_file().sync_all().map_err(io_err)?;
        after_write(path);

        if read_text(path)? != before {
            // Dropping the temporary file removes it.
            continue;
        }
        tmp.persist(path).map_err(|e| io_err(e.error))?;
        sync_dir(dir);
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

/// Syncs the rename itself. Best effort: a folder cannot be opened for syncing everywhere
/// (Windows), and the data is already synced.
fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

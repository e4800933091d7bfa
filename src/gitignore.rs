//! Git and gm's files. gm's own folder ignores itself: `.gm/.gitignore` holds `*` (as Python's
//! virtual environments and pytest's cache do), so the workspace's tracked `.gitignore` is never
//! changed for gm. A child server's `ignore` lines are the one thing gm adds to the workspace's
//! `.gitignore`: existing lines and their line endings are kept, nothing is removed, and a line
//! already there is not added again.

use std::path::Path;

/// What `.gm/.gitignore` holds: everything in the folder, the file itself included.
pub const OWN_FOLDER_RULE: &str = "*\n";

/// Whether [`ignore_own_folder`] wrote the file.
#[derive(Debug, PartialEq)]
pub enum OwnFolder {
    Created,
    /// A `.gitignore` is there already (gm's, or one the user wrote to share part of the
    /// folder); it is left as it is.
    AlreadyThere,
    /// There is no state folder yet; nothing was written.
    NoFolder,
}

/// Gives gm's state folder (`<workspace>/.gm`) a `.gitignore` that ignores the whole folder,
/// unless it has one. Written whole through a temporary file, so a reader never sees half.
pub fn ignore_own_folder(state_dir: &Path) -> std::io::Result<OwnFolder> {
    if !state_dir.is_dir() {
        return Ok(OwnFolder::NoFolder);
    }
    let path = state_dir.join(".gitignore");
    if std::fs::symlink_metadata(&path).is_ok() {
        return Ok(OwnFolder::AlreadyThere);
    }
    gm_actors::fs::replace(&path, OWN_FOLDER_RULE.as_bytes())?;
    Ok(OwnFolder::Created)
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The lines that were appended (empty: all were there already).
    Added(Vec<String>),
    /// The workspace is not a git repository; nothing was written.
    NotARepository,
}

/// Ensures every line of `lines` is in `<workspace>/.gitignore`.
pub fn ensure(workspace: &Path, lines: &[&str]) -> std::io::Result<Outcome> {
    if !workspace.join(".git").exists() {
        return Ok(Outcome::NotARepository);
    }
    let path = workspace.join(".gitignore");
    let existing = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let present: Vec<&str> = existing.lines().map(str::trim_end).collect();
    let missing: Vec<String> = lines.iter().filter(|l| !present.contains(l)).map(|l| l.to_string()).collect();
    if missing.is_empty() {
        return Ok(Outcome::Added(missing));
    }
    let eol = if existing.contains("\r\n") { "\r\n" } else { "\n" };
    let mut text = existing.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push_str(eol);
    }
    for line in &missing {
        text.push_str(line);
        text.push_str(eol);
    }
    gm_actors::fs::replace(&path, text.as_bytes())?;
    Ok(Outcome::Added(missing))
}

/// [`ignore_own_folder`] at gm's start: the `gitignore` event's fields when it wrote the file
/// or could not.
pub fn own_folder_event(state_dir: &Path) -> Option<serde_json::Value> {
    match ignore_own_folder(state_dir) {
        Ok(OwnFolder::Created) => Some(serde_json::json!({ "file": ".gm/.gitignore", "state": "created" })),
        Ok(_) => None,
        Err(e) => Some(serde_json::json!({ "file": ".gm/.gitignore", "state": "failed", "error": e.to_string() })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_folder_gets_a_gitignore_of_its_own_once_and_a_users_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join(".gm");
        assert_eq!(ignore_own_folder(&state).expect("no folder"), OwnFolder::NoFolder);
        assert!(!state.exists(), "the folder is not made here");
        std::fs::create_dir(&state).expect("mkdir");
        assert_eq!(ignore_own_folder(&state).expect("create"), OwnFolder::Created);
        assert_eq!(std::fs::read_to_string(state.join(".gitignore")).expect("read"), "*\n");
        std::fs::write(state.join(".gitignore"), "*\n!wiki/\n").expect("the user's own");
        assert_eq!(ignore_own_folder(&state).expect("again"), OwnFolder::AlreadyThere);
        assert_eq!(std::fs::read_to_string(state.join(".gitignore")).expect("read"), "*\n!wiki/\n");
        assert!(!dir.path().join(".gitignore").exists(), "the workspace's .gitignore is not touched");
    }

    #[test]
    fn appends_missing_lines_keeping_crlf_and_existing_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".git")).expect("git dir");
        std::fs::write(dir.path().join(".gitignore"), "target\r\n/x").expect("write");
        let out = ensure(dir.path(), &["/x", ".gm/secrets.env"]).expect("ensure");
        assert_eq!(out, Outcome::Added(vec![".gm/secrets.env".into()]));
        let text = std::fs::read_to_string(dir.path().join(".gitignore")).expect("read");
        assert_eq!(text, "target\r\n/x\r\n.gm/secrets.env\r\n");
        assert_eq!(ensure(dir.path(), &[".gm/secrets.env"]).expect("again"), Outcome::Added(vec![]));
    }

    #[test]
    fn a_directory_that_is_not_a_repository_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(ensure(dir.path(), &["a"]).expect("ensure"), Outcome::NotARepository);
        assert!(!dir.path().join(".gitignore").exists());
    }
}

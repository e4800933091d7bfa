//! Adds lines to a workspace's `.gitignore`: existing lines and their line endings are kept,
//! nothing is removed, and a line already there is not added again.

use std::path::Path;

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

#[cfg(test)]
mod tests {
    use super::*;

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

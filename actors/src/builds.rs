//! The builds installed under `~/.gmnew`: `versions/<version>/` holds each whole build (the
//! binary, `skills/`, `defaults/`, `build.json`), `current` points at the one hosts start and
//! `previous` at the one before it. `gm install --local` and the updater both stage through
//! [`stage`], so a build lands the same way whichever brought it.
//!
//! A build is never changed in place: it is copied into a fresh folder beside the versions and
//! renamed into place, and the pointer is switched by renaming a new link over the old one. A
//! gm already running keeps its open binary and the folder it read its skills from.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::sys;

/// This build's version (the workspace's `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The target triple this build was compiled for.
pub const TARGET: &str = env!("GM_TARGET");
/// The binary's file name in a build folder.
pub const EXE: &str = if cfg!(windows) { "gm.exe" } else { "gm" };
/// The file that says what a build folder holds; `gm dist` writes it with `release: true`.
pub const BUILD_FILE: &str = "build.json";

/// The parts of a build besides the binary and `build.json`, copied when present.
const PARTS: [&str; 4] = ["skills", "defaults", "README.md", "LICENSE"];
/// Staged versions kept, newest first (current and previous among them).
const KEEP_VERSIONS: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0} holds no {EXE}: not a gm build")]
    NoBinary(PathBuf),
    #[error("{path}: build.json is not valid: {why}")]
    BadBuildFile { path: PathBuf, why: String },
    #[error("cannot tell the version of {path}: {why}")]
    UnknownVersion { path: PathBuf, why: String },
    #[error("{path} is a build for {target}; this machine runs {TARGET}")]
    WrongTarget { path: PathBuf, target: String },
    #[error("no home directory (HOME is not set)")]
    NoHome,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BuildError + '_ {
    move |source| BuildError::Io { path: path.to_path_buf(), source }
}

/// What `build.json` says about a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    pub version: String,
    pub target: String,
    /// True only for a build packaged by `gm dist`; a development build never updates itself.
    #[serde(default)]
    pub release: bool,
}

impl BuildInfo {
    /// The `build.json` in `dir`, or None when there is none.
    pub fn read(dir: &Path) -> Result<Option<BuildInfo>, BuildError> {
        let path = dir.join(BUILD_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(BuildError::Io { path, source: e }),
        };
        let info: BuildInfo = serde_json::from_str(&text)
            .map_err(|e| BuildError::BadBuildFile { path: path.clone(), why: e.to_string() })?;
        if !valid_version(&info.version) {
            return Err(BuildError::BadBuildFile { path, why: format!("version {:?} is not a version", info.version) });
        }
        Ok(Some(info))
    }

    /// The running build: its `build.json` when that describes this very binary (same version
    /// and target), else a development build.
    pub fn running() -> BuildInfo {
        let dev = BuildInfo { version: VERSION.into(), target: TARGET.into(), release: false };
        let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) else {
            return dev;
        };
        match BuildInfo::read(&dir) {
            Ok(Some(info)) if info.version == VERSION && info.target == TARGET => info,
            _ => dev,
        }
    }
}

/// `~/.gmnew`, where builds are installed.
pub fn root() -> Result<PathBuf, BuildError> {
    sys::home_dir().map(|h| h.join(".gmnew")).ok_or(BuildError::NoHome)
}

/// The binary hosts are registered with: `<root>/current/gm`, which follows the pointer.
pub fn current_exe_path(root: &Path) -> PathBuf {
    root.join("current").join(EXE)
}

/// Whether `exe` is the binary of a build staged under `<root>/versions/<version>/`.
pub fn is_staged_binary(exe: &Path, root: &Path) -> bool {
    let (Ok(exe), Ok(versions)) = (fs::canonicalize(exe), fs::canonicalize(root.join("versions"))) else {
        return false;
    };
    exe.file_name() == Some(EXE.as_ref()) && exe.parent().and_then(Path::parent) == Some(versions.as_path())
}

/// The result of [`stage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub version: String,
    /// `<root>/versions/<version>`.
    pub dir: PathBuf,
    /// False when this very build was already staged and current: nothing was written.
    pub changed: bool,
}

/// Copies the build in `src` (an unpacked archive, or a checkout's `target/<profile>`, whose
/// `skills/` and `defaults/` are found one or two levels up, as gm finds them at run time) to
/// `<root>/versions/<version>/` and points `<root>/current` at it, keeping the build it
/// pointed at as `<root>/previous`. Staging the build that is already current changes nothing.
pub fn stage(src: &Path, root: &Path) -> Result<Staged, BuildError> {
    let exe = src.join(EXE);
    if !exe.is_file() {
        return Err(BuildError::NoBinary(src.to_path_buf()));
    }
    let info = BuildInfo::read(src)?;
    if let Some(other) = info.as_ref().map(|i| &i.target).filter(|t| t.as_str() != TARGET) {
        return Err(BuildError::WrongTarget { path: src.to_path_buf(), target: other.clone() });
    }
    let version = match &info {
        Some(i) => i.version.clone(),
        None => version_of_binary(&exe)?,
    };
    let files = build_files(src)?;
    let versions = root.join("versions");
    fs::create_dir_all(&versions).map_err(io_err(&versions))?;
    let dest = versions.join(&version);

    let mut changed = false;
    if !(dest.is_dir() && same_tree(&files, &dest)?) {
        let tmp = unique_path(&versions, ".staging");
        copy_build(&files, &tmp)?;
        if dest.exists() {
            // A different build under the same version (a rebuilt checkout): move the old one
            // aside first; a gm running from it keeps its open files.
            let old = unique_path(&versions, ".replaced");
            fs::rename(&dest, &old).map_err(io_err(&dest))?;
            let _ = fs::remove_dir_all(&old);
        }
        fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
        changed = true;
    }

    let link = root.join("current");
    let target = Path::new("versions").join(&version);
    let pointed = fs::read_link(&link).ok();
    if pointed.as_deref() != Some(target.as_path()) {
        if let Some(old) = pointed {
            sys::point_link(root, &root.join("previous"), &old).map_err(io_err(&root.join("previous")))?;
        }
        sys::point_link(root, &link, &target).map_err(io_err(&link))?;
        changed = true;
    }
    prune(root, &versions);
    Ok(Staged { version, dir: dest, changed })
}

/// `<binary> --version` prints `gm <version>`.
fn version_of_binary(exe: &Path) -> Result<String, BuildError> {
    let unknown = |why: String| BuildError::UnknownVersion { path: exe.to_path_buf(), why };
    let out = std::process::Command::new(exe).arg("--version").output().map_err(|e| unknown(e.to_string()))?;
    if !out.status.success() {
        return Err(unknown(format!("--version exited with {}", out.status)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or_default().to_string();
    if valid_version(&version) {
        Ok(version)
    } else {
        Err(unknown(format!("--version printed {:?}", text.trim())))
    }
}

/// A version is a folder name: no separators, no dots alone.
fn valid_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))
}

/// (name in the build, where it is now) for every part found.
fn build_files(src: &Path) -> Result<Vec<(String, PathBuf)>, BuildError> {
    let mut files = vec![(EXE.to_string(), src.join(EXE))];
    if src.join(BUILD_FILE).is_file() {
        files.push((BUILD_FILE.into(), src.join(BUILD_FILE)));
    }
    for part in PARTS {
        let found = [src.to_path_buf(), src.join(".."), src.join("../..")]
            .into_iter()
            .map(|d| d.join(part))
            .find(|p| p.exists());
        if let Some(path) = found {
            files.push((part.into(), path));
        }
    }
    Ok(files)
}

fn copy_build(files: &[(String, PathBuf)], dest: &Path) -> Result<(), BuildError> {
    let result = (|| {
        fs::create_dir_all(dest).map_err(io_err(dest))?;
        for (name, from) in files {
            copy_any(from, &dest.join(name))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(dest);
    }
    result
}

fn copy_any(from: &Path, to: &Path) -> Result<(), BuildError> {
    let meta = fs::metadata(from).map_err(io_err(from))?;
    if meta.is_dir() {
        fs::create_dir_all(to).map_err(io_err(to))?;
        for entry in fs::read_dir(from).map_err(io_err(from))? {
            let entry = entry.map_err(io_err(from))?;
            copy_any(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        // fs::copy keeps the permission bits, so the binary stays executable.
        fs::copy(from, to).map(|_| ()).map_err(io_err(from))
    }
}

/// Whether `dest` already holds exactly these files (by content), and nothing else.
fn same_tree(files: &[(String, PathBuf)], dest: &Path) -> Result<bool, BuildError> {
    let mut want = Vec::new();
    for (name, from) in files {
        digest_tree(from, Path::new(name), &mut want)?;
    }
    let mut have = Vec::new();
    for entry in fs::read_dir(dest).map_err(io_err(dest))? {
        let entry = entry.map_err(io_err(dest))?;
        digest_tree(&entry.path(), Path::new(&entry.file_name()), &mut have)?;
    }
    want.sort();
    have.sort();
    Ok(want == have)
}

fn digest_tree(path: &Path, name: &Path, out: &mut Vec<(PathBuf, [u8; 32])>) -> Result<(), BuildError> {
    let meta = fs::metadata(path).map_err(io_err(path))?;
    if meta.is_dir() {
        for entry in fs::read_dir(path).map_err(io_err(path))? {
            let entry = entry.map_err(io_err(path))?;
            digest_tree(&entry.path(), &name.join(entry.file_name()), out)?;
        }
    } else {
        let mut file = fs::File::open(path).map_err(io_err(path))?;
        let mut hasher = Sha256::new();
        io::copy(&mut file, &mut hasher).map_err(io_err(path))?;
        out.push((name.to_path_buf(), hasher.finalize().into()));
    }
    Ok(())
}

/// The SHA-256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, BuildError> {
    let mut file = fs::File::open(path).map_err(io_err(path))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(io_err(path))?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn unique_path(dir: &Path, prefix: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    dir.join(format!("{prefix}-{}-{nanos}", std::process::id()))
}

/// Removes staged versions beyond the newest [`KEEP_VERSIONS`], never the current or previous
/// one, and leftovers of a staging that was cut short.
fn prune(root: &Path, versions: &Path) {
    let keep: Vec<PathBuf> = ["current", "previous"]
        .iter()
        .filter_map(|l| fs::read_link(root.join(l)).ok())
        .filter_map(|t| t.file_name().map(PathBuf::from))
        .collect();
    let Ok(entries) = fs::read_dir(versions) else { return };
    let mut staged = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let stale = name.to_string_lossy().starts_with(".replaced-");
        if stale {
            let _ = fs::remove_dir_all(entry.path());
            continue;
        }
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let modified = entry.metadata().and_then(|m| m.modified()).ok();
        staged.push((modified, PathBuf::from(name)));
    }
    staged.sort_by_key(|s| std::cmp::Reverse(s.0));
    for (_, name) in staged.into_iter().skip(KEEP_VERSIONS) {
        if !keep.contains(&name) {
            let _ = fs::remove_dir_all(versions.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_build(dir: &Path, version: &str, body: &str) {
        fs::create_dir_all(dir.join("skills/gm")).unwrap();
        fs::write(dir.join(EXE), body).unwrap();
        fs::write(dir.join("skills/gm/SKILL.md"), "skill").unwrap();
        let info = BuildInfo { version: version.into(), target: TARGET.into(), release: true };
        fs::write(dir.join(BUILD_FILE), serde_json::to_string(&info).unwrap()).unwrap();
    }

    #[test]
    fn staging_copies_the_build_and_points_current_at_it() {
        let t = tempfile::tempdir().unwrap();
        let (src, root) = (t.path().join("src"), t.path().join("root"));
        fake_build(&src, "1.0.0", "one");
        let staged = stage(&src, &root).unwrap();
        assert!(staged.changed);
        assert_eq!(fs::read_to_string(root.join("current").join(EXE)).unwrap(), "one");
        assert_eq!(fs::read_to_string(root.join("current/skills/gm/SKILL.md")).unwrap(), "skill");
        assert!(!root.join("previous").exists());
    }

    #[test]
    fn staging_the_same_build_again_writes_nothing() {
        let t = tempfile::tempdir().unwrap();
        let (src, root) = (t.path().join("src"), t.path().join("root"));
        fake_build(&src, "1.0.0", "one");
        stage(&src, &root).unwrap();
        let before = fs::metadata(root.join("versions/1.0.0").join(EXE)).unwrap().modified().unwrap();
        let again = stage(&src, &root).unwrap();
        assert!(!again.changed);
        assert_eq!(fs::metadata(root.join("versions/1.0.0").join(EXE)).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn a_newer_build_keeps_the_one_before_as_previous() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        fake_build(&t.path().join("b"), "1.1.0", "two");
        stage(&t.path().join("a"), &root).unwrap();
        stage(&t.path().join("b"), &root).unwrap();
        assert_eq!(fs::read_to_string(root.join("current").join(EXE)).unwrap(), "two");
        assert_eq!(fs::read_to_string(root.join("previous").join(EXE)).unwrap(), "one");
    }

    #[test]
    fn only_the_binary_of_a_staged_version_is_a_staged_binary() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        stage(&t.path().join("a"), &root).unwrap();
        assert!(is_staged_binary(&root.join("versions/1.0.0").join(EXE), &root));
        assert!(is_staged_binary(&root.join("current").join(EXE), &root), "current resolves into versions/");
        assert!(!is_staged_binary(&t.path().join("a").join(EXE), &root));
        assert!(!is_staged_binary(&root.join("versions/1.0.0/skills/gm/SKILL.md"), &root));
    }

    #[test]
    fn a_folder_without_a_binary_is_refused_and_nothing_is_written() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir_all(t.path().join("empty")).unwrap();
        assert!(matches!(stage(&t.path().join("empty"), &root), Err(BuildError::NoBinary(_))));
        assert!(!root.exists());
    }

    #[test]
    fn a_build_for_another_target_is_refused_and_nothing_is_written() {
        let t = tempfile::tempdir().unwrap();
        let (src, root) = (t.path().join("src"), t.path().join("root"));
        fake_build(&src, "1.0.0", "one");
        fs::write(src.join(BUILD_FILE), r#"{"version":"1.0.0","target":"riscv64gc-unknown-linux-gnu","release":true}"#)
            .unwrap();
        assert!(matches!(stage(&src, &root), Err(BuildError::WrongTarget { .. })));
        assert!(!root.exists());
    }

    #[test]
    fn a_version_with_a_path_in_it_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fake_build(&src, "1.0.0", "one");
        fs::write(src.join(BUILD_FILE), r#"{"version":"../../etc","target":"x"}"#).unwrap();
        assert!(matches!(stage(&src, &t.path().join("root")), Err(BuildError::BadBuildFile { .. })));
    }
}

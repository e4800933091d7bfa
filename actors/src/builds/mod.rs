//! The builds installed under `~/.gmnew`: `versions/<version>/` holds each whole build (the
//! binary, `skills/`, `defaults/`, `build.json`), `current` points at the one hosts start and
//! `previous` at the one before it. `gm install --local` and the updater both stage through
//! [`stage`], so a build lands the same way whichever brought it.
//!
//! A build is never changed in place: it is copied into a fresh folder beside the versions and
//! renamed into place, and the pointer is switched by renaming a new link over the old one. A
//! gm already running keeps its open binary and the folder it read its skills from.
//!
//! A build becomes current only once it started here (its `gm --version`, see [`starts`]), and
//! all of this happens under one lock (`<root>/.lock`), so two gm processes never stage at once;
//! the copies a process that died mid-staging left behind are removed by the next one.

pub mod starts;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use semver::Version;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use starts::DoesNotStart;

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
/// The lock every change under the root is made under.
pub const LOCK_FILE: &str = ".lock";
/// The prefix of a build being copied into `versions/`.
const STAGING: &str = ".staging";

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
    #[error("the build does not start here: {0}")]
    DoesNotStart(#[from] DoesNotStart),
    #[error("{version} is older than {current}, the version current points at; gm never moves current back")]
    OlderThanCurrent { version: String, current: String },
    #[error("{0} has no previous build to go back to")]
    NoPrevious(PathBuf),
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
/// The build must start (its `gm --version` exits 0 within 10 s) before current moves; one
/// that does not leaves nothing behind. Any version may be staged: this is
/// `gm install --local`, the user's choice (the Updater stages with [`stage_update`]).
pub fn stage(src: &Path, root: &Path) -> Result<Staged, BuildError> {
    stage_with(src, root, false)
}

/// [`stage`] for the Updater, stricter: the build's `gm --version` must name the version it
/// claims (the manifest's, which its `build.json` was checked against), and a version lower
/// than the one `current` points at is refused (`OlderThanCurrent`), whatever the running
/// binary is.
pub fn stage_update(src: &Path, root: &Path) -> Result<Staged, BuildError> {
    stage_with(src, root, true)
}

/// Whether the build's binary starts: for the Updater it must also name `version`.
fn check_starts(exe: &Path, version: &str, for_updater: bool) -> Result<(), DoesNotStart> {
    if for_updater {
        starts::check(exe, version, starts::START_TIMEOUT)
    } else {
        starts::version_output(exe, starts::START_TIMEOUT).map(drop)
    }
}

fn stage_with(src: &Path, root: &Path, for_updater: bool) -> Result<Staged, BuildError> {
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
    let _lock = lock(root)?;
    remove_leftovers(&versions);
    if for_updater {
        if let Some(current) = current_version(root).filter(|c| is_older(&version, c)) {
            return Err(BuildError::OlderThanCurrent { version, current });
        }
    }
    let dest = versions.join(&version);
    let link = root.join("current");
    let target = Path::new("versions").join(&version);
    let pointed = fs::read_link(&link).ok();

    let mut changed = false;
    if !(dest.is_dir() && same_tree(&files, &dest)?) {
        let tmp = unique_path(&versions, STAGING);
        copy_build(&files, &tmp)?;
        if let Err(e) = check_starts(&tmp.join(EXE), &version, for_updater) {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e.into());
        }
        if dest.exists() {
            // A different build under the same version (a rebuilt checkout): move the old one
            // aside first; a gm running from it keeps its open files.
            let old = unique_path(&versions, ".replaced");
            fs::rename(&dest, &old).map_err(io_err(&dest))?;
            let _ = fs::remove_dir_all(&old);
        }
        fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
        changed = true;
    } else if pointed.as_deref() != Some(target.as_path()) {
        // Staged before (it may be `previous`): it must still start before it is current again.
        check_starts(&dest.join(EXE), &version, for_updater)?;
    }

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

/// The lock under which builds are staged, switched and recorded: `<root>/.lock`, held until
/// the guard is dropped. Take it once: a second take in the same thread waits for itself.
pub fn lock(root: &Path) -> Result<sys::FileLock, BuildError> {
    fs::create_dir_all(root).map_err(io_err(root))?;
    let path = root.join(LOCK_FILE);
    crate::state_file::lock_exclusive(&path).map_err(|e| BuildError::Io { path, source: e.into() })
}

/// The version `<root>/current` points at, if it points at a version.
pub fn current_version(root: &Path) -> Option<String> {
    link_version(root, "current")
}

/// The version `<root>/previous` points at, if any.
pub fn previous_version(root: &Path) -> Option<String> {
    link_version(root, "previous")
}

fn link_version(root: &Path, link: &str) -> Option<String> {
    let target = fs::read_link(root.join(link)).ok()?;
    let name = target.file_name()?.to_str()?.to_owned();
    valid_version(&name).then_some(name)
}

/// Whether `a` is a lower semantic version than `b`. Versions that are not semantic versions
/// are not ordered (never older).
fn is_older(a: &str, b: &str) -> bool {
    matches!((Version::parse(a), Version::parse(b)), (Ok(a), Ok(b)) if a < b)
}

/// What [`roll_back`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// The version current pointed at (None when it pointed at no version).
    pub from: Option<String>,
    /// The version it points at now.
    pub to: String,
}

/// Points `<root>/current` back at the build `<root>/previous` names and removes `previous`
/// (the build that was current is the one that failed: it is nobody's fallback). For the relay,
/// when a build the Updater staged does not start; it does not run the build it goes back to.
pub fn roll_back(root: &Path) -> Result<RolledBack, BuildError> {
    let _lock = lock(root)?;
    let previous = root.join("previous");
    let target = fs::read_link(&previous).map_err(|_| BuildError::NoPrevious(root.to_path_buf()))?;
    let to = link_version(root, "previous").ok_or_else(|| BuildError::NoPrevious(root.to_path_buf()))?;
    if !root.join(&target).join(EXE).is_file() {
        return Err(BuildError::NoPrevious(root.to_path_buf()));
    }
    let from = current_version(root);
    let link = root.join("current");
    sys::point_link(root, &link, &target).map_err(io_err(&link))?;
    fs::remove_file(&previous).map_err(io_err(&previous))?;
    Ok(RolledBack { from, to })
}

/// Removes the copies that staging processes which have since died left in `versions/`. Runs
/// under the lock, so no copy of a process that takes the lock is in progress; one of a live
/// process that does not (an older gm) is left alone.
fn remove_leftovers(versions: &Path) {
    let Ok(entries) = fs::read_dir(versions) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(STAGING)).and_then(|r| r.strip_prefix('-')) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let ours_or_dead = pid.is_none_or(|pid| pid == std::process::id() || !sys::process_exists(pid));
        if ours_or_dead {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// `<binary> --version` prints `gm <version>`.
fn version_of_binary(exe: &Path) -> Result<String, BuildError> {
    let unknown = |why: String| BuildError::UnknownVersion { path: exe.to_path_buf(), why };
    let text = starts::version_output(exe, starts::START_TIMEOUT).map_err(|e| unknown(e.to_string()))?;
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

/// Where a part of a build (`skills`, `defaults`, `README.md`...) is looked for around the folder
/// `dir` holding the binary: beside it, or one or two folders up (an unpacked archive holds them
/// beside `gm`; a checkout's `target/<profile>/gm` has them two folders up). Every way gm finds
/// its parts goes through here.
pub fn part_candidates(dir: &Path, part: &str) -> [PathBuf; 3] {
    [dir.join(part), dir.join("..").join(part), dir.join("../..").join(part)]
}

/// [`part_candidates`] around the running binary, then the checkout gm was built from
/// (`checkout`: the crate's manifest folder, for a binary moved out of its checkout).
pub fn running_part_candidates(part: &str, checkout: &Path) -> Vec<PathBuf> {
    let exe_dir = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf));
    let mut out: Vec<PathBuf> = exe_dir.iter().flat_map(|d| part_candidates(d, part)).collect();
    out.push(checkout.join(part));
    out
}

/// (name in the build, where it is now) for every part found.
fn build_files(src: &Path) -> Result<Vec<(String, PathBuf)>, BuildError> {
    let mut files = vec![(EXE.to_string(), src.join(EXE))];
    if src.join(BUILD_FILE).is_file() {
        files.push((BUILD_FILE.into(), src.join(BUILD_FILE)));
    }
    for part in PARTS {
        let found = part_candidates(src, part).into_iter().find(|p| p.exists());
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

    /// A build whose binary is a script answering `--version` as gm does; `body` marks it.
    fn fake_build(dir: &Path, version: &str, body: &str) {
        fs::create_dir_all(dir.join("skills/gm")).unwrap();
        fs::write(dir.join(EXE), format!("#!/bin/sh\n# {body}\necho gm {version}\n")).unwrap();
        #[cfg(unix)]
        fs::set_permissions(dir.join(EXE), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        fs::write(dir.join("skills/gm/SKILL.md"), "skill").unwrap();
        let info = BuildInfo { version: version.into(), target: TARGET.into(), release: true };
        fs::write(dir.join(BUILD_FILE), serde_json::to_string(&info).unwrap()).unwrap();
    }

    /// The mark `fake_build` put in a build's binary.
    fn marker(build: &Path) -> String {
        let text = fs::read_to_string(build.join(EXE)).unwrap();
        text.lines().find_map(|l| l.strip_prefix("# ")).unwrap_or_default().to_owned()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn staging_copies_the_build_and_points_current_at_it() {
        let t = tempfile::tempdir().unwrap();
        let (src, root) = (t.path().join("src"), t.path().join("root"));
        fake_build(&src, "1.0.0", "one");
        let staged = stage(&src, &root).unwrap();
        assert!(staged.changed);
        assert_eq!(marker(&root.join("current")), "one");
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
        assert_eq!(marker(&root.join("current")), "two");
        assert_eq!(marker(&root.join("previous")), "one");
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

    #[cfg(unix)]
    #[test]
    fn a_build_that_does_not_start_is_refused_and_nothing_is_switched_or_left_behind() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        stage(&t.path().join("a"), &root).unwrap();
        let bad = t.path().join("b");
        fake_build(&bad, "1.1.0", "two");
        fs::write(bad.join(EXE), "#!/bin/sh\necho 'GLIBC_2.99 not found' >&2\nexit 127\n").unwrap();
        let Err(BuildError::DoesNotStart(e)) = stage_update(&bad, &root) else { panic!("staged") };
        assert!(e.why.contains("exit code 127") && e.stderr.contains("GLIBC_2.99"), "{e}");
        assert_eq!(marker(&root.join("current")), "one");
        assert!(!root.join("previous").exists());
        assert_eq!(entries(&root.join("versions")), ["1.0.0"], "no copy is left");

        fake_build(&bad, "1.1.0", "two");
        fs::write(bad.join(EXE), "#!/bin/sh\nexit 127\n").unwrap();
        assert!(matches!(stage(&bad, &root), Err(BuildError::DoesNotStart(_))), "gm install --local checks it too");

        // For the Updater, a build that prints another version than it claims does not start
        // either; a user's own build (gm install --local) only has to start.
        fake_build(&bad, "1.1.0", "two");
        fs::write(bad.join(EXE), "#!/bin/sh\necho gm 1.0.0\n").unwrap();
        assert!(matches!(stage_update(&bad, &root), Err(BuildError::DoesNotStart(_))));
        assert_eq!(entries(&root.join("versions")), ["1.0.0"]);
        stage(&bad, &root).unwrap();
        assert_eq!(current_version(&root).as_deref(), Some("1.1.0"));
    }

    #[test]
    fn the_updater_never_moves_current_to_a_lower_version_but_a_user_may() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("new"), "0.4.0", "new");
        fake_build(&t.path().join("old"), "0.3.0", "old");
        stage(&t.path().join("new"), &root).unwrap();
        let r = stage_update(&t.path().join("old"), &root);
        assert!(
            matches!(&r, Err(BuildError::OlderThanCurrent { version, current }) if version == "0.3.0" && current == "0.4.0"),
            "{r:?}"
        );
        assert_eq!(current_version(&root).as_deref(), Some("0.4.0"));
        assert_eq!(entries(&root.join("versions")), ["0.4.0"]);
        // `gm install --local` of an older build: the user asked for it.
        stage(&t.path().join("old"), &root).unwrap();
        assert_eq!(current_version(&root).as_deref(), Some("0.3.0"));
        assert_eq!(previous_version(&root).as_deref(), Some("0.4.0"));
        // Versions compare as numbers: 0.10.0 is newer than 0.9.0.
        fake_build(&t.path().join("ten"), "0.10.0", "ten");
        stage_update(&t.path().join("ten"), &root).unwrap();
        assert_eq!(current_version(&root).as_deref(), Some("0.10.0"));
    }

    #[test]
    fn rolling_back_points_current_at_previous_and_forgets_previous() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        assert!(matches!(roll_back(&root), Err(BuildError::NoPrevious(_))), "nothing to go back to");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        fake_build(&t.path().join("b"), "1.1.0", "two");
        stage(&t.path().join("a"), &root).unwrap();
        assert!(matches!(roll_back(&root), Err(BuildError::NoPrevious(_))), "a first build has no previous");
        stage(&t.path().join("b"), &root).unwrap();
        let back = roll_back(&root).unwrap();
        assert_eq!(back, RolledBack { from: Some("1.1.0".into()), to: "1.0.0".into() });
        assert_eq!(marker(&root.join("current")), "one");
        assert!(fs::symlink_metadata(root.join("previous")).is_err(), "previous is gone");
        assert!(matches!(roll_back(&root), Err(BuildError::NoPrevious(_))), "and cannot be gone back to twice");
        assert!(root.join("versions/1.1.0").is_dir(), "the failed build stays until it is pruned");
    }

    #[test]
    fn a_previous_build_whose_folder_is_gone_is_not_rolled_back_to() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        fake_build(&t.path().join("b"), "1.1.0", "two");
        stage(&t.path().join("a"), &root).unwrap();
        stage(&t.path().join("b"), &root).unwrap();
        fs::remove_dir_all(root.join("versions/1.0.0")).unwrap();
        assert!(matches!(roll_back(&root), Err(BuildError::NoPrevious(_))));
        assert_eq!(current_version(&root).as_deref(), Some("1.1.0"), "current stays");
    }

    #[test]
    fn staging_waits_for_the_lock_another_holder_has() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fake_build(&t.path().join("a"), "1.0.0", "one");
        let held = lock(&root).unwrap();
        let (src, r) = (t.path().join("a"), root.clone());
        let (done_tx, done) = std::sync::mpsc::channel();
        let staging = std::thread::spawn(move || {
            let out = stage(&src, &r);
            let _ = done_tx.send(());
            out
        });
        assert!(done.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "staged while the lock was held");
        assert!(!root.join("current").exists());
        drop(held);
        done.recv_timeout(std::time::Duration::from_secs(30)).expect("staged once the lock was free");
        staging.join().unwrap().unwrap();
        assert_eq!(marker(&root.join("current")), "one");
    }

    #[test]
    fn two_stagings_at_once_both_succeed_and_leave_nothing_behind() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        for (name, version) in [("a", "1.0.0"), ("b", "1.1.0")] {
            fake_build(&t.path().join(name), version, name);
        }
        for _ in 0..5 {
            let threads: Vec<_> = ["a", "b", "a", "b"]
                .into_iter()
                .map(|name| {
                    let (src, root) = (t.path().join(name), root.clone());
                    std::thread::spawn(move || stage(&src, &root))
                })
                .collect();
            for th in threads {
                th.join().unwrap().unwrap();
            }
            assert_eq!(entries(&root.join("versions")), ["1.0.0", "1.1.0"]);
            assert!(["a", "b"].contains(&marker(&root.join("current")).as_str()));
        }
    }

    #[test]
    fn copies_left_by_a_dead_staging_process_are_removed_and_a_live_ones_kept() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let versions = root.join("versions");
        // No process has pid 2^31-2 (pids stay below 2^22 on Linux); pid 1 is always alive.
        let dead = versions.join(format!("{STAGING}-{}-5", i32::MAX - 1));
        let live = versions.join(format!("{STAGING}-1-5"));
        for d in [&dead, &live] {
            fs::create_dir_all(d.join("skills")).unwrap();
        }
        fake_build(&t.path().join("a"), "1.0.0", "one");
        stage(&t.path().join("a"), &root).unwrap();
        assert!(!dead.exists(), "a dead process's copy is removed");
        assert!(live.exists(), "a live process's copy is left alone");
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

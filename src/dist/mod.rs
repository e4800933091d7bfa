//! `gm dist`: packages the running build as a release archive,
//! `<out>/gmnew-<version>-<target>.tar.gz`, holding one folder of that name with the binary
//! stripped of its debug info, `build.json` saying it is a release build, `skills/`,
//! `defaults/`, `README.md` and `LICENSE`. The debug info goes beside the archive
//! (`<name>.debug`), and the archive's entry goes into `<out>/manifest.json`.
//!
//! The parts are found the way gm finds them when it runs (beside the binary, one or two
//! levels up, or the checkout it was built from), so the archive holds what this build serves.
//! With `--sign KEY` the archive is signed (`sign.rs`), which the updater requires.

mod debug_info;
pub mod manifest;
pub mod sign;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use gm_actors::builds::{self, BuildError, BuildInfo, BUILD_FILE, EXE, TARGET, VERSION};
use serde::Serialize;

pub use manifest::{compare_versions, Manifest, TargetEntry};

/// Where `gm dist` writes unless `--out` says otherwise.
pub const DEFAULT_OUT: &str = "dist";

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot tell where this gm binary is: {0}")]
    CurrentExe(io::Error),
    #[error("{0} not found beside gm, one or two folders up, or in the checkout it was built from")]
    Missing(&'static str),
    #[error("{tool} is needed to split off the debug info and was not found: {hint}")]
    ToolMissing { tool: &'static str, hint: &'static str },
    #[error("{tool} failed: {why}")]
    Tool { tool: &'static str, why: String },
    #[error("{path}: not a manifest ({why}); refused, the file is left as it was")]
    Manifest { path: PathBuf, why: String },
    #[error("--sign {path}: not a usable minisign secret key: {why}; nothing was packaged")]
    SigningKey { path: PathBuf, why: String },
    #[error("cannot sign {path}: {why}")]
    Sign { path: PathBuf, why: String },
    #[error(transparent)]
    Build(#[from] BuildError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DistError + '_ {
    move |source| DistError::Io { path: path.to_owned(), source }
}

/// What `gm dist` made, printed as JSON.
#[derive(Debug, Serialize)]
pub struct DistReport {
    pub version: String,
    pub target: String,
    pub archive: PathBuf,
    pub sha256: String,
    /// The archive's size in bytes.
    pub size: u64,
    /// The stripped binary's size in bytes, and the running one's.
    pub binary_size: u64,
    pub unstripped_size: u64,
    /// The debug info split off the binary, when there was any to keep.
    pub debug: Option<PathBuf>,
    pub manifest: PathBuf,
    /// The archive's signature, with `--sign`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<sign::SignatureReport>,
}

/// The archive's name without its extension, which is also its one top folder.
pub fn archive_stem() -> String {
    format!("gmnew-{VERSION}-{TARGET}")
}

/// `gm dist --out <out> [--sign <secret key file>]`.
pub fn dist(out: &Path, sign_with: Option<&Path>) -> Result<DistReport, DistError> {
    // A key that cannot sign is said before anything is packaged.
    let key = sign_with.map(sign::SigningKey::read).transpose()?;
    let out = &std::path::absolute(out).map_err(io_err(out))?;
    let exe = std::env::current_exe().map_err(DistError::CurrentExe)?;
    let parts = Parts::locate()?;
    fs::create_dir_all(out).map_err(io_err(out))?;
    let stem = archive_stem();

    // The stripped copy is made in a scratch folder inside `out`, removed on every path out.
    let scratch = tempfile::Builder::new().prefix(".gm-dist-").tempdir_in(out).map_err(io_err(out))?;
    let bin = scratch.path().join(EXE);
    fs::copy(&exe, &bin).map_err(io_err(&exe))?;
    let debug = out.join(format!("{stem}.debug"));
    let debug = debug_info::split(&bin, &exe, &debug)?.then_some(debug);

    let info = BuildInfo { version: VERSION.into(), target: TARGET.into(), release: true };
    let info_file = scratch.path().join(BUILD_FILE);
    let info =
        serde_json::to_vec_pretty(&info).map_err(|e| DistError::Io { path: info_file.clone(), source: e.into() })?;
    fs::write(&info_file, info).map_err(io_err(&info_file))?;

    let archive = out.join(format!("{stem}.tar.gz"));
    let partial = scratch.path().join("archive.tar.gz");
    write_archive(&partial, &stem, scratch.path(), &parts)?;
    fs::rename(&partial, &archive).map_err(io_err(&archive))?;

    let size = fs::metadata(&archive).map_err(io_err(&archive))?.len();
    let sha256 = builds::sha256_file(&archive)?;
    let file_name = archive.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let signed = match &key {
        Some(key) => Some(key.sign(&archive, &format!("gm {VERSION} {TARGET}"))?),
        None => None,
    };
    let entry = TargetEntry {
        version: VERSION.into(),
        archive: file_name,
        sha256: sha256.clone(),
        size,
        signature: signed.as_ref().map(|(text, _)| text.clone()),
        other: Default::default(),
    };
    let manifest = out.join(manifest::FILE);
    manifest::add_target(&manifest, TARGET, entry)?;
    Ok(DistReport {
        version: VERSION.into(),
        target: TARGET.into(),
        archive,
        sha256,
        size,
        binary_size: fs::metadata(&bin).map_err(io_err(&bin))?.len(),
        unstripped_size: fs::metadata(&exe).map_err(io_err(&exe))?.len(),
        debug,
        manifest,
        signature: signed.map(|(_, report)| report),
    })
}

/// The folders and files an archive carries besides the binary and `build.json`.
struct Parts {
    /// (name in the archive, where it is)
    found: Vec<(&'static str, PathBuf)>,
}

impl Parts {
    fn locate() -> Result<Parts, DistError> {
        let skills =
            crate::skills::Skills::locate().dir().map(Path::to_path_buf).ok_or(DistError::Missing("skills/"))?;
        let defaults = crate::mcp_config::defaults_file()
            .and_then(|f| f.parent().map(Path::to_path_buf))
            .ok_or(DistError::Missing("defaults/mcp.json"))?;
        let readme = beside_binary("README.md").ok_or(DistError::Missing("README.md"))?;
        let license = beside_binary("LICENSE").ok_or(DistError::Missing("LICENSE"))?;
        Ok(Parts {
            found: vec![("skills", skills), ("defaults", defaults), ("README.md", readme), ("LICENSE", license)],
        })
    }
}

/// `name` beside the binary, one or two levels up, or in the checkout gm was built from.
fn beside_binary(name: &str) -> Option<PathBuf> {
    gm_actors::builds::running_part_candidates(name, Path::new(env!("CARGO_MANIFEST_DIR")))
        .into_iter()
        .find(|p| p.is_file())
}

/// Writes the archive: the folder `stem` holding the binary and `build.json` from `scratch`,
/// and the parts.
fn write_archive(path: &Path, stem: &str, scratch: &Path, parts: &Parts) -> Result<(), DistError> {
    let file = fs::File::create(path).map_err(io_err(path))?;
    // The default level: the best one made the archive 1% smaller and took 3.5 times as long.
    let mut tar = tar::Builder::new(GzEncoder::new(file, flate2::Compression::default()));
    // No owners or times: the same build packs into the same bytes.
    tar.mode(tar::HeaderMode::Deterministic);
    let top = Path::new(stem);
    tar.append_dir(top, scratch).map_err(io_err(scratch))?;
    for name in [EXE, BUILD_FILE] {
        append(&mut tar, &top.join(name), &scratch.join(name))?;
    }
    for (name, from) in &parts.found {
        append(&mut tar, &top.join(name), from)?;
    }
    let mut file = tar.into_inner().and_then(GzEncoder::finish).map_err(io_err(path))?;
    file.flush().and_then(|_| file.sync_all()).map_err(io_err(path))
}

/// Adds the file or folder `from` to the archive as `name`.
fn append(tar: &mut tar::Builder<GzEncoder<fs::File>>, name: &Path, from: &Path) -> Result<(), DistError> {
    if from.is_dir() { tar.append_dir_all(name, from) } else { tar.append_path_with_name(from, name) }
        .map_err(io_err(from))
}

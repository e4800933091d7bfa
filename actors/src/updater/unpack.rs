//! Unpacking a downloaded build archive (tar + gzip) after its size and SHA-256 were checked:
//! one top folder `gmnew-<version>-<target>/`, only files and folders, nothing outside the
//! destination, and a `build.json` that says the version and target the manifest promised.
//! Blocking work: the updater runs it on a blocking thread.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use flate2::read::GzDecoder;
use tar::EntryType;

use crate::builds::BuildInfo;

/// Why an archive was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("bad archive: {0}")]
    Bad(String),
    #[error("build.json mismatch: {0}")]
    BuildJsonMismatch(String),
    /// The destination could not be written (not the archive's fault).
    #[error("{path}: {why}")]
    Io { path: PathBuf, why: String },
}

/// The folder an archive of `version` for `target` holds.
pub fn top_folder(version: &str, target: &str) -> String {
    format!("gmnew-{version}-{target}")
}

/// Unpacks `archive` into `dest` (a new folder) and returns the build's folder in it.
pub fn unpack(archive: &Path, dest: &Path, top: &str) -> Result<PathBuf, ArchiveError> {
    let bad = |why: String| ArchiveError::Bad(why);
    std::fs::create_dir(dest).map_err(|e| ArchiveError::Io { path: dest.to_path_buf(), why: e.to_string() })?;
    let file = File::open(archive).map_err(|e| ArchiveError::Io { path: archive.to_path_buf(), why: e.to_string() })?;
    let mut tar = tar::Archive::new(GzDecoder::new(file));
    let entries = tar.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let path = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let shown = path.display().to_string();
        if !matches!(entry.header().entry_type(), EntryType::Regular | EntryType::Directory) {
            // A build holds files and folders; a link could point anywhere.
            return Err(bad(format!("{shown} is a {:?} entry, not a file or a folder", entry.header().entry_type())));
        }
        if path.components().next() != Some(Component::Normal(top.as_ref())) {
            return Err(bad(format!("{shown} is outside the build's folder {top}/")));
        }
        // unpack_in refuses `..` and absolute paths by returning false.
        match entry.unpack_in(dest) {
            Ok(true) => {}
            Ok(false) => return Err(bad(format!("{shown} would land outside the destination"))),
            Err(e) => return Err(bad(format!("{shown}: {e}"))),
        }
    }
    let build = dest.join(top);
    if !build.is_dir() {
        return Err(bad(format!("no folder {top}/")));
    }
    Ok(build)
}

/// Checks that the build's `build.json` says `version` and `target`.
pub fn check_build(build: &Path, version: &str, target: &str) -> Result<(), ArchiveError> {
    let mismatch = ArchiveError::BuildJsonMismatch;
    match BuildInfo::read(build) {
        Ok(Some(info)) if info.version == version && info.target == target => Ok(()),
        Ok(Some(info)) => {
            Err(mismatch(format!("it says {} for {}, the manifest {version} for {target}", info.version, info.target)))
        }
        Ok(None) => Err(mismatch("the build has no build.json".into())),
        Err(e) => Err(mismatch(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{archive_of, build_archive};
    use super::*;

    fn unpack_bytes(bytes: &[u8], top: &str) -> (tempfile::TempDir, Result<PathBuf, ArchiveError>) {
        let t = tempfile::tempdir().unwrap();
        let archive = t.path().join("a.tar.gz");
        std::fs::write(&archive, bytes).unwrap();
        let result = unpack(&archive, &t.path().join("out"), top);
        (t, result)
    }

    #[cfg(unix)]
    #[test]
    fn a_build_archive_unpacks_into_its_folder_with_the_binary_executable() {
        let (_t, result) = unpack_bytes(&build_archive("2.0.0", "t", "bin"), "gmnew-2.0.0-t");
        let build = result.unwrap();
        assert_eq!(std::fs::read_to_string(build.join("gm")).unwrap(), "bin");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(build.join("gm")).unwrap().permissions());
        assert_eq!(mode & 0o111, 0o111, "still executable");
        check_build(&build, "2.0.0", "t").unwrap();
    }

    #[test]
    fn an_entry_with_dot_dot_is_refused_and_nothing_lands_outside() {
        // tar::Builder refuses to write `..`, so the name goes into the header by hand.
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut h = tar::Header::new_old();
        let name = b"gmnew-2.0.0-t/../../escaped";
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_size(1);
        h.set_mode(0o644);
        h.set_entry_type(EntryType::Regular);
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let bytes = b.into_inner().unwrap().finish().unwrap();
        let (t, result) = unpack_bytes(&bytes, "gmnew-2.0.0-t");
        assert!(matches!(result, Err(ArchiveError::Bad(_))), "{result:?}");
        assert!(!t.path().join("escaped").exists());
    }

    #[test]
    fn a_symlink_entry_is_refused() {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "gmnew-2.0.0-t/gm", "/bin/sh").unwrap();
        let bytes = b.into_inner().unwrap().finish().unwrap();
        let (_t, result) = unpack_bytes(&bytes, "gmnew-2.0.0-t");
        let Err(ArchiveError::Bad(why)) = result else { panic!("{result:?}") };
        assert!(why.contains("not a file or a folder"), "{why}");
    }

    #[test]
    fn a_file_beside_the_build_folder_is_refused() {
        let bytes = archive_of(&[
            ("gmnew-2.0.0-t/gm".into(), b"bin".to_vec(), 0o755),
            ("skills/stray.md".into(), b"x".to_vec(), 0o644),
        ]);
        let (_t, result) = unpack_bytes(&bytes, "gmnew-2.0.0-t");
        assert!(matches!(result, Err(ArchiveError::Bad(_))), "{result:?}");
    }

    #[test]
    fn bytes_that_are_not_a_gzip_tar_are_a_bad_archive() {
        let (_t, result) = unpack_bytes(b"this is not gzip", "gmnew-2.0.0-t");
        assert!(matches!(result, Err(ArchiveError::Bad(_))), "{result:?}");
    }

    #[test]
    fn a_build_json_for_another_version_or_target_is_a_mismatch() {
        let (_t, result) = unpack_bytes(&build_archive("2.0.0", "t", "bin"), "gmnew-2.0.0-t");
        let build = result.unwrap();
        assert!(matches!(check_build(&build, "2.0.1", "t"), Err(ArchiveError::BuildJsonMismatch(_))));
        assert!(matches!(check_build(&build, "2.0.0", "u"), Err(ArchiveError::BuildJsonMismatch(_))));
        std::fs::remove_file(build.join("build.json")).unwrap();
        assert!(matches!(check_build(&build, "2.0.0", "t"), Err(ArchiveError::BuildJsonMismatch(_))));
    }
}

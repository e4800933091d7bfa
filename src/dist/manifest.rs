//! The release manifest, `manifest.json`: the newest version, and per target the archive to
//! download with its checksum and size. Each target's build adds its own entry to whatever
//! manifest is already in the output folder, which is how the release workflow puts the
//! targets of one release together.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::DistError;

/// The manifest's file name, in `gm dist --out` and on the release.
pub const FILE: &str = "manifest.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The highest version among the targets.
    pub version: String,
    pub targets: BTreeMap<String, TargetEntry>,
    /// Fields this gm does not know, kept for the gm that wrote them.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetEntry {
    pub version: String,
    /// The archive's file name, beside the manifest.
    pub archive: String,
    pub sha256: String,
    pub size: u64,
    /// The archive's minisign signature (its `.minisig` text), with `gm dist --sign`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Sets `target`'s entry in the manifest at `path` (made when missing), keeping the other
/// targets' entries, and raises the top-level version to the highest of them.
pub fn add_target(path: &Path, target: &str, entry: TargetEntry) -> Result<Manifest, DistError> {
    let bad = |why: String| DistError::Manifest { path: path.to_owned(), why };
    let mut manifest = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str::<Manifest>(&text).map_err(|e| bad(e.to_string()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Manifest { version: entry.version.clone(), targets: BTreeMap::new(), other: Map::new() }
        }
        Err(source) => return Err(DistError::Io { path: path.to_owned(), source }),
    };
    manifest.targets.insert(target.to_owned(), entry);
    for e in manifest.targets.values() {
        if compare_versions(&e.version, &manifest.version) == Ordering::Greater {
            manifest.version = e.version.clone();
        }
    }
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| bad(e.to_string()))?;
    gm_actors::fs::replace(path, format!("{text}\n").as_bytes())
        .map_err(|source| DistError::Io { path: path.to_owned(), source })?;
    Ok(manifest)
}

/// Orders two versions by semver precedence (a pre-release below its release, build metadata
/// ignored). A version that is not semver sorts below every one that is, and among its kind by
/// its text: gm's own versions are always semver.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(x), Ok(y)) => x.cmp_precedence(&y),
        (Ok(_), Err(_)) => Ordering::Greater,
        (Err(_), Ok(_)) => Ordering::Less,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: &str, archive: &str) -> TargetEntry {
        TargetEntry {
            version: version.into(),
            archive: archive.into(),
            sha256: "00".into(),
            size: 1,
            signature: None,
            other: Map::new(),
        }
    }

    #[test]
    fn versions_order_as_semver_does() {
        assert_eq!(compare_versions("0.10.0", "0.9.9"), Ordering::Greater);
        assert_eq!(compare_versions("1.0.0-rc.1", "1.0.0"), Ordering::Less);
        assert_eq!(compare_versions("1.0.0-rc.2", "1.0.0-rc.10"), Ordering::Less);
        assert_eq!(compare_versions("1.0.0+abc", "1.0.0"), Ordering::Equal);
        assert_eq!(compare_versions("1.0", "1.0.1"), Ordering::Less, "not semver: below any semver");
        assert_eq!(compare_versions("1.0.0-rc.1", "1.0.0-rc.1.1"), Ordering::Less);
    }

    #[test]
    fn a_target_added_keeps_the_other_targets_and_the_highest_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let old = r#"{"version": "0.3.0", "targets": {
            "a": {"version": "0.3.0", "archive": "a.tar.gz", "sha256": "11", "size": 5, "note": "kept"}
        }, "channel": "stable"}"#;
        std::fs::write(&path, old).unwrap();
        let m = add_target(&path, "b", entry("0.2.0", "b.tar.gz")).unwrap();
        assert_eq!(m.version, "0.3.0", "an older target does not lower the version");
        assert_eq!(m.targets["a"].other["note"], "kept");
        assert_eq!(m.other["channel"], "stable");
        let m = add_target(&path, "b", entry("0.4.0", "b2.tar.gz")).unwrap();
        assert_eq!(m.version, "0.4.0");
        let back: Manifest = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn a_manifest_that_cannot_be_read_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(&path, "[]").unwrap();
        assert!(matches!(add_target(&path, "b", entry("0.1.0", "b")), Err(DistError::Manifest { .. })));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[]");
    }
}

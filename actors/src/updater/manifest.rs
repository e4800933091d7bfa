//! The release manifest `gm dist` writes, and what it offers this build:
//!
//! ```json
//! {"version": "0.2.0",
//!  "targets": {"x86_64-unknown-linux-gnu":
//!    {"version": "0.2.0", "archive": "gmnew-0.2.0-x86_64-unknown-linux-gnu.tar.gz",
//!     "sha256": "<hex>", "size": 12345,
//!     "signature": "untrusted comment: ...\n<base64>\ntrusted comment: ...\n<base64>\n"}}}
//! ```
//!
//! `signature` is the archive's `.minisig` text (`gm dist --sign`); the updater refuses an
//! archive without one (see `signature.rs`).
//!
//! A target's own `version` wins over the manifest's: a target whose build failed keeps its
//! older entry while the others move on. Unknown fields are ignored, so the manifest can grow.

use std::collections::BTreeMap;
use std::path::Path;

use semver::Version;
use serde::Deserialize;
use url::Url;

use crate::builds::BuildInfo;

/// The largest manifest read: it lists a handful of targets.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// The largest archive downloaded: a build is tens of megabytes, so a bigger size is a broken
/// manifest, not a build.
pub const MAX_ARCHIVE_BYTES: u64 = 1 << 30;

#[derive(Debug, Deserialize)]
pub struct Manifest {
    #[serde(default)]
    pub version: Option<String>,
    pub targets: BTreeMap<String, Entry>,
}

#[derive(Debug, Deserialize)]
pub struct Entry {
    #[serde(default)]
    pub version: Option<String>,
    pub archive: String,
    pub sha256: String,
    pub size: u64,
    #[serde(default)]
    pub signature: Option<String>,
}

/// The build the manifest offers one target, checked for shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub version: Version,
    /// The archive's name resolved against the manifest's URL.
    pub archive: Url,
    /// Lowercase hex.
    pub sha256: String,
    pub size: u64,
    /// The archive's minisign signature, as the manifest gives it (checked after the download).
    pub signature: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("not a manifest: {0}")]
    Shape(#[from] serde_json::Error),
    #[error("{target}: no version, neither the target's nor the manifest's")]
    NoVersion { target: String },
    #[error("{target}: {version:?} is not a semantic version: {why}")]
    BadVersion { target: String, version: String, why: semver::Error },
    #[error("{target}: the archive {archive:?} does not resolve against the manifest's URL: {why}")]
    BadArchive { target: String, archive: String, why: url::ParseError },
    #[error("{target}: sha256 {sha256:?} is not 64 hex digits")]
    BadSha256 { target: String, sha256: String },
    #[error("{target}: size {size} is over the {MAX_ARCHIVE_BYTES}-byte limit of a build")]
    TooBig { target: String, size: u64 },
}

pub fn parse(body: &[u8]) -> Result<Manifest, ManifestError> {
    Ok(serde_json::from_slice(body)?)
}

impl Manifest {
    /// What the manifest offers `target`, or None when it lists no build for it.
    pub fn offer(&self, target: &str, manifest_url: &Url) -> Result<Option<Offer>, ManifestError> {
        let Some(entry) = self.targets.get(target) else { return Ok(None) };
        let t = || target.to_owned();
        let text =
            entry.version.as_ref().or(self.version.as_ref()).ok_or_else(|| ManifestError::NoVersion { target: t() })?;
        let version = Version::parse(text).map_err(|why| ManifestError::BadVersion {
            target: t(),
            version: text.clone(),
            why,
        })?;
        let archive = manifest_url.join(&entry.archive).map_err(|why| ManifestError::BadArchive {
            target: t(),
            archive: entry.archive.clone(),
            why,
        })?;
        let sha256 = entry.sha256.to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ManifestError::BadSha256 { target: t(), sha256: entry.sha256.clone() });
        }
        if entry.size > MAX_ARCHIVE_BYTES {
            return Err(ManifestError::TooBig { target: t(), size: entry.size });
        }
        Ok(Some(Offer { version, archive, sha256, size: entry.size, signature: entry.signature.clone() }))
    }
}

/// Whether `offered` is newer than the running version. A running version that is not a
/// semantic version (it always is: it comes from Cargo.toml) is never replaced.
pub fn is_newer(offered: &Version, running: &str) -> bool {
    Version::parse(running).is_ok_and(|running| *offered > running)
}

/// Whether `<root>/versions/<version>` already holds that build for `target`.
pub fn is_staged(root: &Path, version: &Version, target: &str) -> bool {
    let dir = root.join("versions").join(version.to_string());
    matches!(BuildInfo::read(&dir), Ok(Some(info)) if info.version == version.to_string() && info.target == target)
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://example.com/releases/download/latest/manifest.json";
    const SHA: &str = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789";

    fn offer_of(json: &str, target: &str) -> Result<Option<Offer>, ManifestError> {
        parse(json.as_bytes())?.offer(target, &Url::parse(URL).unwrap())
    }

    #[test]
    fn a_targets_own_version_wins_over_the_manifests() {
        let json = format!(
            r#"{{"version":"0.3.0","targets":{{"t":{{"version":"0.2.0","archive":"a.tar.gz","sha256":"{SHA}","size":5}}}}}}"#
        );
        let offer = offer_of(&json, "t").unwrap().unwrap();
        assert_eq!(offer.version, Version::new(0, 2, 0));
        assert_eq!(offer.sha256, SHA.to_ascii_lowercase(), "hex is compared in lowercase");
    }

    #[test]
    fn a_target_without_a_version_takes_the_manifests() {
        let json = format!(r#"{{"version":"0.3.0","targets":{{"t":{{"archive":"a","sha256":"{SHA}","size":5}}}}}}"#);
        assert_eq!(offer_of(&json, "t").unwrap().unwrap().version, Version::new(0, 3, 0));
        let none = format!(r#"{{"targets":{{"t":{{"archive":"a","sha256":"{SHA}","size":5}}}}}}"#);
        assert!(matches!(offer_of(&none, "t"), Err(ManifestError::NoVersion { .. })));
    }

    #[test]
    fn the_archive_resolves_against_the_manifests_url() {
        let json = format!(
            r#"{{"version":"1.0.0","targets":{{"t":{{"archive":"gmnew-1.0.0-t.tar.gz","sha256":"{SHA}","size":5}}}}}}"#
        );
        let offer = offer_of(&json, "t").unwrap().unwrap();
        assert_eq!(offer.archive.as_str(), "https://example.com/releases/download/latest/gmnew-1.0.0-t.tar.gz");
    }

    #[test]
    fn another_targets_build_is_no_offer() {
        let json = format!(r#"{{"version":"1.0.0","targets":{{"t":{{"archive":"a","sha256":"{SHA}","size":5}}}}}}"#);
        assert_eq!(offer_of(&json, "other").unwrap(), None);
    }

    #[test]
    fn a_malformed_entry_is_an_error_naming_it() {
        let bad_version =
            format!(r#"{{"targets":{{"t":{{"version":"one","archive":"a","sha256":"{SHA}","size":5}}}}}}"#);
        assert!(matches!(offer_of(&bad_version, "t"), Err(ManifestError::BadVersion { .. })));
        let bad_sha = r#"{"targets":{"t":{"version":"1.0.0","archive":"a","sha256":"abc","size":5}}}"#;
        assert!(matches!(offer_of(bad_sha, "t"), Err(ManifestError::BadSha256 { .. })));
        let huge = format!(
            r#"{{"targets":{{"t":{{"version":"1.0.0","archive":"a","sha256":"{SHA}","size":{}}}}}}}"#,
            MAX_ARCHIVE_BYTES + 1
        );
        assert!(matches!(offer_of(&huge, "t"), Err(ManifestError::TooBig { .. })));
        assert!(matches!(offer_of("[1, 2]", "t"), Err(ManifestError::Shape(_))));
    }

    #[test]
    fn only_a_greater_semantic_version_is_newer() {
        assert!(is_newer(&Version::new(0, 2, 0), "0.1.0"));
        assert!(is_newer(&Version::new(0, 10, 0), "0.9.0"), "compared as numbers, not text");
        assert!(!is_newer(&Version::new(0, 1, 0), "0.1.0"));
        assert!(!is_newer(&Version::new(0, 0, 9), "0.1.0"));
        assert!(!is_newer(&Version::parse("0.1.0-rc.1").unwrap(), "0.1.0"), "a pre-release is older than its release");
        assert!(!is_newer(&Version::new(9, 0, 0), "not a version"));
    }

    #[test]
    fn a_version_is_staged_only_when_its_build_json_says_so() {
        let root = tempfile::tempdir().unwrap();
        let v = Version::new(2, 0, 0);
        assert!(!is_staged(root.path(), &v, "t"));
        let dir = root.path().join("versions/2.0.0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("build.json"), r#"{"version":"2.0.0","target":"other"}"#).unwrap();
        assert!(!is_staged(root.path(), &v, "t"), "another target's build");
        std::fs::write(dir.join("build.json"), r#"{"version":"2.0.0","target":"t"}"#).unwrap();
        assert!(is_staged(root.path(), &v, "t"));
    }
}

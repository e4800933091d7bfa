//! `gm dist --sign KEY`: the archive's minisign signature, made with the release's secret key,
//! written beside the archive (`<archive>.minisig`) and into its manifest entry, where the
//! updater of every gm checks it against the public keys compiled in
//! (`gm_actors::updater::signature::RELEASE_KEYS`).

use std::path::{Path, PathBuf};

use minisign::{PublicKey, SecretKey, SecretKeyBox};
use serde::Serialize;

use super::DistError;

/// The password of an encrypted secret key (an unencrypted one needs none). gm never prompts:
/// `gm dist` prints its report on stdout, and it runs in CI.
pub const PASSWORD_VAR: &str = "GMNEW_SIGN_PASSWORD";

/// A secret key, read and checked before anything is packaged.
pub struct SigningKey {
    secret: SecretKey,
    public: PublicKey,
}

/// What `gm dist --sign` reports about the signature.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignatureReport {
    /// `<archive>.minisig`.
    pub file: PathBuf,
    /// The key's id as minisign prints it.
    pub key_id: String,
    /// Whether gm's updater trusts the key (it is one of the release keys compiled in).
    pub release_key: bool,
}

impl SigningKey {
    /// Reads the secret key file (`minisign -G` or the `minisign` crate made it); an encrypted
    /// one is opened with `$GMNEW_SIGN_PASSWORD`.
    pub fn read(path: &Path) -> Result<SigningKey, DistError> {
        let bad = |why: String| DistError::SigningKey { path: path.to_owned(), why };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let boxed = SecretKeyBox::from_string(&text).map_err(|e| bad(e.to_string()))?;
        let secret = match std::env::var(PASSWORD_VAR).ok().filter(|p| !p.is_empty()) {
            Some(password) => SecretKey::from_box(boxed, Some(password)),
            None => SecretKey::from_unencrypted_box(boxed),
        }
        .map_err(|e| bad(format!("{e} (an encrypted key takes its password from ${PASSWORD_VAR})")))?;
        let public = PublicKey::from_secret_key(&secret).map_err(|e| bad(e.to_string()))?;
        Ok(SigningKey { secret, public })
    }

    /// Signs `archive`, writes `<archive>.minisig` and returns its text with the report.
    pub fn sign(&self, archive: &Path, what: &str) -> Result<(String, SignatureReport), DistError> {
        let io = |source| DistError::Io { path: archive.to_owned(), source };
        let name = archive.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let timestamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        // The trusted comment is signed too: it says which archive and build this is.
        let trusted = format!("timestamp:{timestamp}\tfile:{name}\t{what}");
        let file = std::fs::File::open(archive).map_err(io)?;
        let signature = minisign::sign(Some(&self.public), &self.secret, file, Some(&trusted), None)
            .map_err(|e| DistError::Sign { path: archive.to_owned(), why: e.to_string() })?
            .into_string();
        let mut sig_path = archive.as_os_str().to_owned();
        sig_path.push(".minisig");
        let sig_path = PathBuf::from(sig_path);
        gm_actors::fs::replace(&sig_path, signature.as_bytes())
            .map_err(|source| DistError::Io { path: sig_path.clone(), source })?;
        let base64 = self.public.to_base64();
        let report = SignatureReport {
            file: sig_path,
            key_id: key_id(self.public.keynum()),
            release_key: gm_actors::updater::signature::RELEASE_KEYS.contains(&base64.as_str()),
        };
        Ok((signature, report))
    }
}

/// A key id as minisign prints it: the 8 bytes as a little-endian number, in hex.
fn key_id(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

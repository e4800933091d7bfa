//! Who made a release: every archive is signed with minisign (`gm dist --sign`), and the
//! signature, carried in the archive's manifest entry, must be by one of the public keys
//! compiled into gm. The manifest's sha256 comes from the same place as the archive, so it
//! proves the download is whole, not who made it; the signature proves that.
//!
//! A development build (not made by `gm dist`) also takes the key `GMNEW_UPDATE_PUBKEY` names
//! (the base64 line, as `minisign -P` takes it), for tests and for someone testing their own
//! releases; a release build never reads it.

use std::io::Read;
use std::path::Path;

use minisign_verify::{PublicKey, Signature};

/// The keys releases are signed with, newest first; a key is added here before releases are
/// signed with it and removed once no supported release needs it (rotation). The secret key is
/// the repository's secret `GMNEW_SIGNING_KEY`, never in the repository.
pub const RELEASE_KEYS: &[&str] = &[
    // 742C2902BDA3DC45, made 2025-12.
    "RWRF3KO9AiksdEXeJh5xFYovSbNH83Se9IH/LNwOsnDikhhl6S3+wVwu",
];

/// The environment variable a development build takes one more key from.
pub const PUBKEY_VAR: &str = "GMNEW_UPDATE_PUBKEY";

/// The public keys a signature may be by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKeys {
    keys: Vec<PublicKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the manifest gives no signature for the archive")]
    Missing,
    #[error("the signature is not a minisign signature: {0}")]
    Malformed(String),
    #[error("signed by key {0}, which is not one gm trusts")]
    OtherKey(String),
    #[error("the signature does not match the archive")]
    Invalid,
    #[error("{0}")]
    Io(String),
}

/// A bad `GMNEW_UPDATE_PUBKEY`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{PUBKEY_VAR} is not a minisign public key (the base64 line minisign -P takes)")]
pub struct BadKey;

impl TrustedKeys {
    /// The keys compiled into gm.
    pub fn release() -> TrustedKeys {
        TrustedKeys { keys: RELEASE_KEYS.iter().filter_map(|k| PublicKey::from_base64(k).ok()).collect() }
    }

    /// The keys this build trusts: the release keys, and for a development build `extra`
    /// (`GMNEW_UPDATE_PUBKEY`'s value) too. A release build ignores `extra` whatever it says.
    pub fn for_build(release: bool, extra: Option<&str>) -> Result<TrustedKeys, BadKey> {
        let mut keys = TrustedKeys::release();
        if let Some(extra) = extra.map(str::trim).filter(|e| !release && !e.is_empty()) {
            keys.keys.push(PublicKey::from_base64(extra).map_err(|_| BadKey)?);
        }
        Ok(keys)
    }

    /// Exactly these keys (tests).
    pub fn only(base64: &[&str]) -> Result<TrustedKeys, BadKey> {
        let keys = base64.iter().map(|k| PublicKey::from_base64(k).map_err(|_| BadKey)).collect::<Result<_, _>>()?;
        Ok(TrustedKeys { keys })
    }

    /// Checks that `signature` (the `.minisig` text) is a signature of the file at `path` by
    /// one of these keys. Reads the file once, in blocks.
    pub fn verify_file(&self, path: &Path, signature: Option<&str>) -> Result<(), SignatureError> {
        let text = signature.filter(|s| !s.trim().is_empty()).ok_or(SignatureError::Missing)?;
        let signature = Signature::decode(text).map_err(|e| SignatureError::Malformed(e.to_string()))?;
        let mut last = SignatureError::OtherKey(key_id_of(text).unwrap_or_else(|| "?".into()));
        for key in &self.keys {
            let mut verifier = match key.verify_stream(&signature) {
                Ok(v) => v,
                // Another key's id, or a legacy (not prehashed) signature gm never makes.
                Err(minisign_verify::Error::UnexpectedKeyId) => continue,
                Err(e) => return Err(SignatureError::Malformed(e.to_string())),
            };
            let mut file =
                std::fs::File::open(path).map_err(|e| SignatureError::Io(format!("{}: {e}", path.display())))?;
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = file.read(&mut buf).map_err(|e| SignatureError::Io(format!("{}: {e}", path.display())))?;
                if n == 0 {
                    break;
                }
                verifier.update(&buf[..n]);
            }
            match verifier.finalize() {
                Ok(()) => return Ok(()),
                Err(_) => last = SignatureError::Invalid,
            }
        }
        Err(last)
    }
}

/// The key id a signature names, as minisign prints it (16 hex digits), for the refusal.
fn key_id_of(text: &str) -> Option<String> {
    use std::fmt::Write;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))?;
    let bytes = decode_base64(line)?;
    let id = bytes.get(2..10)?;
    // minisign prints the id as a little-endian number.
    Some(id.iter().rev().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02X}");
        s
    }))
}

fn decode_base64(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().take_while(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{keypair, sign};
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar.gz");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn the_compiled_release_keys_are_keys() {
        assert_eq!(TrustedKeys::release().keys.len(), RELEASE_KEYS.len());
    }

    #[test]
    fn a_signature_by_a_trusted_key_verifies_and_any_change_to_the_file_does_not() {
        let (public, secret) = keypair();
        let keys = TrustedKeys::only(&[&public]).unwrap();
        let (_d, path) = file_with(b"the archive");
        let sig = sign(b"the archive", &secret);
        assert_eq!(keys.verify_file(&path, Some(&sig)), Ok(()));
        std::fs::write(&path, b"the archivE").unwrap();
        assert_eq!(keys.verify_file(&path, Some(&sig)), Err(SignatureError::Invalid));
    }

    #[test]
    fn no_signature_another_key_and_garbage_are_each_refused() {
        let (public, _) = keypair();
        let (_, other_secret) = keypair();
        let keys = TrustedKeys::only(&[&public]).unwrap();
        let (_d, path) = file_with(b"x");
        assert_eq!(keys.verify_file(&path, None), Err(SignatureError::Missing));
        assert_eq!(keys.verify_file(&path, Some("  ")), Err(SignatureError::Missing));
        let other = sign(b"x", &other_secret);
        let Err(SignatureError::OtherKey(id)) = keys.verify_file(&path, Some(&other)) else { panic!("accepted") };
        assert_eq!(id.len(), 16, "{id}");
        assert!(matches!(keys.verify_file(&path, Some("not a signature")), Err(SignatureError::Malformed(_))));
    }

    #[test]
    fn a_release_build_never_takes_the_key_from_the_environment() {
        let (public, _) = keypair();
        let release = TrustedKeys::for_build(true, Some(&public)).unwrap();
        assert_eq!(release, TrustedKeys::release());
        assert_eq!(TrustedKeys::for_build(true, Some("garbage")), Ok(TrustedKeys::release()), "not even read");
        let dev = TrustedKeys::for_build(false, Some(&public)).unwrap();
        assert_eq!(dev.keys.len(), RELEASE_KEYS.len() + 1);
        assert_eq!(TrustedKeys::for_build(false, Some("garbage")), Err(BadKey));
        assert_eq!(TrustedKeys::for_build(false, Some("")), Ok(TrustedKeys::release()));
    }

    #[test]
    fn the_key_id_is_named_as_minisign_prints_it() {
        let (public, secret) = keypair();
        let sig = sign(b"x", &secret);
        let pk = PublicKey::from_base64(&public).unwrap();
        let (_d, path) = file_with(b"x");
        assert_eq!(TrustedKeys { keys: vec![pk] }.verify_file(&path, Some(&sig)), Ok(()));
        let shown = key_id_of(&sig).unwrap();
        let pk_file = minisign::PublicKey::from_base64(&public).unwrap().to_box().unwrap().into_string();
        assert!(pk_file.lines().next().unwrap().ends_with(&shown), "{pk_file} names {shown}");
    }
}

//! `.gm/blobs/`: the long strings of logged calls (a write_file's content, a run_code body),
//! kept once each under their sha256, so a log line stays small while `gm bench` can still
//! replay the call.
//!
//! In a logged call's arguments, a string longer than [`STRING_MAX`] bytes is replaced by
//! `{ "$blob": "sha256:<hex>", "bytes": <length> }`, and its text (with secret values already
//! replaced, as everywhere in the log) is in `.gm/blobs/<hex[..2]>/<hex>`. Writing a blob that
//! exists only touches it. At start, gm prunes the store to [`KEEP_BYTES`] when it holds more
//! than [`MAX_BYTES`], least recently written first; a replay of a call whose blob was pruned
//! reports that call as failed and goes on.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::secrets::Secrets;

/// Strings in a call's arguments up to this length stay in the log line.
pub const STRING_MAX: usize = 4096;
/// The store is pruned at start when it holds more than this...
pub const MAX_BYTES: u64 = 512 << 20;
/// ... down to this.
pub const KEEP_BYTES: u64 = 384 << 20;

const KEY: &str = "$blob";

pub struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    /// The store of the workspace whose state directory is `state_dir` (`.gm`).
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("blobs") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A call's arguments as the log keeps them: long strings stored here and referred to.
    /// Arguments with no long string (nearly every call) come back as they are, unparsed.
    pub fn args_for_log<'a>(&self, args: &'a RawValue, secrets: &Secrets) -> Cow<'a, RawValue> {
        if args.get().len() <= STRING_MAX {
            return Cow::Borrowed(args);
        }
        let Ok(mut value) = serde_json::from_str::<Value>(args.get()) else { return Cow::Borrowed(args) };
        if !self.store_long_strings(&mut value, secrets) {
            return Cow::Borrowed(args);
        }
        match serde_json::value::to_raw_value(&value) {
            Ok(raw) => Cow::Owned(raw),
            Err(_) => Cow::Borrowed(args),
        }
    }

    /// Replaces every long string in `v` by a reference; true if any was.
    fn store_long_strings(&self, v: &mut Value, secrets: &Secrets) -> bool {
        match v {
            Value::String(s) if s.len() > STRING_MAX => {
                let text = secrets.redactor.redact(s);
                match self.put(text.as_bytes()) {
                    Ok(digest) => {
                        *v = reference(&digest, text.len());
                        true
                    }
                    // Without a blob the log keeps the string itself: nothing is lost.
                    Err(_) => false,
                }
            }
            // Every item is visited (no short circuit): each long string goes to the store.
            Value::Array(items) => {
                let mut any = false;
                for item in items {
                    any |= self.store_long_strings(item, secrets);
                }
                any
            }
            Value::Object(m) => {
                let mut any = false;
                for item in m.values_mut() {
                    any |= self.store_long_strings(item, secrets);
                }
                any
            }
            _ => false,
        }
    }

    /// Stores `bytes` (once) and returns their hex sha256.
    fn put(&self, bytes: &[u8]) -> std::io::Result<String> {
        let digest = format!("{:x}", Sha256::digest(bytes));
        let path = self.path_of(&digest);
        if let Ok(file) = std::fs::File::options().append(true).open(&path) {
            // Already kept: mark it as recently used, for pruning.
            let _ = file.set_modified(std::time::SystemTime::now());
            return Ok(digest);
        }
        if let Some(dir) = path.parent() {
            // Made, or checked, without following a link a repository put in its place.
            gm_actors::state_file::open_own_folder(dir)?;
        }
        gm_actors::fs::replace(&path, bytes)?;
        Ok(digest)
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(&digest[..2.min(digest.len())]).join(digest)
    }

    /// Puts back every stored string `v` refers to; the error names a blob that is missing.
    pub fn restore(&self, v: &mut Value) -> Result<(), String> {
        match v {
            Value::Object(m) => {
                if let Some(digest) = blob_digest(m) {
                    let path = self.path_of(digest);
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        format!(
                            "the blob {} is not in {} ({e}); it was pruned, or the log came without its blobs",
                            m[KEY],
                            self.dir.display()
                        )
                    })?;
                    *v = Value::String(text);
                    return Ok(());
                }
                m.values_mut().try_for_each(|i| self.restore(i))
            }
            Value::Array(items) => items.iter_mut().try_for_each(|i| self.restore(i)),
            _ => Ok(()),
        }
    }

    /// Removes the least recently written blobs while the store holds more than `max` bytes,
    /// down to `keep`. Returns how many it removed and their bytes.
    pub fn prune(&self, max: u64, keep: u64) -> (usize, u64) {
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = crate::walk::files_under(&self.dir)
            .into_iter()
            .filter_map(|p| {
                let m = std::fs::metadata(&p).ok()?;
                Some((m.modified().ok()?, m.len(), p))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        if total <= max {
            return (0, 0);
        }
        files.sort();
        let (mut removed, mut bytes) = (0, 0);
        for (_, len, path) in files {
            if total <= keep {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                removed += 1;
                bytes += len;
            }
        }
        (removed, bytes)
    }
}

fn reference(digest: &str, bytes: usize) -> Value {
    let mut m = Map::new();
    m.insert(KEY.into(), Value::String(format!("sha256:{digest}")));
    m.insert("bytes".into(), Value::from(bytes));
    Value::Object(m)
}

/// The hex digest of an object that is a blob reference and nothing else.
fn blob_digest(m: &Map<String, Value>) -> Option<&str> {
    if m.len() != 2 || !m.contains_key("bytes") {
        return None;
    }
    let digest = m.get(KEY)?.as_str()?.strip_prefix("sha256:")?;
    (digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit())).then_some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: &Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(v).expect("json")
    }

    #[test]
    fn long_strings_go_to_the_store_and_come_back_and_short_arguments_are_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path());
        let secrets = Secrets::parse("TOKEN=s3cr3t\n");
        let short = raw(&json!({ "path": "a", "content": "x" }));
        assert!(matches!(blobs.args_for_log(&short, &secrets), Cow::Borrowed(_)));
        let long = "line with s3cr3t\n".repeat(1000);
        let args = raw(&json!({ "path": "a", "content": long, "nested": [{ "also": long }] }));
        let logged: Value = serde_json::from_str(blobs.args_for_log(&args, &secrets).get()).expect("json");
        assert_eq!(logged["path"], "a");
        let reference = &logged["content"];
        assert_eq!(reference["bytes"], long.replace("s3cr3t", "[secret:TOKEN]").len());
        assert_eq!(logged["nested"][0]["also"], *reference, "one blob for one text");
        let mut back = logged.clone();
        blobs.restore(&mut back).expect("restored");
        assert_eq!(back["content"], long.replace("s3cr3t", "[secret:TOKEN]"), "secret values never reach the store");
        let files = crate::walk::files_under(blobs.dir());
        assert_eq!(files.len(), 1);
        std::fs::remove_file(&files[0]).expect("remove");
        let mut again = logged;
        assert!(blobs.restore(&mut again).expect_err("missing").contains("pruned"));
    }

    #[test]
    fn pruning_removes_the_least_recently_written_down_to_the_keep_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path());
        let mut digests = Vec::new();
        for i in 0..5u8 {
            digests.push(blobs.put(&vec![b'a' + i; 1000]).expect("put"));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Writing the first again makes it the most recent.
        blobs.put(&[b'a'; 1000]).expect("put");
        assert_eq!(blobs.prune(10_000, 3000), (0, 0), "under the limit nothing goes");
        assert_eq!(blobs.prune(4000, 3000), (2, 2000));
        let left: Vec<bool> = digests.iter().map(|d| blobs.path_of(d).exists()).collect();
        assert_eq!(left, [true, false, false, true, true]);
    }
}

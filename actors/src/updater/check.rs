//! One check, from the manifest request to a staged build: the steps in order, each event
//! sent as it happens, and the outcome. The ETag is saved only when the manifest was handled
//! to the end, so a check that failed or refused is tried again by the next one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use actix::Recipient;
use reqwest::Client;
use url::Url;

use super::fetch::{self, FetchError, Fetched};
use super::manifest::{self, Offer};
use super::signature::SignatureError;
use super::state::{self, Saved};
use super::unpack::{self, ArchiveError};
use super::{Outcome, Refusal, UpdateEvent};
use crate::builds::{self, BuildError};

/// Left-overs in `downloads/` older than this belong to a gm that stopped mid-download (a
/// download in progress writes to its file all the time).
const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// What a check works with.
#[derive(Clone)]
pub struct Job {
    pub client: Client,
    pub manifest_url: Url,
    /// `~/.gmnew`.
    pub root: PathBuf,
    /// Whose signature an archive must carry.
    pub keys: super::TrustedKeys,
    /// This build's version and target.
    pub running: &'static str,
    pub target: &'static str,
    pub events: Recipient<UpdateEvent>,
}

/// Why a check stopped short of its end.
enum Stop {
    Refused(Refusal),
    Failed(String),
}

impl From<FetchError> for Stop {
    fn from(e: FetchError) -> Self {
        Stop::Failed(e.to_string())
    }
}

pub async fn run(job: Job) -> Outcome {
    let url = job.manifest_url.as_str().to_owned();
    let etag = state::etag_for(&job.root, &url);
    let (body, new_etag) = match fetch::manifest(&job.client, &job.manifest_url, etag.as_deref()).await {
        Ok(Fetched::NotModified) => return Outcome::NotModified,
        Ok(Fetched::Manifest { body, etag }) => (body, etag),
        Err(e) => return Outcome::Failed { error: e.to_string() },
    };
    let offer = match manifest::parse(&body).and_then(|m| m.offer(job.target, &job.manifest_url)) {
        Ok(offer) => offer,
        Err(e) => return Outcome::Failed { error: format!("the manifest at {url} is not valid: {e}") },
    };
    let version = offer.as_ref().map(|o| o.version.to_string());
    let newer = offer.as_ref().is_some_and(|o| manifest::is_newer(&o.version, job.running));
    let staged = newer && offer.as_ref().is_some_and(|o| manifest::is_staged(&job.root, &o.version, job.target));
    let current = builds::current_version(&job.root);
    job.events.do_send(UpdateEvent::Checked {
        version: version.clone(),
        newer,
        running: job.running,
        target: job.target,
        current: current.clone(),
        already_staged: staged,
    });
    let refuse = |version: String, refusal: Refusal| {
        job.events.do_send(UpdateEvent::Refused {
            version: version.clone(),
            reason: refusal.code(),
            detail: refusal.to_string(),
        });
        Outcome::Refused { version, refusal }
    };
    let outcome = match (offer, version) {
        (Some(offer), Some(version)) if newer && !staged => match refuse_offer(&job.root, &offer, current.as_deref()) {
            // What the manifest alone says is no: handled to the end (its ETag is saved below),
            // so the same manifest is not downloaded again at every check.
            Some(refusal) => refuse(version, refusal),
            None => match install(&job, &offer).await {
                Ok(outcome) => outcome,
                Err(Stop::Failed(error)) => return Outcome::Failed { error },
                Err(Stop::Refused(refusal)) => return refuse(version, refusal),
            },
        },
        (_, Some(version)) if staged => Outcome::AlreadyStaged { version },
        (_, version) => Outcome::UpToDate { version },
    };
    // The manifest was handled to the end: the next check may ask whether it changed.
    if let Some(etag) = new_etag {
        if let Err(e) = state::save(&job.root, &Saved { url, etag }) {
            return Outcome::Failed { error: e.to_string() };
        }
    }
    outcome
}

/// Why the offered version is not downloaded at all: it is lower than the version current
/// points at (a replayed older manifest, or a build the user installed by hand), or it was
/// marked bad.
fn refuse_offer(root: &Path, offer: &Offer, current: Option<&str>) -> Option<Refusal> {
    if let Some(current) = current.filter(|c| semver::Version::parse(c).is_ok_and(|c| offer.version < c)) {
        return Some(Refusal::OlderThanCurrent { current: current.to_owned() });
    }
    state::bad(root, &offer.version.to_string()).map(|b| Refusal::KnownBad { causes: b.causes })
}

/// Downloads, verifies, unpacks and stages the offered build; its temporary files go in every
/// case (and with the future, if gm stops mid-download).
async fn install(job: &Job, offer: &Offer) -> Result<Outcome, Stop> {
    let version = offer.version.to_string();
    let downloads = job.root.join("downloads");
    let prepared = downloads.clone();
    blocking(move || prepare(&prepared)).await?.map_err(|e| Stop::Failed(format!("{}: {e}", downloads.display())))?;

    let part = TempPath(downloads.join(unique_name(&version, "part")));
    let started = Instant::now();
    let got = match fetch::archive(&job.client, &offer.archive, offer.size, &part.0).await {
        Ok(got) => got,
        Err(FetchError::OverSize { limit, announced, .. }) => {
            let got = announced.map_or_else(|| format!("more than {limit}"), |n| n.to_string());
            return Err(Stop::Refused(Refusal::WrongSize { got, want: limit }));
        }
        Err(e) => return Err(e.into()),
    };
    job.events.do_send(UpdateEvent::Downloaded {
        version: version.clone(),
        bytes: got.bytes,
        ms: started.elapsed().as_millis() as u64,
    });
    if got.bytes != offer.size {
        return Err(Stop::Refused(Refusal::WrongSize { got: got.bytes.to_string(), want: offer.size }));
    }
    if got.sha256 != offer.sha256 {
        return Err(Stop::Refused(Refusal::BadSha256 { got: got.sha256, want: offer.sha256.clone() }));
    }
    // Who made it, before a byte of it is unpacked.
    let (keys, archive, signature) = (job.keys.clone(), part.0.clone(), offer.signature.clone());
    blocking(move || keys.verify_file(&archive, signature.as_deref())).await?.map_err(|e| match e {
        SignatureError::Io(why) => Stop::Failed(why),
        e => Stop::Refused(Refusal::BadSignature(e.to_string())),
    })?;

    let archive = part.0.clone();
    let unpack_dir = downloads.join(unique_name(&version, "unpack"));
    let (root, target, v) = (job.root.clone(), job.target, version.clone());
    let staged = blocking(move || -> Result<builds::Staged, StageError> {
        let _unpacked = TempPath(unpack_dir.clone());
        let build = unpack::unpack(&archive, &unpack_dir, &unpack::top_folder(&v, target))?;
        unpack::check_build(&build, &v, target)?;
        state::record_staged(&root, &v)
            .map_err(|e| StageError::Stage(BuildError::Io { path: e.path, source: e.source }))?;
        match builds::stage_update(&build, &root) {
            Err(BuildError::DoesNotStart(e)) => {
                // It will not start next time either (a newer C library, a missing one): never again.
                let _ = state::mark_bad(&root, &v, &[format!("does not start: {e}")]);
                Err(StageError::Stage(BuildError::DoesNotStart(e)))
            }
            other => Ok(other?),
        }
    })
    .await??;
    drop(part);
    job.events.do_send(UpdateEvent::Staged { version: version.clone(), dir: staged.dir.clone() });
    Ok(Outcome::Staged { version, dir: staged.dir })
}

/// What can go wrong between a verified download and a staged build.
enum StageError {
    Archive(ArchiveError),
    Stage(BuildError),
}

impl From<ArchiveError> for StageError {
    fn from(e: ArchiveError) -> Self {
        StageError::Archive(e)
    }
}

impl From<BuildError> for StageError {
    fn from(e: BuildError) -> Self {
        StageError::Stage(e)
    }
}

impl From<StageError> for Stop {
    fn from(e: StageError) -> Self {
        match e {
            StageError::Archive(ArchiveError::Bad(why)) => Stop::Refused(Refusal::BadArchive(why)),
            StageError::Archive(ArchiveError::BuildJsonMismatch(why)) => Stop::Refused(Refusal::BuildJsonMismatch(why)),
            StageError::Archive(e @ ArchiveError::Io { .. }) => Stop::Failed(e.to_string()),
            StageError::Stage(BuildError::NoBinary(_)) => {
                Stop::Refused(Refusal::BadArchive(format!("the build holds no {}", builds::EXE)))
            }
            StageError::Stage(BuildError::DoesNotStart(e)) => Stop::Refused(Refusal::DoesNotStart(e.to_string())),
            StageError::Stage(BuildError::OlderThanCurrent { current, .. }) => {
                Stop::Refused(Refusal::OlderThanCurrent { current })
            }
            StageError::Stage(e) => Stop::Failed(format!("cannot stage the build: {e}")),
        }
    }
}

/// Runs blocking work (file system, gzip, hashing a tree) off the updater's thread; a panic
/// in it becomes a failed check.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Stop> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Stop::Failed(format!("the updater's file work ended: {e}")))
}

/// Makes `downloads/` and removes what a gm that stopped mid-download left there.
fn prepare(downloads: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(downloads)?;
    let now = SystemTime::now();
    for entry in std::fs::read_dir(downloads)?.flatten() {
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|m| now.duration_since(m).ok());
        if age.is_some_and(|a| a > STALE_AFTER) {
            TempPath(entry.path()).remove();
        }
    }
    Ok(())
}

/// `<version>-<pid>-<n>.<what>`: unique across the gm processes that share `~/.gmnew`.
fn unique_name(version: &str, what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{version}-{}-{}.{what}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A temporary file or folder, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.0).or_else(|_| std::fs::remove_file(&self.0));
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        self.remove();
    }
}

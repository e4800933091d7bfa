//! The Updater actor: keeps `~/.gmnew/current` on the newest release for this build's target.
//!
//! At start and every [`CHECK_EVERY`] it asks for the release manifest with `If-None-Match`
//! (an unchanged release costs one small 304), and when the manifest offers this target a
//! newer version that is not staged yet, not lower than the one `current` points at and not
//! known to be bad, it downloads the archive, checks its size and SHA-256 against the
//! manifest and its minisign signature against the keys compiled into gm, then unpacks it, checks its `build.json` and stages it with [`builds::stage_update`],
//! which runs its `gm --version` before `current` moves. A build that does not start is
//! refused and remembered as bad ([`state::mark_bad`]). The next worker start runs what it
//! staged.
//!
//! It runs on an arbiter of its own (unpacking and staging on blocking threads; only the
//! small state files are read there), so a slow network or a large archive never holds up a
//! call, and nothing it meets — a network failure, a bad archive, a bad checksum — changes
//! what is staged or reaches the session except as an [`UpdateEvent`] sent to the sink it
//! was given.
//!
//! - `manifest`: the manifest's shape and what it offers this target.
//! - `fetch`: the two HTTP requests.
//! - `signature`: the archive's minisign signature and the keys gm trusts.
//! - `unpack`: unpacking an archive safely and checking its `build.json`.
//! - `state`: `~/.gmnew/update.json`: the saved ETag, the bad versions, what it staged.
//! - `check`: one check, step by step.

mod check;
pub mod fetch;
pub mod manifest;
pub mod signature;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod unpack;

use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;
use reqwest::Client;
use serde::Serialize;
use tokio::sync::oneshot;
use url::Url;

use crate::builds::{self, BuildInfo, TARGET, VERSION};
pub use signature::TrustedKeys;

/// Where releases are published. `GMNEW_UPDATE_URL` replaces it.
pub const DEFAULT_MANIFEST_URL: &str = "https://github.com/AnEntrypoint/gm/releases/download/latest/manifest.json";
pub const CHECK_EVERY: Duration = Duration::from_secs(15 * 60);

/// What the updater reports, for the run log (`update` events, `status` naming the variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Message)]
#[rtype(result = "()")]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum UpdateEvent {
    /// Updates are off; no request is made.
    Off {
        why: String,
    },
    /// A manifest came (200): the version it lists for this target (none when it lists no
    /// build for it) and whether that is newer than the running build.
    Checked {
        version: Option<String>,
        newer: bool,
        running: &'static str,
        target: &'static str,
        /// The version `~/.gmnew/current` points at, when it points at one.
        #[serde(skip_serializing_if = "Option::is_none")]
        current: Option<String>,
        /// A newer version that an earlier check (or another gm) already staged.
        #[serde(rename = "alreadyStaged", skip_serializing_if = "std::ops::Not::not")]
        already_staged: bool,
    },
    Downloaded {
        version: String,
        bytes: u64,
        ms: u64,
    },
    Staged {
        version: String,
        dir: PathBuf,
    },
    /// A build that is not staged: the manifest offers a version lower than current's or one
    /// known to be bad, or its archive did not match the manifest, is not signed by gm's key,
    /// is not a build, or does not start. Nothing was staged.
    Refused {
        version: String,
        reason: &'static str,
        detail: String,
    },
    /// The check could not be done (network, HTTP status, an invalid manifest, the disk).
    /// Sent only when it differs from the previous check's outcome.
    Failed {
        error: String,
    },
}

/// Why a downloaded archive was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("bad signature: {0}")]
    BadSignature(String),
    #[error("bad sha256: the archive's is {got}, the manifest says {want}")]
    BadSha256 { got: String, want: String },
    #[error("wrong size: {got} bytes, the manifest says {want}")]
    WrongSize { got: String, want: u64 },
    #[error("bad archive: {0}")]
    BadArchive(String),
    #[error("build.json mismatch: {0}")]
    BuildJsonMismatch(String),
    #[error("{0}")]
    DoesNotStart(String),
    #[error("current points at {current}, a higher version; gm never moves current back")]
    OlderThanCurrent { current: String },
    #[error("this version was marked bad: {}", causes.join("; "))]
    KnownBad { causes: Vec<String> },
}

impl Refusal {
    /// The event's `reason`.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::BadSignature(_) => "bad-signature",
            Refusal::BadSha256 { .. } => "bad-sha256",
            Refusal::WrongSize { .. } => "wrong-size",
            Refusal::BadArchive(_) => "bad-archive",
            Refusal::BuildJsonMismatch(_) => "build-json-mismatch",
            Refusal::DoesNotStart(_) => "does-not-start",
            Refusal::OlderThanCurrent { .. } => "older-than-current",
            Refusal::KnownBad { .. } => "known-bad",
        }
    }
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Off {
        why: String,
    },
    /// 304: the manifest is the one handled last time.
    NotModified,
    /// The manifest offers nothing newer (`version` is what it lists for this target).
    UpToDate {
        version: Option<String>,
    },
    AlreadyStaged {
        version: String,
    },
    Staged {
        version: String,
        dir: PathBuf,
    },
    Refused {
        version: String,
        refusal: Refusal,
    },
    Failed {
        error: String,
    },
}

const DEVELOPMENT_BUILD: &str =
    "a development build (not made by gm dist) does not update itself; GMNEW_AUTO_UPDATE=1 turns it on";

/// Whether updates are on, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    On,
    Off { why: String },
}

impl Policy {
    /// From `GMNEW_AUTO_UPDATE` (unset or empty: the default) and whether this build was
    /// packaged by `gm dist`.
    pub fn decide(auto_update: Option<&str>, release: bool) -> Policy {
        match auto_update.map(str::trim).filter(|v| !v.is_empty()) {
            Some("0") => Policy::Off { why: "GMNEW_AUTO_UPDATE=0".into() },
            Some("1") => Policy::On,
            Some(other) => Policy::Off {
                why: format!("GMNEW_AUTO_UPDATE={other:?} is neither 0 nor 1; updates stay off until it is fixed"),
            },
            None if release => Policy::On,
            None => Policy::Off { why: DEVELOPMENT_BUILD.into() },
        }
    }
}

/// What the updater is told at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    Off { why: String },
    On { manifest_url: Url, root: PathBuf, every: Duration, keys: TrustedKeys },
}

impl Config {
    /// From the environment: `GMNEW_AUTO_UPDATE`, `GMNEW_UPDATE_URL`, `HOME`, whether the
    /// running build is a release, and for a development build `GMNEW_UPDATE_PUBKEY`.
    pub fn from_env() -> Config {
        let auto = std::env::var("GMNEW_AUTO_UPDATE").ok();
        let release = BuildInfo::running().release;
        if let Policy::Off { why } = Policy::decide(auto.as_deref(), release) {
            return Config::Off { why };
        }
        // A release build never reads the variable: nothing in its environment adds a key.
        let extra = if release { None } else { std::env::var(signature::PUBKEY_VAR).ok() };
        let keys = match TrustedKeys::for_build(release, extra.as_deref()) {
            Ok(keys) => keys,
            Err(e) => return Config::Off { why: e.to_string() },
        };
        let url = std::env::var("GMNEW_UPDATE_URL").ok().filter(|u| !u.trim().is_empty());
        let url = url.as_deref().unwrap_or(DEFAULT_MANIFEST_URL);
        let manifest_url = match Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            Ok(_) => return Config::Off { why: format!("GMNEW_UPDATE_URL {url:?} is not an http(s) URL") },
            Err(e) => return Config::Off { why: format!("GMNEW_UPDATE_URL {url:?} is not a URL: {e}") },
        };
        match builds::root() {
            Ok(root) => Config::On { manifest_url, root, every: CHECK_EVERY, keys },
            Err(e) => Config::Off { why: e.to_string() },
        }
    }
}

/// Check now; answers with this check's outcome (or the outcome of the check already running).
#[derive(Debug, Message)]
#[rtype(result = "Outcome")]
pub struct Check;

/// Answers once no check is running, with the last outcome — at first, the check made at
/// start (what a test waits for before it asks for more).
#[derive(Debug, Message)]
#[rtype(result = "Outcome")]
pub struct WaitIdle;

/// The last outcome, for tests and diagnostics.
#[derive(Debug, Message)]
#[rtype(result = "UpdateStatus")]
pub struct Status;

#[derive(Debug, Clone, PartialEq, Eq, MessageResponse)]
pub struct UpdateStatus {
    /// Checks finished.
    pub checks: u64,
    pub checking: bool,
    /// The last check's outcome (`Off` when updates are off), None before the first ends.
    pub last: Option<Outcome>,
}

pub struct Updater {
    config: Config,
    events: Recipient<UpdateEvent>,
    client: Option<Client>,
    checking: bool,
    checks: u64,
    last: Option<Outcome>,
    waiting: Vec<oneshot::Sender<Outcome>>,
}

impl Updater {
    /// Starts the updater. Off: the `off` event is sent before this returns and the actor,
    /// which will make no request, stays on the caller's arbiter. On: it starts on an arbiter
    /// of its own and checks at once.
    pub fn spawn(config: Config, events: Recipient<UpdateEvent>) -> Addr<Updater> {
        let updater =
            Updater { config, events, client: None, checking: false, checks: 0, last: None, waiting: Vec::new() };
        match &updater.config {
            Config::Off { why } => {
                updater.events.do_send(UpdateEvent::Off { why: why.clone() });
                updater.start()
            }
            Config::On { .. } => Updater::start_in_arbiter(&Arbiter::new().handle(), |_| updater),
        }
    }

    /// Starts a check unless one is running.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        let Config::On { manifest_url, root, keys, .. } = &self.config else { return };
        if self.checking {
            return;
        }
        let client = match &self.client {
            Some(c) => c.clone(),
            None => match fetch::client(&format!("gm/{VERSION} ({TARGET})")) {
                Ok(c) => self.client.insert(c).clone(),
                Err(e) => return self.finish(Outcome::Failed { error: e.to_string() }),
            },
        };
        self.checking = true;
        let job = check::Job {
            client,
            manifest_url: manifest_url.clone(),
            root: root.clone(),
            keys: keys.clone(),
            running: VERSION,
            target: TARGET,
            events: self.events.clone(),
        };
        ctx.spawn(check::run(job).into_actor(self).map(|outcome, act, _| act.finish(outcome)));
    }

    /// The outcome of the check running or about to begin.
    fn end_of_check(&mut self) -> ResponseFuture<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.waiting.push(tx);
        Box::pin(async move { rx.await.unwrap_or_else(|_| Outcome::Failed { error: "the updater stopped".into() }) })
    }

    fn finish(&mut self, outcome: Outcome) {
        self.checking = false;
        self.checks += 1;
        if let Outcome::Failed { error } = &outcome {
            // A network that stays down is said once, not every 15 minutes.
            if self.last.as_ref() != Some(&outcome) {
                self.events.do_send(UpdateEvent::Failed { error: error.clone() });
            }
        }
        for w in self.waiting.drain(..) {
            let _ = w.send(outcome.clone());
        }
        self.last = Some(outcome);
    }
}

impl Actor for Updater {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match &self.config {
            Config::Off { why } => self.last = Some(Outcome::Off { why: why.clone() }),
            Config::On { every, .. } => {
                ctx.run_interval(*every, |act, ctx| act.begin(ctx));
                self.begin(ctx);
            }
        }
    }
}

impl Handler<Check> for Updater {
    type Result = ResponseFuture<Outcome>;

    fn handle(&mut self, _: Check, ctx: &mut Context<Self>) -> Self::Result {
        if let Config::Off { why } = &self.config {
            let off = Outcome::Off { why: why.clone() };
            return Box::pin(async move { off });
        }
        let end = self.end_of_check();
        self.begin(ctx);
        end
    }
}

impl Handler<WaitIdle> for Updater {
    type Result = ResponseFuture<Outcome>;

    fn handle(&mut self, _: WaitIdle, _: &mut Context<Self>) -> Self::Result {
        match &self.last {
            Some(last) if !self.checking => {
                let last = last.clone();
                Box::pin(async move { last })
            }
            _ => self.end_of_check(),
        }
    }
}

impl Handler<Status> for Updater {
    type Result = UpdateStatus;

    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> UpdateStatus {
        UpdateStatus { checks: self.checks, checking: self.checking, last: self.last.clone() }
    }
}

#[cfg(test)]
mod tests;

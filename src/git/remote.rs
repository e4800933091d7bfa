//! Remotes: fetch and push, authenticating as git does (the ssh agent, then git's credential
//! helpers), and stopping a transfer when its call is cancelled.

use git2::{Cred, CredentialType, FetchOptions, PushOptions, Remote, RemoteCallbacks, Repository};
use gm_actors::cancel::CancelToken;
use serde::Serialize;

use super::{GitError, Repo};

/// A remote-tracking ref and the commit it points at.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteRef {
    #[serde(rename = "ref")]
    pub name: String,
    pub sha: String,
}

impl Repo {
    /// Fetches a remote's branches; returns its remote-tracking refs and where they point now.
    pub fn fetch(&self, remote_name: &str, cancel: &CancelToken) -> Result<Vec<RemoteRef>, GitError> {
        let mut remote =
            self.inner.find_remote(remote_name).map_err(|_| GitError::UnknownRev(format!("remote {remote_name}")))?;
        let tried = std::cell::Cell::new(0);
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(callbacks(&self.inner, &tried, cancel));
        remote.fetch::<&str>(&[], Some(&mut opts), None).map_err(|e| {
            if cancel.is_cancelled() {
                GitError::Cancelled
            } else {
                GitError::from(e)
            }
        })?;
        let prefix = format!("refs/remotes/{remote_name}/");
        let mut refs = Vec::new();
        for r in self.inner.references()?.flatten() {
            if let (Some(name), Some(oid)) = (r.name(), r.target()) {
                if name.starts_with(&prefix) {
                    refs.push(RemoteRef { name: name.to_owned(), sha: oid.to_string() });
                }
            }
        }
        Ok(refs)
    }

    /// Pushes one refspec. A rejection — an error from libgit2, or a ref the remote refused in its
    /// status report — is a [`GitError::Rejected`], so no caller mistakes it for success.
    pub fn push(&self, remote: &mut Remote, spec: &str, cancel: &CancelToken) -> Result<(), GitError> {
        let tried = std::cell::Cell::new(0);
        let rejected = std::cell::RefCell::new(None);
        let mut cb = callbacks(&self.inner, &tried, cancel);
        cb.push_update_reference(|refname, status| {
            if let Some(msg) = status {
                *rejected.borrow_mut() = Some(format!("{refname}: {msg}"));
            }
            Ok(())
        });
        let mut opts = PushOptions::new();
        opts.remote_callbacks(cb);
        remote.push(&[spec], Some(&mut opts)).map_err(|e| {
            let m = e.message().to_owned();
            if cancel.is_cancelled() {
                return GitError::Cancelled;
            }
            if m.contains("fast-forward") || m.contains("non-fast") || m.contains("not present locally") {
                GitError::Rejected(format!("{m}; the remote has commits this branch lacks: git_pull first"))
            } else {
                GitError::Git(m)
            }
        })?;
        drop(opts);
        match rejected.into_inner() {
            Some(why) => {
                Err(GitError::Rejected(format!("{why}; the remote has commits this branch lacks: git_pull first")))
            }
            None => Ok(()),
        }
    }
}

/// Callbacks that authenticate as git does (ssh agent, then credential helpers) and stop the
/// transfer when `cancel` trips.
fn callbacks<'a>(
    repo: &'a Repository,
    tried: &'a std::cell::Cell<u32>,
    cancel: &'a CancelToken,
) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    cb.transfer_progress(|_| !cancel.is_cancelled());
    cb.sideband_progress(|_| !cancel.is_cancelled());
    cb.push_negotiation(|_| {
        if cancel.is_cancelled() {
            Err(git2::Error::new(git2::ErrorCode::User, git2::ErrorClass::Callback, "cancelled"))
        } else {
            Ok(())
        }
    });
    cb.credentials(move |url, user, allowed| {
        tried.set(tried.get() + 1);
        if tried.get() > 4 {
            return Err(git2::Error::from_str("authentication failed (ssh agent and credential helpers were tried)"));
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            if let Some(user) = user {
                return Cred::ssh_key_from_agent(user);
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            if let Ok(config) = repo.config() {
                return Cred::credential_helper(&config, url, user);
            }
        }
        Cred::default()
    });
    cb
}

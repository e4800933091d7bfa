//! The worker follows its inputs: it outlives sessions, so a config it read at start and never
//! again would be stale for the next host. The child-server layers (`defaults/mcp.json`,
//! `.gm/mcp.json`, the `--mcp-config` file) and the approvals in `~/.gmnew/trust.json` are
//! looked at every second (`GM_CONFIG_POLL_MS`); a change to a layer reloads the config and
//! applies it to the running servers ([`Children::reconfigure`]); a change to the approvals
//! starts the waiting servers the user approved since ([`Children::recheck_approvals`]). The
//! user's `~/.gmnew/config.json` is followed too for its `otel` section: an export it turns on,
//! off or changes replaces the running one ([`crate::telemetry::follow`]), and the worker logs
//! an `otel` event. (Its `sandbox` section is not: a box changed under running shells would
//! hold some of them and not others; it applies to the next worker.)
//!
//! Polling, not the workspace watcher: two of the files live outside the workspace, and four
//! `stat`s a second cost nothing measurable.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::children::Children;
use crate::mcp_config;

const POLL: Duration = Duration::from_secs(1);

/// What a change of a file changes: its modification time, size and identity (an editor that
/// writes a new file and renames it over the old one changes the identity).
type Stamp = Option<(SystemTime, u64, Option<(u64, u64)>)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), gm_actors::sys::file_identity(&meta)))
}

/// Follows the config of the worker serving `workspace` (with the user's `named` config, if
/// any) for as long as the actix system runs; `otel` hears what a change of the user's config
/// file did to export. Call on gm's main arbiter.
pub fn follow(
    children: Arc<Children>,
    workspace: PathBuf,
    named: Option<PathBuf>,
    home: Option<PathBuf>,
    otel: impl Fn(serde_json::Value) + 'static,
) {
    let every = std::env::var("GM_CONFIG_POLL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(POLL, |ms| Duration::from_millis(ms.max(10)));
    let layers = mcp_config::layer_files(&workspace, named.as_deref());
    let approvals = children.approvals_file();
    actix::spawn(async move {
        let mut seen: Vec<Stamp> = layers.iter().map(|p| stamp(p)).collect();
        let mut approved = approvals.as_deref().map(stamp);
        let mut home_seen = home.as_deref().map(stamp);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let now: Vec<Stamp> = layers.iter().map(|p| stamp(p)).collect();
            if now != seen {
                seen = now;
                // A named config that went away keeps the servers of the last good read.
                if let Ok(config) = mcp_config::load(&workspace, named.as_deref()) {
                    children.reconfigure(&config);
                }
            }
            let approvals_now = approvals.as_deref().map(stamp);
            if approvals_now != approved {
                approved = approvals_now;
                children.recheck_approvals();
            }
            let home_now = home.as_deref().map(stamp);
            if home_now != home_seen {
                home_seen = home_now;
                // Building or retiring an exporter is quick, and its network work runs on the
                // export threads: nothing here waits for a collector.
                if let Some(fields) = crate::telemetry::follow(home.as_deref()) {
                    otel(fields);
                }
            }
        }
    });
}

//! Review: an adversarial second look, recorded. A packet gathers what a reviewer needs — the
//! spec, the referenced files, the diff of a commit range, the log events that witness the
//! work — as a wiki page under `reviews/`; each reviewer's verdict is recorded beside it; the
//! join passes only when every recorded verdict passes, with every finding listed.

use std::path::{Path, PathBuf};

use gm_actors::log_writer::{Event, Query};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::files::write_atomic;
use super::paths::resolve as resolve_path;
use super::{Ctx, VerbError};
use crate::git::{self, GitError, Repo};

/// Bytes of one referenced file (or the diff) put in a packet; past that the packet says how
/// much was cut and where the whole is.
const SECTION_CAP: usize = 64 * 1024;
const WITNESS_EVENTS: usize = 200;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PacketArgs {
    /// The spec the work answers to: a file path (inside or outside the workspace).
    pub spec: String,
    /// Files the reviewer should read.
    pub references: Option<Vec<String>>,
    /// The commits under review, e.g. "main~3..main" or "a1b2c3..HEAD".
    pub range: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PacketReply {
    pub packet: String,
    pub page: String,
    pub path: String,
    pub bytes: usize,
    pub references: usize,
    pub diff_files: usize,
    pub witnesses: usize,
}

fn reviews_dir(ctx: &Ctx) -> PathBuf {
    ctx.state_dir.join("wiki").join("reviews")
}

fn packet_path(ctx: &Ctx, packet: &str) -> Result<PathBuf, VerbError> {
    let ok = !packet.is_empty() && packet.len() <= 40 && packet.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !ok {
        return Err(VerbError::InvalidArgs(format!("'{packet}' is not a review packet id (like review-0001)")));
    }
    Ok(reviews_dir(ctx).join(format!("{packet}.md")))
}

/// A section's text, cut at the cap with a note naming the whole.
fn capped(text: &str, whole: &Path) -> String {
    if text.len() <= SECTION_CAP {
        return text.to_owned();
    }
    let kept = crate::text::head(text, SECTION_CAP);
    format!("{kept}\n[... {} bytes cut; the whole is {} ...]\n", text.len() - kept.len(), whole.display())
}

fn read_text(ctx: &Ctx, path: &str) -> Result<(PathBuf, String), VerbError> {
    let p = resolve_path(ctx, path)?;
    let text = super::files::read_text(&p)?;
    Ok((p, text))
}

fn next_packet(ctx: &Ctx) -> String {
    let max = std::fs::read_dir(reviews_dir(ctx))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("review-")?.split(['.', '-']).next()?.parse::<u32>().ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    format!("review-{:04}", max + 1)
}

pub async fn review_packet(ctx: Ctx, args: PacketArgs) -> Result<PacketReply, VerbError> {
    let (spec_path, spec) = read_text(&ctx, &args.spec)?;
    let mut refs = Vec::new();
    for r in args.references.unwrap_or_default() {
        refs.push(read_text(&ctx, &r)?);
    }
    let diff = match args.range.clone() {
        None => None,
        Some(range) => {
            let workspace = ctx.workspace.clone();
            let out_dir = ctx.state_dir.join("out");
            let d = tokio::task::spawn_blocking(move || -> Result<_, VerbError> {
                let repo = Repo::open(&workspace)?;
                let (from, to) = range
                    .split_once("..")
                    .ok_or_else(|| VerbError::InvalidArgs(format!("range '{range}' is not a..b")))?;
                let tree = |rev: &str| -> Result<git2::Tree, VerbError> {
                    let oid = repo.resolve(rev)?;
                    let commit = repo.find_commit(oid).map_err(|e| VerbError::from(GitError::from(e)))?;
                    commit.tree().map_err(|e| VerbError::from(GitError::from(e)))
                };
                let diff = repo
                    .diff_tree_to_tree(Some(&tree(from)?), Some(&tree(to)?), None)
                    .map_err(|e| VerbError::from(GitError::from(e)))?;
                Ok(git::describe(&diff, &out_dir)?)
            })
            .await
            .map_err(|e| VerbError::Internal(e.to_string()))??;
            Some(d)
        }
    };
    // The witnesses: what this workspace's log recorded, latest last.
    let q = Query { kind: Some("action".into()), since_seq: None, limit: WITNESS_EVENTS, newest: true, session: None };
    let log = super::log::read_log(&ctx, q).await?;
    let witnesses: Vec<Value> = log
        .events
        .iter()
        .map(|e| json!({ "seq": e["seq"], "tool": e["tool"], "outcome": e["outcome"], "ts": e["ts"] }))
        .collect();

    let dir = reviews_dir(&ctx);
    std::fs::create_dir_all(&dir).map_err(|e| VerbError::io("cannot create", &dir, e))?;
    let _guard = super::paths::lock(&ctx, &[&dir], gm_actors::file_locks::Mode::Write).await?;
    let packet = next_packet(&ctx);
    let mut page = format!(
        "# Review packet {packet}\n\n## Spec: {}\n\n````\n{}\n````\n",
        spec_path.display(),
        capped(&spec, &spec_path)
    );
    for (p, text) in &refs {
        page.push_str(&format!("\n## Reference: {}\n\n````\n{}\n````\n", p.display(), capped(text, p)));
    }
    let diff_files = diff.as_ref().map_or(0, |d| d.files.len());
    if let (Some(d), Some(range)) = (&diff, &args.range) {
        let whole =
            d.patch_file.clone().map(PathBuf::from).unwrap_or_else(|| PathBuf::from(format!("git_diff {range}")));
        page.push_str(&format!(
            "\n## Diff {range}: {} files, +{} -{}\n\n````diff\n{}\n````\n",
            d.files.len(),
            d.insertions,
            d.deletions,
            capped(&d.patch, &whole)
        ));
    }
    page.push_str(&format!("\n## Witnesses: {} action events of the run log\n\n", witnesses.len()));
    for w in &witnesses {
        page.push_str(&format!(
            "- seq {} {} {}\n",
            w["seq"],
            w["tool"].as_str().unwrap_or(""),
            w["outcome"].as_str().unwrap_or("")
        ));
    }
    let path = packet_path(&ctx, &packet)?;
    write_atomic(&path, page.as_bytes())?;
    ctx.log(Event::new(
            "review",
            json!({ "what": "packet", "packet": packet, "spec": spec_path, "references": refs.len(), "range": args.range, "witnesses": witnesses.len() }),
        ));
    Ok(PacketReply {
        page: format!("reviews/{packet}"),
        path: path.to_string_lossy().into_owned(),
        bytes: page.len(),
        references: refs.len(),
        diff_files,
        witnesses: witnesses.len(),
        packet,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordArgs {
    /// The packet reviewed (review-NNNN).
    pub packet: String,
    /// Who reviewed.
    pub reviewer: String,
    /// pass or fail.
    pub verdict: Verdict,
    /// What the reviewer found, one item each.
    pub findings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub reviewer: String,
    pub verdict: Verdict,
    pub findings: Vec<String>,
    pub ts: String,
}

fn records_path(ctx: &Ctx, packet: &str) -> Result<PathBuf, VerbError> {
    Ok(packet_path(ctx, packet)?.with_extension("records.json"))
}

fn load_records(path: &Path) -> Vec<Record> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

pub async fn review_record(ctx: Ctx, args: RecordArgs) -> Result<Value, VerbError> {
    if args.reviewer.trim().is_empty() {
        return Err(VerbError::InvalidArgs("reviewer is empty".into()));
    }
    let page = packet_path(&ctx, &args.packet)?;
    if !page.is_file() {
        return Err(VerbError::InvalidArgs(format!("no review packet {}", args.packet)));
    }
    let path = records_path(&ctx, &args.packet)?;
    let _guard = super::paths::lock(&ctx, &[&path], gm_actors::file_locks::Mode::Write).await?;
    let mut records = load_records(&path);
    records.push(Record {
        reviewer: args.reviewer.clone(),
        verdict: args.verdict,
        findings: args.findings.clone(),
        ts: gm_actors::clock::now_rfc3339(),
    });
    let text = serde_json::to_vec_pretty(&records).map_err(|e| VerbError::Internal(e.to_string()))?;
    write_atomic(&path, &text)?;
    ctx.log(Event::new(
            "review",
            json!({ "what": "record", "packet": args.packet, "reviewer": args.reviewer, "verdict": args.verdict, "findings": args.findings.len() }),
        ));
    Ok(json!({ "packet": args.packet, "records": records.len() }))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinArgs {
    /// The packet whose records to join.
    pub packet: String,
}

pub async fn review_join(ctx: Ctx, args: JoinArgs) -> Result<Value, VerbError> {
    let page = packet_path(&ctx, &args.packet)?;
    if !page.is_file() {
        return Err(VerbError::InvalidArgs(format!("no review packet {}", args.packet)));
    }
    let records = load_records(&records_path(&ctx, &args.packet)?);
    // No verdict is not a pass: a review nobody recorded proves nothing.
    let verdict =
        if !records.is_empty() && records.iter().all(|r| r.verdict == Verdict::Pass) { "pass" } else { "fail" };
    let findings: Vec<Value> = records
        .iter()
        .flat_map(|r| {
            r.findings.iter().map(move |f| json!({ "reviewer": r.reviewer, "verdict": r.verdict, "finding": f }))
        })
        .collect();
    let failing: Vec<&str> =
        records.iter().filter(|r| r.verdict == Verdict::Fail).map(|r| r.reviewer.as_str()).collect();
    let mut text = format!("# Review {} joined: {verdict}\n\n{} records", args.packet, records.len());
    if !failing.is_empty() {
        text.push_str(&format!("; failed by {}", failing.join(", ")));
    }
    text.push_str("\n\n");
    for f in &findings {
        text.push_str(&format!(
            "- {} ({}): {}\n",
            f["reviewer"].as_str().unwrap_or(""),
            f["verdict"].as_str().unwrap_or(""),
            f["finding"].as_str().unwrap_or("")
        ));
    }
    let join_path = page.with_extension("join.md");
    write_atomic(&join_path, text.as_bytes())?;
    ctx.log(Event::new(
        "review",
        json!({ "what": "join", "packet": args.packet, "verdict": verdict, "records": records.len() }),
    ));
    Ok(json!({
        "packet": args.packet,
        "verdict": verdict,
        "records": records.len(),
        "failedBy": failing,
        "findings": findings,
        "page": join_path,
    }))
}

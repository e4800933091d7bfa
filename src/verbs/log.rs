//! query_log: read the run log back.

use gm_actors::log_writer::{query_file, Query, QueryResult, ReadLog};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Ctx, VerbError};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 10_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueryLogArgs {
    /// Only events of this kind (start, action, code-call, end, skill-read, ...).
    pub kind: Option<String>,
    /// Only events with a seq greater than this.
    #[serde(alias = "since_seq")]
    pub since_seq: Option<u64>,
    /// At most this many events (default 100, at most 10000); `more` says how many matched past it.
    pub limit: Option<usize>,
    /// Only events of this host session ("mine" for the calling session's own).
    pub session: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryLogReply {
    pub events: Vec<Value>,
    pub more: usize,
    pub last_seq: u64,
    pub path: String,
    /// Why the log cannot be written now (a full disk): as in next_context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<Value>,
}

pub async fn query_log(ctx: Ctx, args: QueryLogArgs) -> Result<QueryLogReply, VerbError> {
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(VerbError::InvalidArgs(format!("limit must be between 1 and {MAX_LIMIT}")));
    }
    let session = match args.session.as_deref() {
        Some("mine") => Some(ctx.scope.as_ref().map(|s| s.session.to_string()).ok_or_else(|| {
            VerbError::InvalidArgs("session \"mine\" names the calling session; this call has none".into())
        })?),
        other => other.map(str::to_owned),
    };
    let q = Query { kind: args.kind, since_seq: args.since_seq, limit, newest: false, session };
    let result = read_log(&ctx, q).await?;
    Ok(QueryLogReply {
        events: result.events,
        more: result.more.unwrap_or(0),
        last_seq: result.last_seq,
        path: ctx.log_path().to_string_lossy().into_owned(),
        log_error: result.trouble,
    })
}

/// Reads the run log: through the LogWriter, its only reader, when the server has one (it reads
/// on a blocking thread, after writing out what it holds), else straight from the file (the
/// one-shot CLI).
pub async fn read_log(ctx: &Ctx, q: Query) -> Result<QueryResult, VerbError> {
    let path = ctx.log_path();
    match &ctx.log {
        Some(log) => log
            .send(ReadLog(q))
            .await
            .map_err(|e| VerbError::Internal(format!("log writer unavailable: {e}")))?
            .map_err(|e| VerbError::Internal(format!("cannot read the log: {e}"))),
        None => tokio::task::spawn_blocking(move || {
            query_file(&path, &q).map_err(|e| VerbError::io("cannot read the log", &path, e))
        })
        .await
        .map_err(|e| VerbError::Internal(e.to_string()))?,
    }
}

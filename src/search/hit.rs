//! What a search answers with, and the size past which a file is not searched by words: shared
//! by the line index, the location packing it relies on, and the scan that answers before the
//! index is built.

use serde::Serialize;

/// Files larger than this are not indexed (generated or data files); they are counted.
pub const MAX_FILE_BYTES: u64 = 8 << 20;

/// One line a search found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub path: String,
    pub line: u64,
    pub text: String,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

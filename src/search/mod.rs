//! Search over the workspace: the files git tracks, grep over them, a BM25 index of their
//! lines, and the wiki's pages. Library code: the verbs in `verbs/search.rs` are thin wrappers.

pub mod batch;
pub mod calls;
pub mod classify;
pub mod grep;
pub mod hit;
pub mod index;
pub mod index_actor;
pub mod loc;
pub mod provisional;
pub mod tokenizer;
pub mod tracked;
pub mod wiki;

//! The layering ARCHITECTURE.md promises, checked on the sources: the worker sits above the
//! server it runs (the server never names the worker), and the two protocol eras build on
//! `protocol/shared.rs` without importing each other.

use std::path::Path;

fn source(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).expect("source")
}

/// The code of a file without its comments (a doc comment may name anything).
fn code(rel: &str) -> String {
    source(rel).lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_server_never_imports_the_worker_that_runs_it() {
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server")).expect("src/server") {
        let path = entry.expect("entry").path();
        let rel = format!("src/server/{}", path.file_name().expect("name").to_string_lossy());
        let text = code(&rel);
        assert!(!text.contains("crate::worker"), "{rel} names the worker");
    }
}

#[test]
fn the_two_protocol_eras_never_import_each_other() {
    assert!(!code("src/protocol/mcp.rs").contains("modern::"), "mcp.rs imports modern.rs");
    assert!(!code("src/protocol/modern.rs").contains("use super::mcp"), "modern.rs imports mcp.rs");
    assert!(!code("src/protocol/shared.rs").contains("super::"), "shared.rs builds on neither era");
}

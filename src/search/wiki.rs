//! The wiki: markdown pages under `.gm/wiki/`, written atomically and ranked by BM25.
//!
//! Pages are few and small, so a search builds an in-memory tantivy index of them each time:
//! always current, nothing to keep in sync.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::schema::{IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value as _, STORED, STRING};
use tantivy::{doc, Index, TantivyDocument};

use super::tokenizer::{terms_query, words, CodeTokenizer};

#[derive(Debug, thiserror::Error)]
pub enum WikiError {
    #[error("invalid page name '{0}': use relative names of letters, digits, '-', '_', '.' and '/', without '..'")]
    BadName(String),
    #[error("wiki files in {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("wiki search: {0}")]
    Index(#[from] tantivy::TantivyError),
}

/// `<dir>/<page>.md` for a valid page name (`.md` is added when missing).
pub fn page_path(dir: &Path, page: &str) -> Result<PathBuf, WikiError> {
    let name = page.strip_suffix(".md").unwrap_or(page);
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && Path::new(name).components().all(|c| matches!(c, Component::Normal(_)))
        && !name.split('/').any(|s| s.starts_with('.'));
    if !ok {
        return Err(WikiError::BadName(page.to_owned()));
    }
    Ok(dir.join(format!("{name}.md")))
}

#[derive(Debug, Clone, Serialize)]
pub struct WikiHit {
    pub page: String,
    pub score: f32,
    /// The page's best-matching line.
    pub line: String,
    pub path: PathBuf,
}

/// Every page under `dir`: (name without `.md`, path).
pub fn pages(dir: &Path) -> Vec<(String, PathBuf)> {
    crate::walk::files_under(dir)
        .into_iter()
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("md"))
        .filter_map(|p| {
            let rel = p.strip_prefix(dir).ok()?;
            let name = rel.to_string_lossy().trim_end_matches(".md").replace('\\', "/");
            Some((name, p))
        })
        .collect()
}

/// Ranks the pages by BM25 against `query` (page names count too).
pub fn search(dir: &Path, query: &str, limit: usize) -> Result<(Vec<WikiHit>, usize), WikiError> {
    let mut b = Schema::builder();
    let indexing = TextFieldIndexing::default().set_tokenizer("code").set_index_option(IndexRecordOption::WithFreqs);
    let name = b.add_text_field("name", STRING | STORED);
    let title = b.add_text_field("title", TextOptions::default().set_indexing_options(indexing.clone()));
    let body = b.add_text_field("body", TextOptions::default().set_indexing_options(indexing).set_stored());
    let index = Index::create_in_ram(b.build());
    index.tokenizers().register("code", CodeTokenizer::default());
    let all = pages(dir);
    {
        let mut writer: tantivy::IndexWriter = index.writer(15_000_000)?;
        for (page, path) in &all {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            writer
                .add_document(doc!(name => page.as_str(), title => page.replace(['/', '-', '_'], " "), body => text))?;
        }
        writer.commit()?;
    }
    let reader = index.reader()?;
    let searcher = reader.searcher();
    let Some(q) = terms_query(&[title, body], query, IndexRecordOption::WithFreqs) else {
        return Ok((Vec::new(), all.len()));
    };
    let words = words(query);
    let mut hits = Vec::new();
    for (score, addr) in searcher.search(&*q, &TopDocs::with_limit(limit.max(1)))? {
        let d: TantivyDocument = searcher.doc(addr)?;
        let page = d.get_first(name).and_then(|v| v.as_str()).unwrap_or("").to_owned();
        let text = d.get_first(body).and_then(|v| v.as_str()).unwrap_or("");
        let line = best_line(text, &words);
        hits.push(WikiHit { path: dir.join(format!("{page}.md")), page, score, line });
    }
    Ok((hits, all.len()))
}

/// The line holding the most query words (the first line when none does).
fn best_line(text: &str, words: &[String]) -> String {
    text.lines()
        .map(|l| {
            let lower = l.to_lowercase();
            (words.iter().filter(|w| lower.contains(String::as_str(w))).count(), l)
        })
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n)
        .map(|(_, l)| l)
        .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_stay_inside_the_wiki() {
        let dir = Path::new("/w");
        assert_eq!(page_path(dir, "design/notes").expect("ok"), Path::new("/w/design/notes.md"));
        assert_eq!(page_path(dir, "a.md").expect("ok"), Path::new("/w/a.md"));
        for bad in ["", "../x", "/abs", "a/../b", ".hidden", "a b", "x/.y"] {
            assert!(page_path(dir, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pages_rank_by_bm25_with_the_best_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cache.md"), "# Cache\nThe cache evicts least recently used entries.\n")
            .expect("w");
        std::fs::write(dir.path().join("log.md"), "# Log\nThe log is append-only.\nNo cache here? one mention.\n")
            .expect("w");
        let (hits, total) = search(dir.path(), "cache eviction evicts", 10).expect("search");
        assert_eq!(total, 2);
        assert_eq!(hits[0].page, "cache");
        assert_eq!(hits[0].line, "The cache evicts least recently used entries.");
    }
}

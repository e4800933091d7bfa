//! Where an indexed line is: its file's id and its line number, packed into one fast field,
//! and the query that finds all the lines of a file (to delete them when it changes).
//!
//! One column instead of a file column, a line column and the file id's postings (which the
//! index needed to delete by term) makes the build of the kernel's index about 10% faster:
//! tantivy spends per document and per field. Deleting by a range of this column is fast
//! because a segment only holds the files indexed while it was written: the segments whose
//! smallest and largest values leave the file out are skipped without reading them.

use tantivy::columnar::{Column, ColumnIndex};
use tantivy::query::{ConstScorer, EmptyScorer, EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::{DocId, DocSet, Score, SegmentReader, TantivyError, TERMINATED};

/// The name of the fast field.
pub const FIELD: &str = "loc";

/// Bits of the line number. Files above the size cap are not indexed, and a file of that many
/// bytes has fewer lines than this allows.
const LINE_BITS: u32 = 24;
const _: () = assert!(super::hit::MAX_FILE_BYTES < 1 << LINE_BITS);

/// The packed location of line `line` of file `file`.
pub fn pack(file: u64, line: u64) -> u64 {
    file << LINE_BITS | line
}

/// The file id and line number of a packed location.
pub fn unpack(loc: u64) -> (u64, u64) {
    (loc >> LINE_BITS, loc & ((1 << LINE_BITS) - 1))
}

/// The file id a packed location is in.
pub fn file(loc: u64) -> u64 {
    loc >> LINE_BITS
}

/// Matches every line of a set of files: the files a commit replaces or drops, deleted with
/// one query, so that a branch switch touching thousands of files reads each segment's column
/// once instead of once per file.
#[derive(Debug, Clone)]
pub struct FilesLines {
    /// Sorted, without duplicates.
    ids: Vec<u64>,
}

impl FilesLines {
    pub fn new(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        Self { ids }
    }

    fn docs(&self, reader: &SegmentReader) -> tantivy::Result<Vec<DocId>> {
        let column: Column<u64> = reader.fast_fields().u64(FIELD)?;
        let (min, max) = (file(column.min_value()), file(column.max_value()));
        // A segment holds the files indexed while it was written: most are skipped here.
        let ids: Vec<u64> = self.ids.iter().copied().filter(|id| (min..=max).contains(id)).collect();
        let mut docs = Vec::new();
        if ids.is_empty() {
            return Ok(docs);
        }
        if ids.len() <= 8 || !matches!(column.index, ColumnIndex::Full) {
            for id in ids {
                let mut these = Vec::new();
                column.get_docids_for_value_range(
                    pack(id, 0)..=pack(id, (1 << LINE_BITS) - 1),
                    0..reader.max_doc(),
                    &mut these,
                );
                docs.extend(these);
            }
            docs.sort_unstable();
            docs.dedup();
            return Ok(docs);
        }
        // Many files: one pass over the column, every document's file looked up in the set.
        let mut values = vec![0u64; 4096];
        let mut start = 0u32;
        while start < reader.max_doc() {
            let n = (reader.max_doc() - start).min(values.len() as u32) as usize;
            column.values.get_range(u64::from(start), &mut values[..n]);
            for (i, &at) in values[..n].iter().enumerate() {
                if ids.binary_search(&file(at)).is_ok() {
                    docs.push(start + i as u32);
                }
            }
            start += n as u32;
        }
        Ok(docs)
    }
}

impl Query for FilesLines {
    fn weight(&self, _: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(self.clone()))
    }
}

impl Weight for FilesLines {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let docs = self.docs(reader)?;
        if docs.is_empty() {
            return Ok(Box::new(EmptyScorer));
        }
        Ok(Box::new(ConstScorer::new(Docs { docs, at: 0 }, boost)))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        if self.docs(reader)?.contains(&doc) {
            Ok(Explanation::new("a line of one of the files", 1.0))
        } else {
            Err(TantivyError::InvalidArgument(format!("document {doc} is not a line of those files")))
        }
    }
}

/// Documents in order (tantivy's own such set is for its tests only).
struct Docs {
    docs: Vec<DocId>,
    at: usize,
}

impl DocSet for Docs {
    fn advance(&mut self) -> DocId {
        self.at = (self.at + 1).min(self.docs.len());
        self.doc()
    }

    fn doc(&self) -> DocId {
        self.docs.get(self.at).copied().unwrap_or(TERMINATED)
    }

    fn size_hint(&self) -> u32 {
        self.docs.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_unpacks_to_its_file_and_line() {
        for (file, line) in [(0, 1), (1, 1), (7, 8_388_609), (u64::from(u32::MAX) + 5, 123)] {
            assert_eq!(unpack(pack(file, line)), (file, line));
            assert_eq!(super::file(pack(file, line)), file);
        }
        assert!(pack(3, (1 << LINE_BITS) - 1) < pack(4, 0), "a file's lines sort before the next file's");
    }

    /// The (file, line) locations left after indexing `segments` (each committed on its own,
    /// as (file, lines) pairs) and committing the `deletes` (each one query).
    fn left_after(segments: &[Vec<(u64, u64)>], deletes: &[Vec<u64>]) -> tantivy::Result<Vec<(u64, u64)>> {
        use tantivy::collector::DocSetCollector;
        use tantivy::query::AllQuery;
        use tantivy::schema::{Schema, FAST, TEXT};
        use tantivy::{doc, Index, IndexWriter};

        let mut b = Schema::builder();
        let (at, text) = (b.add_u64_field(FIELD, FAST), b.add_text_field("text", TEXT));
        let index = Index::create_in_ram(b.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000)?;
        for segment in segments {
            for &(file, lines) in segment {
                for line in 1..=lines {
                    writer.add_document(doc!(at => pack(file, line), text => "some words"))?;
                }
            }
            writer.commit()?;
        }
        for ids in deletes {
            writer.delete_query(Box::new(FilesLines::new(ids.clone())))?;
        }
        writer.commit()?;
        let searcher = index.reader()?.searcher();
        let mut left = Vec::new();
        for addr in searcher.search(&AllQuery, &DocSetCollector)? {
            let column = searcher.segment_reader(addr.segment_ord).fast_fields().u64(FIELD)?;
            left.extend(column.first(addr.doc_id).map(unpack));
        }
        left.sort_unstable();
        Ok(left)
    }

    #[test]
    fn deleting_a_files_lines_takes_them_from_every_segment_and_nothing_else() -> tantivy::Result<()> {
        // Three segments: files 1 and 2; file 3 and a later version of file 1; file 9 alone.
        // File 5 does not exist: its delete deletes nothing.
        let segments = [vec![(1, 3), (2, 2)], vec![(3, 2), (1, 1)], vec![(9, 4)]];
        let left = left_after(&segments, &[vec![1], vec![5]])?;
        assert_eq!(left, [(2, 1), (2, 2), (3, 1), (3, 2), (9, 1), (9, 2), (9, 3), (9, 4)]);
        Ok(())
    }

    #[test]
    fn deleting_many_files_lines_at_once_takes_exactly_theirs() -> tantivy::Result<()> {
        // Two segments of 40 files each, three lines per file.
        let segments = [(1..=40u64).map(|f| (f, 3)).collect(), (41..=80u64).map(|f| (f, 3)).collect()];
        // Many ids (the one-pass path) and a few (the range path), some of them absent.
        let many: Vec<u64> = (1..=80).filter(|f| f % 3 == 0).chain([500, 900]).collect();
        let left = left_after(&segments, &[many, vec![2, 2, 77, 1000]])?;
        let mut files: Vec<u64> = left.iter().map(|&(f, _)| f).collect();
        files.dedup();
        let expected: Vec<u64> = (1..=80).filter(|f| f % 3 != 0 && *f != 2 && *f != 77).collect();
        assert_eq!(files, expected);
        assert_eq!(left.len(), expected.len() * 3);
        Ok(())
    }
}

use std::path::Path;

use super::cache::{self, Saved, FORMAT_VERSION};
use super::*;

fn facts(rel: &str, src: &str) -> FileFacts {
    parse(rel, src.as_bytes().to_vec(), &mut Parser::new())
}

fn enclosing(f: &FileFacts, c: &facts::Call) -> String {
    f.def(c.enclosing).map_or("<top level>", |d| f.str(d.name)).to_owned()
}

#[test]
fn calls_methods_and_constructors_with_their_enclosing_function() {
    let f = facts(
        "a.ts",
        "function outer() { helper(1); obj.save(); }\nconst arrow = () => new Thing();\nclass C { run() { this.helper(); } }\nhelper();\n",
    );
    let got: Vec<(String, &str, String, usize)> = f
        .calls
        .iter()
        .map(|c| (f.str(c.callee).to_owned(), c.kind.as_str(), enclosing(&f, c), c.line as usize))
        .collect();
    assert_eq!(
        got,
        [
            ("helper".to_owned(), "call", "outer".to_owned(), 1),
            ("save".to_owned(), "method", "outer".to_owned(), 1),
            ("Thing".to_owned(), "new", "arrow".to_owned(), 2),
            ("helper".to_owned(), "method", "run".to_owned(), 3),
            ("helper".to_owned(), "call", "<top level>".to_owned(), 4),
        ]
    );
    let defs: Vec<&str> = f.definitions.iter().map(|d| f.str(d.name)).collect();
    assert_eq!(defs, ["outer", "arrow", "C", "run"]);
}

#[test]
fn import_and_export_aliases_are_recorded() {
    let f = facts("b.js", "import { load as fetchIt } from './a';\nexport { fetchIt as get };\nfetchIt();\n");
    let aliases: Vec<(&str, &str)> = f.imports.iter().map(|i| (f.str(i.local), f.str(i.name))).collect();
    assert_eq!(aliases, [("fetchIt", "load"), ("get", "fetchIt")]);
}

#[test]
fn tsx_and_jsx_parse() {
    let f = facts("c.tsx", "export const App = () => <div onClick={() => track('x')}>{render()}</div>;\n");
    let callees: Vec<&str> = f.calls.iter().map(|c| f.str(c.callee)).collect();
    assert_eq!(callees, ["track", "render"]);
}

/// A workspace of two files: `a.ts` defines and calls `helper`, `b.ts` calls it from `run`.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.ts", "export function helper() {}\nhelper();\n");
    write(dir.path(), "b.ts", "import { helper } from './a';\nfunction run() { helper(); }\n");
    dir
}

fn write(dir: &Path, rel: &str, text: &str) {
    std::fs::write(dir.join(rel), text).expect("write");
}

/// An index as gm starts one: a new process's, over the workspace's `.gm`.
fn index(dir: &Path) -> CallIndex {
    CallIndex::new(dir.to_owned(), dir.join(".gm"), crate::watch::Watcher::off("unit test").subscribe())
}

fn callers(index: &mut CallIndex, symbol: &str) -> CallersReply {
    index.callers(Callers { symbol: symbol.into(), path: None, limit: 50 }).expect("callers")
}

fn sites(r: &CallersReply) -> Vec<String> {
    r.callers.iter().map(|c| format!("{}:{} in {}", c.path, c.line, c.enclosing)).collect()
}

/// A first gm's whole run: its index answers once and is dropped, which waits for its save.
fn first_run(dir: &Path) -> CallersReply {
    let mut first = index(dir);
    let r = callers(&mut first, "helper");
    assert_eq!((r.files_parsed, r.files_scanned), (2, 2));
    r
}

fn cache_file(dir: &Path) -> PathBuf {
    dir.join(".gm").join("calls").join("cache.bin")
}

#[test]
fn a_new_index_answers_from_the_saved_cache_without_parsing_unchanged_files() {
    let dir = workspace();
    let before = first_run(dir.path());
    let saved_at = std::fs::metadata(cache_file(dir.path())).and_then(|m| m.modified()).expect("saved");
    let mut second = index(dir.path());
    let r = callers(&mut second, "helper");
    assert_eq!((r.files_parsed, r.files_scanned), (0, 2));
    assert_eq!(sites(&r), sites(&before));
    assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
    assert_eq!(r.definitions, before.definitions);
    drop(second);
    let now = std::fs::metadata(cache_file(dir.path())).and_then(|m| m.modified()).expect("saved");
    assert_eq!(now, saved_at, "a refresh that changed nothing does not write the cache again");
}

#[test]
fn a_file_changed_while_gm_was_not_running_is_parsed_again_and_its_new_call_found() {
    let dir = workspace();
    first_run(dir.path());
    write(
        dir.path(),
        "b.ts",
        "import { helper } from './a';\nfunction run() { helper(); }\nconst later = () => helper();\n",
    );
    let r = callers(&mut index(dir.path()), "helper");
    assert_eq!(r.files_parsed, 1);
    assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run", "b.ts:3 in later"]);
}

#[test]
fn a_touched_file_with_the_same_content_is_not_parsed_again() {
    let dir = workspace();
    first_run(dir.path());
    let touched = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    let file = std::fs::File::options().write(true).open(dir.path().join("a.ts")).expect("open");
    file.set_modified(touched).expect("touch");
    let mut second = index(dir.path());
    let r = callers(&mut second, "helper");
    assert_eq!(r.files_parsed, 0);
    assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
    drop(second);
    // The new mtime was saved: the next gm finds the file fresh without hashing it.
    let mut third = index(dir.path());
    third.refresh().expect("refresh");
    let want = mtime_ns(&std::fs::metadata(dir.path().join("a.ts")).expect("stat"));
    assert_eq!(third.store.get("a.ts").map(|c| c.mtime_ns), Some(want));
}

#[test]
fn a_damaged_truncated_or_other_version_cache_is_ignored_and_everything_parsed_again() {
    let dir = workspace();
    first_run(dir.path());
    let good = std::fs::read(cache_file(dir.path())).expect("saved");
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x55;
    let mut other_version = good.clone();
    other_version[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    // Another gm's languages or queries: its facts may differ from what this one reads.
    let mut other_languages = good.clone();
    other_languages[12] ^= 0xff;
    let damaged =
        [flipped, good[..good.len() / 2].to_vec(), other_version, other_languages, b"gm".to_vec(), Vec::new()];
    for bad in damaged {
        std::fs::write(cache_file(dir.path()), &bad).expect("damage");
        let mut again = index(dir.path());
        let r = callers(&mut again, "helper");
        assert_eq!(r.files_parsed, 2, "a damaged cache of {} bytes is not used", bad.len());
        assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
        drop(again);
        assert_eq!(std::fs::read(cache_file(dir.path())).expect("saved").len(), good.len(), "saved again");
    }
}

#[test]
fn a_temporary_left_by_a_save_cut_short_is_removed_once_old() {
    let dir = workspace();
    first_run(dir.path());
    let calls = dir.path().join(".gm").join("calls");
    let (old, recent) = (calls.join(".cache.bin.gm-tmp-1-0"), calls.join(".cache.bin.gm-tmp-2-0"));
    for f in [&old, &recent] {
        std::fs::write(f, b"half a cache").expect("write");
    }
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&old).and_then(|f| f.set_modified(an_hour_ago)).expect("age");
    assert_eq!(callers(&mut index(dir.path()), "helper").files_parsed, 0);
    assert!(!old.exists() && recent.exists(), "only the old one is removed: the recent one may be a live save's");
}

#[test]
fn a_file_deleted_between_runs_is_gone_from_the_answer() {
    let dir = workspace();
    first_run(dir.path());
    std::fs::remove_file(dir.path().join("b.ts")).expect("rm");
    let mut second = index(dir.path());
    let r = callers(&mut second, "helper");
    assert_eq!((r.files_parsed, r.files_scanned), (0, 1));
    assert_eq!(sites(&r), ["a.ts:2 in <top level>"]);
    drop(second);
    assert_eq!(callers(&mut index(dir.path()), "helper").files_scanned, 1);
    let (_, saved) = Saved::open(&cache_file(dir.path()), u64::MAX).expect("saved");
    let saved = saved.entries;
    assert_eq!(
        saved.iter().map(|e| &e.path).collect::<Vec<_>>(),
        ["a.ts"],
        "the dropped file is dropped from the saved cache"
    );
}

#[test]
fn a_touch_during_a_session_is_not_parsed_again_but_a_same_size_edit_is() {
    let dir = workspace();
    let mut idx = index(dir.path());
    assert_eq!(callers(&mut idx, "helper").files_parsed, 2);
    let file = std::fs::File::options().write(true).open(dir.path().join("a.ts")).expect("open");
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60)).expect("touch");
    assert_eq!(callers(&mut idx, "helper").files_parsed, 0);
    // Same size, new content: the hash differs, so the file is parsed.
    write(dir.path(), "a.ts", "export function helper() {}\nhelpex();\n");
    let r = callers(&mut idx, "helper");
    assert_eq!(r.files_parsed, 1);
    assert_eq!(sites(&r), ["b.ts:2 in run"]);
}

fn sites_of(dir: &Path, symbol: &str) -> Vec<String> {
    let r = callers(&mut index(dir), symbol);
    r.callers.iter().map(|c| format!("{}:{} {} {}", c.path, c.line, c.kind, c.resolution)).collect()
}

#[test]
fn a_method_called_on_an_expression_may_be_any_type_s_and_stays_in_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.py", "class Repo:\n    def save(self):\n        pass\n\n\ndef make():\n    return Repo()\n\n\nmake().save()\nitems[0].save()\n");
    assert_eq!(sites_of(dir.path(), "Repo.save"), ["a.py:10 method ambiguous", "a.py:11 method ambiguous"]);
}

#[test]
fn a_path_through_a_crate_s_directory_reaches_its_function_and_calls_in_macro_arguments_count_unresolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("rand-0.8.8/src")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("app/src")).expect("mkdir");
    write(dir.path(), "rand-0.8.8/src/lib.rs", "pub fn thread_rng() -> u32 {\n    4\n}\n");
    write(
        dir.path(),
        "app/src/main.rs",
        "fn main() {\n    let x = rand::thread_rng();\n    assert_eq!(rand::thread_rng(), x);\n    std::thread_rng();\n}\n",
    );
    assert_eq!(
        sites_of(dir.path(), "thread_rng"),
        ["app/src/main.rs:2 call exact", "app/src/main.rs:3 call unresolved"]
    );
}

#[test]
fn a_source_file_with_a_byte_that_is_not_utf8_still_has_its_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut source = b"def helper():\n    pass\n\n# caf".to_vec();
    source.extend_from_slice(&[0xe9, b'\n']);
    source.extend_from_slice(b"helper()\n");
    std::fs::write(dir.path().join("latin1.py"), source).expect("write");
    assert_eq!(sites_of(dir.path(), "helper"), ["latin1.py:5 call exact"]);
}

/// An index that reads its saved cache piece by piece, as it does a kernel-size one.
fn piecewise_index(dir: &Path) -> CallIndex {
    let mut index = index(dir);
    index.check_whole_below = 0;
    index
}

/// Two languages, a class hierarchy and a renaming import: every kind of fact the saved
/// cache keeps beside the facts (module, bases, renames) is used by one of the questions.
fn richer_workspace() -> tempfile::TempDir {
    let dir = workspace();
    write(
        dir.path(),
        "shapes.py",
        "class Shape:\n    def area(self):\n        return 0\n\n\nclass Square(Shape):\n    def area(self):\n        return helper_py()\n\n\ndef helper_py():\n    pass\n\n\ndef total(s: Shape):\n    return s.area() + helper_py()\n",
    );
    write(dir.path(), "use.py", "from shapes import helper_py as hp\n\n\ndef run():\n    hp()\n    Square().area()\n");
    dir
}

fn answers(index: &mut CallIndex) -> Vec<String> {
    let mut out = Vec::new();
    for symbol in ["helper", "helper_py", "Shape.area", "area", "run", "nothing"] {
        out.push(format!("{:?}", callers(index, symbol).callers));
        let r = index.impact(Impact { symbol: symbol.into(), depth: 3 }).expect("impact");
        out.push(format!("{:?} {:?}", r.nodes, r.edges));
    }
    for file in ["shapes.py", "a.ts"] {
        let r = index.symbols(Symbols { target: SymbolsOf::File(file.into()), offset: 0, limit: 100 });
        out.push(format!("{:?}", r.map(|r| serde_json::to_string(&r).unwrap_or_default()).ok()));
    }
    let query = SymbolsOf::Query { query: "area".into(), kind: None, path: None };
    let r = index.symbols(Symbols { target: query, offset: 0, limit: 100 });
    out.push(format!("{:?}", r.map(|r| serde_json::to_string(&r).unwrap_or_default()).ok()));
    out
}

#[test]
fn a_cache_read_piece_by_piece_after_a_restart_answers_exactly_as_the_parse_did() {
    let dir = richer_workspace();
    let mut first = index(dir.path());
    let parsed = answers(&mut first);
    drop(first);
    let mut second = piecewise_index(dir.path());
    assert_eq!(answers(&mut second), parsed);
    assert_eq!(callers(&mut second, "helper").files_parsed, 0, "nothing was parsed again");
    assert!(parsed.iter().any(|a| a.contains("use.py")), "the renaming import is followed: {parsed:?}");
}

#[test]
fn a_file_edited_after_a_restart_replaces_its_saved_sites_and_names() {
    let dir = richer_workspace();
    callers(&mut index(dir.path()), "helper");
    let mut second = piecewise_index(dir.path());
    assert_eq!(sites(&callers(&mut second, "helper")), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
    // An outside edit while this gm runs (no watcher here: every call checks size and mtime).
    write(dir.path(), "b.ts", "import { helper } from './a';\nfunction walk() {\n  helper();\n}\n");
    write(dir.path(), "a.ts", "export function helper() {}\n");
    let r = callers(&mut second, "helper");
    assert_eq!(r.files_parsed, 2);
    assert_eq!(sites(&r), ["b.ts:3 in walk"], "the saved sites of both files are gone");
    drop(second);
    let r = callers(&mut piecewise_index(dir.path()), "helper");
    assert_eq!((r.files_parsed, sites(&r)), (0, vec!["b.ts:3 in walk".to_owned()]), "and saved so");
}

/// The saved cache's bytes with one byte flipped where `place` says.
fn damage(dir: &Path, place: impl Fn(&[cache::Entry], usize) -> usize) {
    let file = cache_file(dir);
    let entries = Saved::open(&file, u64::MAX).expect("a sound cache").1.entries;
    let mut bytes = std::fs::read(&file).expect("read");
    let at = place(&entries, bytes.len());
    bytes[at] ^= 0x20;
    std::fs::write(&file, bytes).expect("damage");
}

#[test]
fn a_damaged_piece_found_while_answering_is_never_used_the_tree_is_parsed_again() {
    let facts_of_b = |entries: &[cache::Entry], _: usize| {
        let b = entries.iter().find(|e| e.path == "b.ts").expect("b.ts saved").facts;
        b.offset as usize + b.len as usize / 2
    };
    // The name table's records end where the first file's facts start; with two names (both
    // in bucket 0 of 16) every byte of them is `helper`'s bucket.
    let names =
        |entries: &[cache::Entry], _: usize| entries.iter().map(|e| e.facts.offset as usize).min().expect("facts") - 3;
    for place in [&facts_of_b as &dyn Fn(&[cache::Entry], usize) -> usize, &names] {
        let dir = workspace();
        let before = first_run(dir.path());
        damage(dir.path(), place);
        let mut again = piecewise_index(dir.path());
        let r = callers(&mut again, "helper");
        assert_eq!(sites(&r), sites(&before), "a damaged piece gives no wrong answer");
        assert_eq!(r.files_parsed, 2, "everything was parsed again");
        drop(again);
        Saved::open(&cache_file(dir.path()), u64::MAX).expect("a sound cache was saved again");
    }
}

#[test]
fn an_outline_from_damaged_saved_facts_is_parsed_from_the_file() {
    let dir = workspace();
    first_run(dir.path());
    damage(dir.path(), |entries, _| {
        let a = entries.iter().find(|e| e.path == "a.ts").expect("a.ts saved").facts;
        a.offset as usize + 1
    });
    let mut again = piecewise_index(dir.path());
    again.refresh().expect("refresh");
    let r = again.symbols(Symbols { target: SymbolsOf::File("a.ts".into()), offset: 0, limit: 10 }).expect("outline");
    let SymbolsReply::Outline(outline) = r else { panic!("an outline") };
    assert_eq!(outline.symbols.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["helper"]);
}

#[test]
fn a_cache_cut_short_or_grown_is_not_opened() {
    let dir = workspace();
    first_run(dir.path());
    let good = std::fs::read(cache_file(dir.path())).expect("saved");
    for bad in [good[..good.len() - 1].to_vec(), [good.as_slice(), b"x"].concat()] {
        std::fs::write(cache_file(dir.path()), &bad).expect("write");
        assert!(Saved::open(&cache_file(dir.path()), 0).is_err(), "{} bytes of {}", bad.len(), good.len());
        let r = callers(&mut piecewise_index(dir.path()), "helper");
        assert_eq!((r.files_parsed, sites(&r).len()), (2, 2));
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git").args(args).current_dir(dir).status().is_ok_and(|s| s.success());
    assert!(ok, "git {args:?}");
}

#[test]
fn with_git_s_index_unchanged_a_restart_checks_the_saved_files_and_a_new_tracked_file_is_found_once_added() {
    let dir = workspace();
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "a.ts", "b.ts"]);
    drop(first_run(dir.path()));
    // Unchanged index: the saved list of files is checked, and an edit found.
    write(dir.path(), "b.ts", "import { helper } from './a';\nfunction run() {\n  helper();\n}\n");
    let r = callers(&mut index(dir.path()), "helper");
    assert_eq!((r.files_parsed, sites(&r)), (1, vec!["a.ts:2 in <top level>".to_owned(), "b.ts:3 in run".to_owned()]));
    // A new file is tracked once added: the index changed, so it is read again.
    write(dir.path(), "c.ts", "import { helper } from './a';\nhelper();\n");
    assert_eq!(callers(&mut index(dir.path()), "helper").total, 2, "not tracked yet");
    git(dir.path(), &["add", "c.ts"]);
    let r = callers(&mut index(dir.path()), "helper");
    assert_eq!((r.files_parsed, r.files_scanned, r.total), (1, 3, 3));
    std::fs::remove_file(dir.path().join("c.ts")).expect("rm");
    let r = callers(&mut index(dir.path()), "helper");
    assert_eq!((r.files_scanned, r.total), (2, 2), "a tracked file gone from the disk is gone");
}

#[test]
fn kotlin_imports_bind_their_last_name_or_alias_to_the_package_before_it() {
    let f = facts("a.kt", "import shop.store.Cache\nimport shop.store.helper as assist\nimport shop.util.*\n");
    let imports: Vec<(&str, &str, &str)> =
        f.imports.iter().map(|i| (f.str(i.local), f.str(i.name), f.str(i.module))).collect();
    assert_eq!(imports, [("Cache", "Cache", "shop.store"), ("assist", "helper", "shop.store")]);
}

#[test]
fn a_swift_extension_s_methods_belong_to_the_extended_type() {
    let f = facts("a.swift", "extension Repo: Codable {\n    func reload() { self.save(0) }\n}\n");
    let defs: Vec<(&str, &str)> = f.definitions.iter().map(|d| (f.str(d.name), f.str(d.owner))).collect();
    assert_eq!(defs, [("Repo", ""), ("reload", "Repo")]);
    let calls: Vec<(&str, &str)> = f.calls.iter().map(|c| (f.str(c.callee), f.str(c.recv_type))).collect();
    assert_eq!(calls, [("save", "Repo")]);
}

#[test]
fn scala_imports_bind_selectors_and_renames_to_the_path_before_them() {
    let f = facts("a.scala", "import shop.store.Repo\nimport shop.store.{Cache, Util => U}\nimport shop._\n");
    let imports: Vec<(&str, &str, &str)> =
        f.imports.iter().map(|i| (f.str(i.local), f.str(i.name), f.str(i.module))).collect();
    assert_eq!(
        imports,
        [("Repo", "Repo", "shop.store"), ("Cache", "Cache", "shop.store"), ("U", "Util", "shop.store")]
    );
}

#[test]
fn a_kotlin_property_types_this_dot_property_in_the_class_s_methods() {
    let f = facts("a.kt", "class Shop {\n    private val repo: Repo = Repo()\n    private val cache = Cache()\n    fun run() { this.repo.save(1); cache.save(2) }\n}\n");
    let calls: Vec<(&str, &str)> = f.calls.iter().map(|c| (f.str(c.callee), f.str(c.recv_type))).collect();
    assert_eq!(calls, [("Repo", ""), ("Cache", ""), ("save", "Repo"), ("save", "Cache")]);
}

#[test]
fn a_haskell_function_of_several_equations_is_one_definition() {
    let f = facts("a.hs", "count :: Int -> Int\ncount 0 = 0\ncount n = 1 + count (n - 1)\n");
    let defs: Vec<(&str, u32, u32)> = f.definitions.iter().map(|d| (f.str(d.name), d.line, d.end_line)).collect();
    assert_eq!(defs, [("count", 2, 3)], "one definition, from its first equation to its last");
    let calls: Vec<(&str, String)> = f.calls.iter().map(|c| (f.str(c.callee), enclosing(&f, c))).collect();
    assert_eq!(calls, [("count", "count".to_owned())]);
}

//! The `map` verb: the repository's most referenced definitions within a budget, through the
//! real binary over MCP (`--surface tools` and a run_code body).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{git, write, Gm};
use serde_json::{json, Value};

/// A workspace in Python and JavaScript, committed to git: `shared_helper` is called from four
/// files, `formatName` from two, `lib/many.py`'s functions once each (from one file), and
/// `focus/lonely.py`'s functions by nothing.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = &dir.path().canonicalize().expect("canonical");
    write(d, "core/util.py", "def shared_helper(x):\n    return x\n\n\ndef unused_here():\n    return 0\n");
    write(d, "core/other.py", "def rarely():\n    return 1\n");
    write(
        d,
        "app/a.py",
        "from core.util import shared_helper\n\n\ndef run_a():\n    shared_helper(1)\n    shared_helper(2)\n    shared_helper(3)\n",
    );
    write(
        d,
        "app/b.py",
        "from core.util import shared_helper\nfrom app.a import run_a\n\n\ndef run_b():\n    shared_helper(1)\n    run_a()\n",
    );
    let many: String =
        (0..20).map(|i| format!("def many_function_number_{i}(value):\n    return value\n\n\n")).collect();
    write(d, "lib/many.py", &many);
    let calls: String = (0..20).map(|i| format!("    many_function_number_{i}(1)\n")).collect();
    write(d, "app/c.py", "from core.util import shared_helper\n\n\ndef run_c():\n    shared_helper(1)\n");
    write(
        d,
        "app/d.py",
        &format!("from core.util import shared_helper\nfrom lib.many import *\n\n\ndef run_d():\n    shared_helper(1)\n{calls}"),
    );
    write(
        d,
        "web/util.js",
        "export function formatName(n) {\n  return String(n);\n}\n\nexport function neverCalled() {}\n",
    );
    write(
        d,
        "web/page.js",
        "import { formatName } from './util';\n\nfunction render() {\n  formatName(1);\n  formatName(2);\n}\n",
    );
    write(d, "web/other.js", "import { formatName } from './util';\n\nfunction show() {\n  return formatName(3);\n}\n");
    write(d, "focus/lonely.py", "def lonely_one():\n    return 1\n\n\ndef lonely_two():\n    return 2\n");
    git(d, &["init", "-q"]);
    git(d, &["add", "."]);
    dir
}

fn serve(dir: &Path, args: &[&str]) -> Gm {
    Gm::ready_in(dir, args)
}

/// A gm on the default surface, ready for run_code bodies.
fn serve_js(dir: &Path) -> Gm {
    let mut gm = Gm::start_in(dir, &[], &[]);
    gm.ready();
    gm
}

fn stop(mut gm: Gm) {
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(10)).expect("gm exits");
}

fn text(r: &Value) -> &str {
    r["map"].as_str().expect("map text")
}

/// The file headers of a map, in order.
fn headers(r: &Value) -> Vec<&str> {
    text(r).lines().filter(|l| !l.starts_with(' ')).collect()
}

#[test]
fn the_most_called_function_leads_the_map_and_the_map_fits_its_budget() {
    let dir = fixture();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let r = gm.call_ok("map", json!({}));
    let map = text(&r);
    assert!(map.starts_with("core/util.py:\n  def shared_helper(x):\n"), "{map}");
    assert_eq!(headers(&r)[1], "web/util.js:", "formatName, called from two files, comes next: {map}");
    assert!(map.contains("  export function formatName(n)\n"), "the signature without its brace: {map}");
    assert!(!map.contains("lonely_one"), "nothing references it: {map}");
    assert_eq!(r["cut"], 0, "2000 tokens hold this whole tree: {r}");
    assert_eq!(r["tokens"], map.len().div_ceil(4), "{r}");

    let small = gm.call_ok("map", json!({ "tokens": 50 }));
    let map = text(&small);
    assert!(map.len() <= 50 * 4, "{} bytes: {map}", map.len());
    assert!(
        map.starts_with("core/util.py:\n  def shared_helper(x):\n"),
        "the best one stays when the map is cut: {map}"
    );
    let cut = small["cut"].as_u64().expect("cut");
    let shown = small["definitions"].as_u64().expect("definitions");
    assert!(cut > 0, "{small}");
    assert_eq!(shown + cut, r["definitions"].as_u64().expect("definitions"), "cut counts what was left out: {small}");
    stop(gm);
}

#[test]
fn a_focus_file_comes_first_even_when_nothing_references_it() {
    let dir = fixture();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let r = gm.call_ok("map", json!({ "tokens": 50, "focus": ["focus/lonely.py"] }));
    let map = text(&r);
    assert!(map.starts_with("focus/lonely.py:\n  def lonely_one():\n  def lonely_two():\n"), "{map}");
    // A word raises the names it is a word of, above every other.
    let r = gm.call_ok("map", json!({ "tokens": 50, "focus": ["lonely"] }));
    assert!(text(&r).starts_with("focus/lonely.py:\n  def lonely_one():\n  def lonely_two():\n"), "{r}");
    let r = gm.call_ok("map", json!({ "path": "web" }));
    assert_eq!(headers(&r), ["web/util.js:"], "path keeps the map to a folder: {r}");
    stop(gm);
}

#[test]
fn the_same_tree_maps_byte_for_byte_the_same_across_calls_and_restarts() {
    let dir = fixture();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let mut first = gm.call_ok("map", json!({ "focus": ["app/b.py", "format"] }));
    let second = gm.call_ok("map", json!({ "focus": ["app/b.py", "format"] }));
    assert_eq!(first["fresh"], 11, "the first call parses the tree: {first}");
    assert_eq!(second["fresh"], 0, "the second parses nothing: {second}");
    first["fresh"] = json!(0);
    assert_eq!(first, second, "the same answer, byte for byte");
    stop(gm);
    // A new gm reads the saved cache, in another order than the parse made it.
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    let third = gm.call_ok("map", json!({ "focus": ["app/b.py", "format"] }));
    assert_eq!(text(&first), text(&third));
    stop(gm);
}

#[test]
fn an_edit_outside_gm_reranks_the_map_in_a_run_code_body() {
    let dir = fixture();
    let d = &dir.path().canonicalize().expect("canonical");
    let mut gm = serve_js(d);
    let body = "const m = await gm.map({ tokens: 50 }); return { map: m.map, fresh: m.fresh };";
    let before = gm.js(body);
    assert!(before["map"].as_str().is_some_and(|m| m.starts_with("core/util.py:\n")), "{before}");
    // Every file that called helper now calls rarely, five times.
    let rarely = "from core.other import rarely\n\n\ndef run_x():\n    rarely()\n    rarely()\n    rarely()\n    rarely()\n    rarely()\n";
    for f in ["app/a.py", "app/b.py"] {
        write(d, f, &rarely.replace("run_x", &format!("run_{}", &f[4..5])));
    }
    let after = gm.js(body);
    assert!(after["map"].as_str().is_some_and(|m| m.starts_with("core/other.py:\n  def rarely():\n")), "{after}");
    assert_eq!(after["fresh"], 2, "only the two edited files were parsed again: {after}");
    stop(gm);
}

#[test]
fn bad_arguments_are_refused_with_what_to_give() {
    let dir = fixture();
    let mut gm = serve(dir.path(), &["--surface", "tools"]);
    for (args, says) in [
        (json!({ "tokens": 0 }), "tokens must be between 50 and 100000"),
        (json!({ "tokens": 1_000_000 }), "tokens must be between"),
        (json!({ "focus": [""] }), "empty item"),
        (json!({ "focus": ["/etc/passwd"] }), "outside the workspace"),
        (json!({ "focus": ["../x.py"] }), "outside the workspace"),
        (json!({ "path": "../x" }), "outside the workspace"),
        (json!({ "budget": 10 }), "budget"),
    ] {
        let e = gm.call_err("map", args.clone());
        assert_eq!(e["code"], "invalid_args", "{args}: {e}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(says)), "{args}: {e}");
    }
    stop(gm);
    let mut gm = serve_js(dir.path());
    let r = gm.js("const e = await gm.try(() => gm.map({ tokens: 10 })); return e.error.code;");
    assert_eq!(r, "invalid_args");
    stop(gm);
}

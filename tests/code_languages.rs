//! callers, impact and symbols in a small real repository per language (tests/fixtures/code):
//! the real binary over MCP. Each repository has the same shape — a `save` method on two
//! types behind a common base, a helper function called through an alias import and a
//! qualified call, a call in a closure or nested function, a call whose receiver's type is
//! unknown, a file with a syntax error — so the answers line up across languages.

mod common;

use std::path::{Path, PathBuf};

use common::{git, Gm};
use serde_json::{json, Value};

/// A fixture repository copied into a fresh git repository (permissions kept: a script's
/// executable bit says it is one).
fn repository(lang: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/code").join(lang), &root);
    git(&root, &["init", "-q"]);
    git(&root, &["add", "."]);
    (dir, root)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn serve(dir: &Path) -> Gm {
    let mut gm = Gm::start_in(dir, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm
}

fn s(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("").to_owned()
}

/// `path:line enclosing resolution` per call site.
fn sites(r: &Value) -> Vec<String> {
    r["callers"]
        .as_array()
        .expect("callers")
        .iter()
        .map(|c| format!("{}:{} {} {}", s(c, "path"), c["line"], s(c, "enclosing"), s(c, "resolution")))
        .collect()
}

/// `from -> to path:line` per edge.
fn edges(r: &Value) -> Vec<String> {
    r["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| format!("{} -> {} {}:{}", s(e, "from"), s(e, "to"), s(e, "path"), e["line"]))
        .collect()
}

/// `kind name [children]` per outline entry.
fn outline(symbols: &Value) -> Vec<String> {
    symbols
        .as_array()
        .expect("symbols")
        .iter()
        .map(|x| {
            let children = x.get("children").map(outline).unwrap_or_default();
            let head = format!("{} {}", s(x, "kind"), s(x, "name"));
            if children.is_empty() {
                head
            } else {
                format!("{head} [{}]", children.join(", "))
            }
        })
        .collect()
}

/// What one language's repository must answer.
struct Expect {
    lang: &'static str,
    /// `Type.save`: the method of one type.
    method: &'static str,
    method_sites: &'static [&'static str],
    /// The bare method name: every type's.
    name: &'static str,
    name_sites: &'static [&'static str],
    name_definitions: usize,
    /// The helper, called through an alias and a qualified path.
    function: &'static str,
    function_sites: &'static [&'static str],
    impact: &'static [&'static str],
    outline_file: &'static str,
    outline: &'static [&'static str],
    broken_file: &'static str,
    broken: &'static [&'static str],
}

fn check(e: Expect) {
    let (_dir, root) = repository(e.lang);
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": e.method }));
    assert_eq!(sites(&r), e.method_sites, "{}: callers {}: {r}", e.lang, e.method);
    assert_eq!(r["definitions"].as_array().map(Vec::len), Some(1), "{}: {r}", e.lang);
    assert_eq!(r["ambiguous"], true, "{}: a receiver of unknown type may reach another save: {r}", e.lang);
    assert!(r["excluded"].as_u64() >= Some(1), "{}: the other type's call is left out: {r}", e.lang);

    let r = gm.call_ok("callers", json!({ "symbol": e.name }));
    assert_eq!(sites(&r), e.name_sites, "{}: callers {}: {r}", e.lang, e.name);
    assert_eq!(r["definitions"].as_array().map(Vec::len), Some(e.name_definitions), "{}: {r}", e.lang);
    assert_eq!(r["ambiguous"], true, "{}: {r}", e.lang);

    let r = gm.call_ok("callers", json!({ "symbol": e.function }));
    assert_eq!(sites(&r), e.function_sites, "{}: callers {}: {r}", e.lang, e.function);
    assert_eq!(r["ambiguous"], false, "{}: {r}", e.lang);

    let r = gm.call_ok("impact", json!({ "symbol": e.function }));
    assert_eq!(edges(&r), e.impact, "{}: impact {}: {r}", e.lang, e.function);

    let r = gm.call_ok("symbols", json!({ "file": e.outline_file }));
    assert_eq!(outline(&r["symbols"]), e.outline, "{}: outline of {}: {r}", e.lang, e.outline_file);
    assert_eq!(r["language"], e.lang);
    assert!(r["symbols"][0]["signature"].as_str().is_some_and(|s| !s.is_empty()), "{r}");

    let r = gm.call_ok("symbols", json!({ "file": e.broken_file }));
    assert_eq!(outline(&r["symbols"]), e.broken, "{}: what parses of {}: {r}", e.lang, e.broken_file);
    assert_eq!(r["partial"], true, "{}: {r}", e.lang);
}

#[test]
fn python_calls_resolve_through_self_annotations_aliases_and_modules() {
    check(Expect {
        lang: "python",
        method: "Repo.save",
        method_sites: &[
            "shop/app.py:6 checkout exact",
            "shop/app.py:9 checkout ambiguous",
            "shop/store.py:6 flush exact",
        ],
        name: "save",
        name_sites: &[
            "shop/app.py:6 checkout exact",
            "shop/app.py:8 checkout exact",
            "shop/app.py:9 checkout ambiguous",
            "shop/store.py:6 flush exact",
        ],
        name_definitions: 2,
        function: "helper",
        function_sites: &["broken.py:2 ok exact", "shop/app.py:12 inner exact", "shop/app.py:14 checkout exact"],
        impact: &[
            "ok -> helper broken.py:2",
            "inner -> helper shop/app.py:12",
            "checkout -> helper shop/app.py:14",
            "checkout -> inner shop/app.py:15",
        ],
        outline_file: "shop/store.py",
        outline: &["class Repo [method save, method flush]", "class Cache [method save]", "function helper"],
        broken_file: "broken.py",
        broken: &["function ok", "function bad"],
    });
}

#[test]
fn rust_calls_resolve_through_impl_blocks_traits_use_aliases_and_paths() {
    check(Expect {
        lang: "rust",
        method: "Repo.save",
        method_sites: &[
            "src/app.rs:4 checkout exact",
            "src/app.rs:7 checkout ambiguous",
            "src/store.rs:17 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/app.rs:4 checkout exact",
            "src/app.rs:6 checkout exact",
            "src/app.rs:7 checkout ambiguous",
            "src/store.rs:17 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &[
            "src/app.rs:8 checkout exact",
            "src/app.rs:10 checkout exact",
            "src/app.rs:12 checkout unresolved",
            "src/broken.rs:2 ok exact",
        ],
        impact: &[
            "checkout -> helper src/app.rs:8",
            "checkout -> helper src/app.rs:10",
            "checkout -> helper src/app.rs:12",
            "ok -> helper src/broken.rs:2",
        ],
        outline_file: "src/store.rs",
        outline: &[
            "trait Saver [method save]",
            "struct Repo",
            "struct Cache",
            "impl Repo [method new, method flush]",
            "impl Repo [method save]",
            "impl Cache [method save]",
            "function helper",
        ],
        broken_file: "src/broken.rs",
        broken: &["function ok"],
    });
}

#[test]
fn go_calls_resolve_through_receivers_and_import_names() {
    check(Expect {
        lang: "go",
        method: "Repo.Save",
        method_sites: &[
            "app/app.go:10 Checkout exact",
            "app/app.go:13 Checkout ambiguous",
            "store/store.go:22 Flush exact",
        ],
        name: "Save",
        name_sites: &[
            "app/app.go:10 Checkout exact",
            "app/app.go:12 Checkout exact",
            "app/app.go:13 Checkout ambiguous",
            "store/store.go:22 Flush exact",
        ],
        name_definitions: 3,
        function: "Helper",
        function_sites: &["app/app.go:14 Checkout exact"],
        impact: &["Checkout -> Helper app/app.go:14"],
        outline_file: "store/store.go",
        outline: &[
            "interface Saver [method Save]",
            "struct Repo",
            "struct Cache",
            "function NewRepo",
            "method Save",
            "method Flush",
            "method Save",
            "function Helper",
        ],
        broken_file: "util/broken.go",
        broken: &["function Ok", "function local"],
    });
}

#[test]
fn java_calls_resolve_through_typed_locals_static_imports_and_the_class_s_own_methods() {
    check(Expect {
        lang: "java",
        method: "Repo.save",
        method_sites: &[
            "src/main/java/com/acme/app/App.java:10 checkout exact",
            "src/main/java/com/acme/app/App.java:13 checkout ambiguous",
            "src/main/java/com/acme/store/Repo.java:16 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/main/java/com/acme/app/App.java:10 checkout exact",
            "src/main/java/com/acme/app/App.java:12 checkout exact",
            "src/main/java/com/acme/app/App.java:13 checkout ambiguous",
            "src/main/java/com/acme/store/Repo.java:16 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &[
            "src/main/java/com/acme/app/App.java:14 checkout exact",
            "src/main/java/com/acme/app/App.java:16 checkout exact",
        ],
        impact: &[
            "App.checkout -> Util.helper src/main/java/com/acme/app/App.java:14",
            "App.checkout -> Util.helper src/main/java/com/acme/app/App.java:16",
        ],
        outline_file: "src/main/java/com/acme/store/Repo.java",
        outline: &["class Repo [method open, method save, method flush]"],
        broken_file: "src/main/java/com/acme/app/Broken.java",
        broken: &["class Broken [method ok]"],
    });
}

#[test]
fn cpp_calls_resolve_through_classes_namespaces_aliases_and_out_of_class_definitions() {
    check(Expect {
        lang: "cpp",
        method: "Repo.save",
        method_sites: &["src/app.cpp:8 checkout exact", "src/app.cpp:11 checkout ambiguous", "src/store.cpp:14 flush exact"],
        name: "save",
        name_sites: &[
            "src/app.cpp:8 checkout exact",
            "src/app.cpp:10 checkout exact",
            "src/app.cpp:11 checkout ambiguous",
            "src/store.cpp:14 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["src/app.cpp:12 checkout exact", "src/app.cpp:15 checkout exact"],
        impact: &["checkout -> helper src/app.cpp:12", "checkout -> helper src/app.cpp:15"],
        outline_file: "src/store.hpp",
        outline: &["module shop [class Saver [method save], class Repo [method open, method save, method flush], class Cache [method save], module util [function helper]]"],
        broken_file: "src/broken.cpp",
        broken: &["function ok"],
    });
}

#[test]
fn csharp_calls_resolve_through_typed_locals_using_aliases_and_static_classes() {
    check(Expect {
        lang: "csharp",
        method: "Repo.Save",
        method_sites: &["App/App.cs:11 Run exact", "App/App.cs:14 Run ambiguous", "Store/Store.cs:21 Flush exact"],
        name: "Save",
        name_sites: &[
            "App/App.cs:11 Run exact",
            "App/App.cs:13 Run exact",
            "App/App.cs:14 Run ambiguous",
            "Store/Store.cs:21 Flush exact",
        ],
        name_definitions: 3,
        function: "Helper",
        function_sites: &["App/App.cs:15 Run exact", "App/App.cs:18 Run exact"],
        impact: &["Checkout.Run -> Util.Helper App/App.cs:15", "Checkout.Run -> Util.Helper App/App.cs:18"],
        outline_file: "Store/Store.cs",
        outline: &["module Acme.Store [interface ISaver [method Save], class Repo [method Open, method Save, method Flush], class Cache [method Save], class Util [method Helper]]"],
        broken_file: "App/Broken.cs",
        broken: &["class Broken [method Ok, method Bad]"],
    });
}

#[test]
fn ruby_calls_resolve_through_instance_variables_new_and_module_paths() {
    check(Expect {
        lang: "ruby",
        method: "Repo.save",
        method_sites: &["lib/shop/app.rb:10 run exact", "lib/shop/app.rb:13 run ambiguous", "lib/shop/store.rb:18 flush exact"],
        name: "save",
        name_sites: &[
            "lib/shop/app.rb:10 run exact",
            "lib/shop/app.rb:12 run exact",
            "lib/shop/app.rb:13 run ambiguous",
            "lib/shop/store.rb:18 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["lib/shop/app.rb:14 run exact", "lib/shop/app.rb:17 run exact"],
        impact: &["Checkout.run -> helper lib/shop/app.rb:14", "Checkout.run -> helper lib/shop/app.rb:17"],
        outline_file: "lib/shop/store.rb",
        outline: &["module Shop [class Saver [method save], class Repo [method open, method save, method flush], class Cache [method save], module Util [method helper]]"],
        broken_file: "lib/shop/broken.rb",
        broken: &["function ok"],
    });
}

#[test]
fn php_calls_resolve_through_this_typed_parameters_and_use_function_aliases() {
    check(Expect {
        lang: "php",
        method: "Repo.save",
        method_sites: &[
            "src/App/Checkout.php:13 run exact",
            "src/App/Checkout.php:16 run ambiguous",
            "src/Store/Store.php:25 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/App/Checkout.php:13 run exact",
            "src/App/Checkout.php:15 run exact",
            "src/App/Checkout.php:16 run ambiguous",
            "src/Store/Store.php:25 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["src/App/Checkout.php:17 run exact", "src/App/Checkout.php:20 run exact"],
        impact: &["Checkout.run -> helper src/App/Checkout.php:17", "Checkout.run -> helper src/App/Checkout.php:20"],
        outline_file: "src/Store/Store.php",
        outline: &[
            "module App\\Store",
            "interface Saver [method save]",
            "class Repo [method open, method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "src/App/Broken.php",
        broken: &["function ok"],
    });
}

#[test]
fn typescript_calls_resolve_through_annotations_aliases_and_namespace_imports() {
    check(Expect {
        lang: "typescript",
        method: "Repo.save",
        method_sites: &[
            "src/app.ts:5 checkout exact",
            "src/app.ts:8 checkout ambiguous",
            "src/store.ts:17 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/app.ts:5 checkout exact",
            "src/app.ts:7 checkout exact",
            "src/app.ts:8 checkout ambiguous",
            "src/store.ts:17 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["src/app.ts:9 inner exact", "src/app.ts:12 checkout exact"],
        impact: &[
            "inner -> helper src/app.ts:9",
            "checkout -> helper src/app.ts:12",
            "checkout -> inner src/app.ts:11",
        ],
        outline_file: "src/store.ts",
        outline: &[
            "interface Saver [method save]",
            "class Repo [method open, method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "src/broken.ts",
        broken: &["function ok"],
    });
}

/// C has no methods, imports or qualified calls: its cases are two files' `static` functions
/// of one name, a call through a function pointer, and macros.
#[test]
fn c_calls_resolve_to_the_file_s_own_static_function_and_macros_are_counted_unresolved() {
    let (_dir, root) = repository("c");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "local" }));
    assert_eq!(sites(&r), ["src/app.c:15 checkout exact", "src/store.c:18 repo_save exact"], "{r}");
    assert_eq!(r["ambiguous"], true, "two files define a static local: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "helper" }));
    assert_eq!(sites(&r), ["src/app.c:14 checkout exact", "src/broken.c:5 ok exact"], "{r}");
    assert_eq!(
        r["definitions"],
        json!([{ "path": "src/store.c", "line": 22, "kind": "function" }]),
        "the prototype in the header is not a second definition: {r}"
    );
    let r = gm.call_ok("callers", json!({ "symbol": "SQUARE" }));
    assert_eq!(sites(&r), ["src/app.c:15 checkout unresolved", "src/store.c:24 helper unresolved"], "{r}");
    assert_eq!((r["callers"][0]["kind"].as_str(), r["unresolved"].as_u64()), (Some("macro"), Some(2)), "{r}");
    let r = gm.call_ok("callers", json!({ "symbol": "save" }));
    assert_eq!(sites(&r), ["src/app.c:13 checkout unresolved"], "a call through a function pointer: {r}");
    let r = gm.call_ok("impact", json!({ "symbol": "local", "depth": 2 }));
    assert_eq!(
        edges(&r),
        ["checkout -> local src/app.c:15", "repo_save -> local src/store.c:18", "checkout -> repo_save src/app.c:12"],
        "{r}"
    );
    let r = gm.call_ok("symbols", json!({ "file": "include/store.h" }));
    assert_eq!(
        outline(&r["symbols"]),
        [
            "constant STORE_H",
            "macro SQUARE",
            "constant MAX_ITEMS",
            "struct repo",
            "function repo_open",
            "function repo_save",
            "function helper"
        ],
        "{r}"
    );
    assert_eq!(r["symbols"][4]["declaration"], true, "{r}");
    assert_eq!(r["symbols"][1]["endLine"], 4, "a #define ends on its own line: {r}");
    let r = gm.call_ok("symbols", json!({ "file": "src/broken.c" }));
    assert_eq!((outline(&r["symbols"]), &r["partial"]), (vec!["function ok".to_owned()], &json!(true)), "{r}");
}

/// JavaScript, with a shebang script without extension (read as JavaScript), a shell script
/// and a Perl file (languages gm does not parse: skipped and counted).
#[test]
fn javascript_calls_resolve_and_a_script_is_read_by_its_shebang_while_other_languages_are_counted() {
    check(Expect {
        lang: "javascript",
        method: "Repo.save",
        method_sites: &[
            "lib/app.js:6 checkout exact",
            "lib/app.js:9 checkout ambiguous",
            "lib/store.js:11 flush exact",
        ],
        name: "save",
        name_sites: &[
            "lib/app.js:6 checkout exact",
            "lib/app.js:8 checkout exact",
            "lib/app.js:9 checkout ambiguous",
            "lib/store.js:11 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["lib/app.js:10 inner exact", "lib/app.js:13 checkout exact"],
        impact: &[
            "inner -> helper lib/app.js:10",
            "checkout -> helper lib/app.js:13",
            "checkout -> inner lib/app.js:12",
            "main -> checkout bin/tool:5",
            "<top level> -> main bin/tool:8",
        ],
        outline_file: "lib/store.js",
        outline: &[
            "class Repo [method open, method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "lib/broken.js",
        broken: &["function ok"],
    });
    let (_dir, root) = repository("javascript");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "checkout" }));
    assert_eq!(sites(&r), ["bin/tool:5 main exact"], "{r}");
    assert_eq!(r["skipped"], json!({ "perl": 1, "shell": 1 }), "{r}");
    assert_eq!(r["filesScanned"], 4, "lib/*.js and bin/tool: {r}");
    let r = gm.call_ok("symbols", json!({ "file": "bin/tool" }));
    assert_eq!(
        (r["language"].as_str(), outline(&r["symbols"])),
        (Some("javascript"), vec!["function main [method save]".to_owned()])
    );
}

#[test]
fn kotlin_calls_resolve_through_declared_types_companion_objects_and_import_aliases() {
    check(Expect {
        lang: "kotlin",
        method: "Repo.save",
        method_sites: &[
            "src/main/kotlin/shop/app/App.kt:10 run exact",
            "src/main/kotlin/shop/app/App.kt:13 run ambiguous",
            "src/main/kotlin/shop/store/Store.kt:15 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/main/kotlin/shop/app/App.kt:10 run exact",
            "src/main/kotlin/shop/app/App.kt:12 run exact",
            "src/main/kotlin/shop/app/App.kt:13 run ambiguous",
            "src/main/kotlin/shop/store/Store.kt:15 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &[
            "src/main/kotlin/shop/app/App.kt:14 inner exact",
            "src/main/kotlin/shop/app/App.kt:17 run exact",
        ],
        impact: &[
            "inner -> helper src/main/kotlin/shop/app/App.kt:14",
            "Checkout.run -> helper src/main/kotlin/shop/app/App.kt:17",
            "Checkout.run -> inner src/main/kotlin/shop/app/App.kt:17",
            "main -> Checkout.run src/main/kotlin/shop/app/App.kt:23",
        ],
        outline_file: "src/main/kotlin/shop/store/Store.kt",
        outline: &[
            "interface Saver [method save]",
            "class Repo [method open, method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "src/main/kotlin/shop/app/Broken.kt",
        broken: &["function ok"],
    });
}

#[test]
fn swift_calls_resolve_through_stored_properties_initializers_and_module_qualifiers() {
    check(Expect {
        lang: "swift",
        method: "Repo.save",
        method_sites: &[
            "Sources/App/App.swift:11 run exact",
            "Sources/App/App.swift:14 run ambiguous",
            "Sources/Store/Store.swift:15 flush exact",
        ],
        name: "save",
        name_sites: &[
            "Sources/App/App.swift:11 run exact",
            "Sources/App/App.swift:13 run exact",
            "Sources/App/App.swift:14 run ambiguous",
            "Sources/Store/Store.swift:15 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["Sources/App/App.swift:15 inner exact", "Sources/App/App.swift:18 run exact"],
        impact: &[
            "inner -> helper Sources/App/App.swift:15",
            "Checkout.run -> helper Sources/App/App.swift:18",
            "Checkout.run -> inner Sources/App/App.swift:18",
            "main -> Checkout.run Sources/App/App.swift:24",
        ],
        outline_file: "Sources/Store/Store.swift",
        outline: &[
            "interface Saver [method save]",
            "class Repo [method open, method save, method flush]",
            "struct Cache [method save]",
            "function helper",
        ],
        broken_file: "Sources/App/Broken.swift",
        broken: &["function ok"],
    });
}

#[test]
fn scala_calls_resolve_through_companion_objects_class_parameters_and_renaming_imports() {
    check(Expect {
        lang: "scala",
        method: "Repo.save",
        method_sites: &[
            "src/main/scala/shop/app/App.scala:8 run exact",
            "src/main/scala/shop/app/App.scala:11 run ambiguous",
            "src/main/scala/shop/store/Store.scala:11 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/main/scala/shop/app/App.scala:8 run exact",
            "src/main/scala/shop/app/App.scala:10 run exact",
            "src/main/scala/shop/app/App.scala:11 run ambiguous",
            "src/main/scala/shop/store/Store.scala:11 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &[
            "src/main/scala/shop/app/App.scala:12 inner exact",
            "src/main/scala/shop/app/App.scala:15 run exact",
        ],
        impact: &[
            "inner -> Util.helper src/main/scala/shop/app/App.scala:12",
            "Checkout.run -> Util.helper src/main/scala/shop/app/App.scala:15",
            "Checkout.run -> inner src/main/scala/shop/app/App.scala:15",
            "Main.main -> Checkout.run src/main/scala/shop/app/App.scala:22",
        ],
        outline_file: "src/main/scala/shop/store/Store.scala",
        outline: &[
            "trait Saver [method save]",
            "class Repo [method save, method flush]",
            "class Repo [method open]",
            "class Cache [method save]",
        ],
        broken_file: "src/main/scala/shop/app/Broken.scala",
        broken: &["class Broken", "function ok"],
    });
}

#[test]
fn lua_calls_resolve_through_self_require_and_the_new_constructor_convention() {
    check(Expect {
        lang: "lua",
        method: "Repo.save",
        method_sites: &[
            "shop/app.lua:7 checkout exact",
            "shop/app.lua:10 checkout ambiguous",
            "shop/store.lua:15 flush exact",
        ],
        name: "save",
        name_sites: &[
            "shop/app.lua:7 checkout exact",
            "shop/app.lua:9 checkout exact",
            "shop/app.lua:10 checkout ambiguous",
            "shop/store.lua:15 flush exact",
        ],
        name_definitions: 2,
        function: "helper",
        function_sites: &["shop/app.lua:11 inner exact"],
        impact: &[
            "inner -> M.helper shop/app.lua:11",
            "checkout -> inner shop/app.lua:13",
            "main -> checkout shop/app.lua:17",
        ],
        outline_file: "shop/store.lua",
        outline: &[
            "class M",
            "class Repo",
            "method new",
            "method save",
            "method flush",
            "class Cache",
            "method new",
            "method save",
            "method helper",
        ],
        broken_file: "shop/broken.lua",
        broken: &["function ok"],
    });
}

/// Bash has no types, receivers or qualified names: its cases are functions called as commands
/// (in a command substitution, a pipeline, a condition), a script without extension read by its
/// shebang, and a function two scripts define.
#[test]
fn bash_commands_resolve_to_functions_and_a_name_two_scripts_define_is_not_certain() {
    let (_dir, root) = repository("bash");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "repo_save" }));
    assert_eq!(sites(&r), ["bin/deploy:5 checkout exact", "lib/store.sh:9 repo_flush exact"], "{r}");
    let r = gm.call_ok("callers", json!({ "symbol": "helper" }));
    assert_eq!(
        sites(&r),
        ["bin/deploy:7 checkout exact", "bin/deploy:9 checkout exact"],
        "in a command substitution and in a pipeline: {r}"
    );
    let r = gm.call_ok("callers", json!({ "symbol": "log" }));
    assert_eq!(
        sites(&r),
        ["bin/deploy:14 main ambiguous", "lib/lint.sh:5 <top level> exact", "lib/store.sh:10 repo_flush exact"],
        "a script's own function is certain, a name two scripts define is not: {r}"
    );
    assert_eq!(r["ambiguous"], true, "{r}");
    let r = gm.call_ok("impact", json!({ "symbol": "helper" }));
    assert_eq!(
        edges(&r),
        [
            "checkout -> helper bin/deploy:7",
            "checkout -> helper bin/deploy:9",
            "main -> checkout bin/deploy:15",
            "<top level> -> main bin/deploy:18"
        ],
        "{r}"
    );
    let r = gm.call_ok("symbols", json!({ "file": "lib/store.sh" }));
    assert_eq!(
        outline(&r["symbols"]),
        ["function repo_save", "function repo_flush", "function helper", "function log"],
        "{r}"
    );
    let r = gm.call_ok("symbols", json!({ "file": "bin/deploy" }));
    assert_eq!(
        (r["language"].as_str(), outline(&r["symbols"])),
        (Some("bash"), vec!["function checkout".to_owned(), "function main".to_owned()]),
        "{r}"
    );
    let r = gm.call_ok("symbols", json!({ "file": "lib/broken.sh" }));
    assert_eq!((outline(&r["symbols"]), &r["partial"]), (vec!["function ok".to_owned()], &json!(true)), "{r}");
}

#[test]
fn elixir_calls_resolve_through_module_qualifiers_aliases_and_anonymous_functions() {
    check(Expect {
        lang: "elixir",
        method: "Repo.save",
        method_sites: &[
            "lib/shop/checkout.ex:8 run exact",
            "lib/shop/checkout.ex:10 run ambiguous",
            "lib/shop/store.ex:9 flush exact",
        ],
        name: "save",
        name_sites: &[
            "lib/shop/checkout.ex:8 run exact",
            "lib/shop/checkout.ex:9 run exact",
            "lib/shop/checkout.ex:10 run ambiguous",
            "lib/shop/store.ex:9 flush exact",
        ],
        name_definitions: 2,
        function: "helper",
        function_sites: &[
            "lib/shop/checkout.ex:11 inner exact",
            "lib/shop/checkout.ex:12 run exact",
            "lib/shop/store.ex:20 twice exact",
            "lib/shop/store.ex:20 twice exact",
        ],
        impact: &[
            "inner -> helper lib/shop/checkout.ex:11",
            "run -> helper lib/shop/checkout.ex:12",
            "twice -> helper lib/shop/store.ex:20",
            "twice -> helper lib/shop/store.ex:20",
            "run -> inner lib/shop/checkout.ex:12",
            "main -> run lib/shop/checkout.ex:17",
        ],
        outline_file: "lib/shop/store.ex",
        outline: &[
            "module Shop.Repo [function save, function flush]",
            "module Shop.Cache [function save]",
            "module Shop.Util [function helper, function twice]",
        ],
        broken_file: "lib/shop/broken.ex",
        broken: &["module Shop.Broken", "function ok"],
    });
}

/// Haskell dispatches a class method on its arguments' types, which gm does not infer: the
/// cases are qualified and listed imports, `where` functions, a function of several equations,
/// and a class method two instances define.
#[test]
fn haskell_calls_resolve_through_qualified_imports_and_a_class_method_stays_ambiguous() {
    let (_dir, root) = repository("haskell");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "helper" }));
    assert_eq!(
        sites(&r),
        ["src/Shop/App.hs:7 run exact", "src/Shop/App.hs:7 run exact", "src/Shop/App.hs:9 inner exact"],
        "S.helper through the qualified import, helper through the listed one: {r}"
    );
    let r = gm.call_ok("callers", json!({ "symbol": "save" }));
    assert_eq!(sites(&r), ["src/Shop/Store.hs:23 flush ambiguous"], "two instances define save: {r}");
    assert_eq!(r["definitions"].as_array().map(Vec::len), Some(3), "the class's and two instances': {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "count" }));
    assert_eq!(sites(&r), ["src/Shop/Store.hs:30 count exact"], "two equations are one function: {r}");
    assert_eq!(r["definitions"].as_array().map(Vec::len), Some(1), "{r}");
    let r = gm.call_ok("impact", json!({ "symbol": "helper" }));
    assert_eq!(
        edges(&r),
        [
            "run -> helper src/Shop/App.hs:7",
            "run -> helper src/Shop/App.hs:7",
            "inner -> helper src/Shop/App.hs:9",
            "main -> run src/Shop/App.hs:12",
            "run -> inner src/Shop/App.hs:7"
        ],
        "{r}"
    );
    let r = gm.call_ok("symbols", json!({ "file": "src/Shop/Store.hs" }));
    assert_eq!(
        outline(&r["symbols"]),
        [
            "interface Saver [method save]",
            "type Repo",
            "type Cache",
            "module Repo [function save]",
            "module Cache [function save]",
            "function flush",
            "function helper",
            "function count"
        ],
        "{r}"
    );
    // The grammar's error recovery keeps nothing of this file: it is only said to be partial.
    let r = gm.call_ok("symbols", json!({ "file": "src/Shop/Broken.hs" }));
    assert_eq!(r["partial"], true, "{r}");
}

/// Zig has no closures: the nested function is a local struct's, `Local.inner()`; a file is
/// imported by its path, `@import("store.zig")`, and `const help = store.helper;` aliases a
/// member of it.
#[test]
fn zig_calls_resolve_through_typed_parameters_init_and_file_imports() {
    check(Expect {
        lang: "zig",
        method: "Repo.save",
        method_sites: &[
            "src/app.zig:8 checkout exact",
            "src/app.zig:11 checkout ambiguous",
            "src/store.zig:16 flush exact",
        ],
        name: "save",
        name_sites: &[
            "src/app.zig:8 checkout exact",
            "src/app.zig:10 checkout exact",
            "src/app.zig:11 checkout ambiguous",
            "src/store.zig:16 flush exact",
        ],
        name_definitions: 2,
        function: "helper",
        function_sites: &["src/app.zig:14 inner exact", "src/app.zig:18 checkout exact"],
        impact: &[
            "Local.inner -> helper src/app.zig:14",
            "checkout -> helper src/app.zig:18",
            "checkout -> Local.inner src/app.zig:18",
            "main -> checkout src/app.zig:22",
        ],
        outline_file: "src/store.zig",
        outline: &[
            "struct Repo [method init, method save, method flush]",
            "struct Cache [method save]",
            "function helper",
        ],
        broken_file: "src/broken.zig",
        broken: &["function ok"],
    });
}

/// Dart needs no `new`: `Repo()` types the variable it initializes; the helper is called
/// through a `package:` import's prefix in a closure bound to a variable; a field's declared
/// type, an extension's `this`, `maybe!.` and a cascade's target type their receivers.
#[test]
fn dart_calls_resolve_through_constructor_calls_declared_types_and_import_prefixes() {
    check(Expect {
        lang: "dart",
        method: "Repo.save",
        method_sites: &[
            "lib/app.dart:6 checkout exact",
            "lib/app.dart:9 checkout ambiguous",
            "lib/app.dart:22 sell exact",
            "lib/app.dart:26 twice exact",
            "lib/app.dart:30 batch exact",
            "lib/app.dart:33 batch exact",
            "lib/src/store.dart:15 flush exact",
        ],
        name: "save",
        name_sites: &[
            "lib/app.dart:6 checkout exact",
            "lib/app.dart:8 checkout exact",
            "lib/app.dart:9 checkout ambiguous",
            "lib/app.dart:22 sell exact",
            "lib/app.dart:26 twice exact",
            "lib/app.dart:30 batch exact",
            "lib/app.dart:33 batch exact",
            "lib/src/store.dart:15 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["lib/app.dart:10 inner exact"],
        impact: &[
            "inner -> helper lib/app.dart:10",
            "checkout -> inner lib/app.dart:12",
            "main -> checkout lib/app.dart:16",
        ],
        outline_file: "lib/src/store.dart",
        outline: &[
            "class Saver [method save]",
            "class Repo [method open, method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "lib/broken.dart",
        broken: &["function ok"],
    });
    let (_dir, root) = repository("dart");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "Repo.open" }));
    assert_eq!(sites(&r), ["lib/app.dart:31 batch exact"], "a named constructor: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "flush" }));
    assert_eq!(sites(&r), ["lib/app.dart:11 checkout exact", "lib/app.dart:33 batch exact"], "{r}");
    let r = gm.call_ok("symbols", json!({ "file": "lib/app.dart" }));
    assert_eq!(
        outline(&r["symbols"]),
        [
            "function checkout [function inner]",
            "function main",
            "class Shop [method sell]",
            "impl Repo [method twice]",
            "function batch"
        ],
        "an extension's methods are its type's: {r}"
    );
}

/// OCaml's modules are structures whose functions a path names (`Repo.save`, `Store.Cache.save`,
/// through `module S = Store`, the file `store.ml`); a module typed by a module type (a
/// first-class module, a functor's parameter) may be any module of that shape: ambiguous.
/// Objects' methods are called with `#`, typed by annotations, `new` and the self name.
#[test]
fn ocaml_calls_resolve_through_module_paths_aliases_annotations_and_self() {
    check(Expect {
        lang: "ocaml",
        method: "Repo.save",
        method_sites: &[
            "lib/app.ml:5 checkout exact",
            "lib/app.ml:7 checkout ambiguous",
            "lib/app.ml:13 run ambiguous",
            "lib/app.ml:13 run ambiguous",
            "lib/app.ml:18 main exact",
            "lib/store.ml:8 flush exact",
        ],
        name: "save",
        name_sites: &[
            "lib/app.ml:5 checkout exact",
            "lib/app.ml:6 checkout exact",
            "lib/app.ml:7 checkout ambiguous",
            "lib/app.ml:8 checkout exact",
            "lib/app.ml:13 run ambiguous",
            "lib/app.ml:13 run ambiguous",
            "lib/app.ml:18 main exact",
            "lib/store.ml:8 flush exact",
            "lib/store.ml:17 flush exact",
        ],
        name_definitions: 5,
        function: "helper",
        function_sites: &["lib/app.ml:9 inner exact", "lib/app.ml:10 checkout exact"],
        impact: &[
            "inner -> helper lib/app.ml:9",
            "checkout -> helper lib/app.ml:10",
            "checkout -> inner lib/app.ml:10",
            "main -> checkout lib/app.ml:20",
            "<top level> -> main lib/app.ml:22",
        ],
        outline_file: "lib/store.ml",
        outline: &[
            "interface SAVER [method save]",
            "struct Repo [method save, method flush]",
            "struct Cache [method save]",
            "class counter [method save, method flush]",
            "function helper",
        ],
        broken_file: "lib/broken.ml",
        broken: &["function ok"],
    });
    let (_dir, root) = repository("ocaml");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "counter.flush" }));
    assert_eq!(sites(&r), ["lib/app.ml:19 main exact"], "`new counter` types o: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "Twice.run" }));
    assert_eq!(sites(&r), ["lib/app.ml:26 twice_saved exact"], "T is the functor's structure: {r}");
    // The interface's declarations are outlined; those the implementation defines are no
    // definitions of their own (the module type's `save` is declared in both files).
    let r = gm.call_ok("symbols", json!({ "file": "lib/store.mli" }));
    assert_eq!(r["language"], "ocaml_interface", "{r}");
    assert_eq!(
        outline(&r["symbols"]),
        [
            "interface SAVER [method save]",
            "struct Repo [method save, method flush]",
            "class counter [method save, method flush]",
            "function helper"
        ],
        "{r}"
    );
    let r = gm.call_ok("callers", json!({ "symbol": "helper" }));
    assert_eq!(r["definitions"].as_array().map(Vec::len), Some(1), "the .ml's: {r}");
}

/// R's classes are R6 (or Reference) classes, `obj$m()` with `self$m()` inside; `Repo$new()`
/// types a variable; the helper comes through box modules, aliased whole and by name, and a
/// lambda `\(i)`. S4 methods are their class's, and a generic's call reaches the generic.
#[test]
fn r_calls_resolve_through_r6_classes_new_self_and_box_modules() {
    check(Expect {
        lang: "r",
        method: "Repo.save",
        method_sites: &["R/app.R:5 checkout exact", "R/app.R:8 checkout ambiguous", "R/store.R:9 flush exact"],
        name: "save",
        name_sites: &[
            "R/app.R:5 checkout exact",
            "R/app.R:7 checkout exact",
            "R/app.R:8 checkout ambiguous",
            "R/store.R:9 flush exact",
        ],
        name_definitions: 3,
        function: "helper",
        function_sites: &["R/app.R:9 inner exact", "R/app.R:11 checkout exact", "R/app.R:16 main exact"],
        impact: &[
            "inner -> helper R/app.R:9",
            "checkout -> helper R/app.R:11",
            "main -> helper R/app.R:16",
            "checkout -> inner R/app.R:11",
            "main -> checkout R/app.R:15",
        ],
        outline_file: "R/store.R",
        outline: &[
            "class Saver [method save]",
            "class Repo [method save, method flush]",
            "class Cache [method save]",
            "function helper",
        ],
        broken_file: "R/broken.R",
        broken: &["function ok"],
    });
    let (_dir, root) = repository("r");
    let mut gm = serve(&root);
    let r = gm.call_ok("symbols", json!({ "file": "R/shapes.R" }));
    assert_eq!(
        outline(&r["symbols"]),
        ["class Shape", "class Square", "function area", "method area", "function total"],
        "{r}"
    );
    assert_eq!(r["symbols"][3]["owner"], "Square", "setMethod's class: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "area" }));
    assert_eq!(sites(&r), ["R/shapes.R:6 total exact"], "the generic's call; `area` passed as a value is no call: {r}");
    assert_eq!(r["ambiguous"], true, "the generic and a method share the name: {r}");
}

/// Julia dispatches a call on its arguments' types: each method is its own definition, owned
/// by its first argument's type, and a call's first argument of a type the file says picks
/// the method (`repo = Repo(..)`, `c::Cache`, `thing::Saver` reaching both subtypes'). The
/// helper comes through `using .Store: helper as h` and `import .Store` with `Store.helper`.
#[test]
fn julia_calls_resolve_by_dispatch_on_the_first_argument_s_declared_type() {
    check(Expect {
        lang: "julia",
        method: "Repo.save",
        method_sites: &["src/App.jl:10 checkout exact", "src/App.jl:13 checkout ambiguous", "src/Store.jl:14 flush exact"],
        name: "save",
        name_sites: &[
            "src/App.jl:10 checkout exact",
            "src/App.jl:12 checkout exact",
            "src/App.jl:13 checkout ambiguous",
            "src/Store.jl:14 flush exact",
        ],
        name_definitions: 2,
        function: "helper",
        function_sites: &["src/App.jl:14 inner exact", "src/App.jl:16 checkout exact"],
        impact: &[
            "inner -> helper src/App.jl:14",
            "Saver.checkout -> helper src/App.jl:16",
            "Saver.checkout -> inner src/App.jl:16",
            "main -> Saver.checkout src/App.jl:19",
        ],
        outline_file: "src/Store.jl",
        outline: &[
            "module Store [interface Saver, struct Repo, struct Cache, method save, method flush, method save, function helper, method describe, method describe, method length, function same]",
        ],
        broken_file: "src/Broken.jl",
        broken: &["function ok"],
    });
    let (_dir, root) = repository("julia");
    let mut gm = serve(&root);
    let r = gm.call_ok("callers", json!({ "symbol": "flush" }));
    assert_eq!(sites(&r), ["src/App.jl:15 checkout exact"], "`repo |> flush` dispatches on repo: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "describe" }));
    assert_eq!(sites(&r), ["src/App.jl:19 main ambiguous"], "a literal's type is not followed: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "checkout" }));
    assert_eq!(sites(&r), ["src/App.jl:19 main exact"], "the module's own function, whatever its argument: {r}");
    let r = gm.call_ok("callers", json!({ "symbol": "Repo.length" }));
    assert_eq!(
        sites(&r),
        ["src/App.jl:19 main ambiguous"],
        "Base's length gains a method for Repo; a call on an argument of unknown type may reach it or Base's, \
         and Store.jl's `length(r.items)` on a Vector reaches Base's alone: {r}"
    );
}

//! `skill://gm/gm.d.ts` through the real binary: listed and read as a resource, declaring every
//! verb `gm.verbs()` lists (child servers' tools included), changed — and its subscribers told
//! — when a child server starts later, readable from a body; and checked by the real TypeScript
//! compiler: the skill's and the README's run_code bodies compile against it, bodies with a
//! misspelled argument or a wrong type do not.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::{json, Value};

const URI: &str = "skill://gm/gm.d.ts";

/// The TypeScript the check runs: pinned, so a new release cannot change the verdict unseen.
const TYPESCRIPT: &str = "typescript@5.9.3";

fn test_server() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-test-server")
}

/// An `--mcp-config` file (the user's own layer: no approval needed) in `dir` naming test
/// servers, each `name -> its arguments`.
fn mcp_config(dir: &Path, servers: &[(&str, &[&str])]) -> PathBuf {
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, args)| ((*name).to_owned(), json!({ "command": test_server(), "args": args })))
        .collect();
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({ "mcpServers": entries }).to_string()).expect("mcp.json");
    path
}

/// gm in a fresh workspace with the child servers of `servers`, initialized; the temporary
/// folder holds the workspace and the config.
fn serve_with(servers: &[(&str, &[&str])]) -> (Gm, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("ws");
    let config = mcp_config(dir.path(), servers);
    let mut gm = Gm::start_in(&ws, &["--mcp-config", config.to_str().expect("utf8")], &[]);
    gm.initialize("2025-11-25");
    (gm, dir)
}

fn read_dts(gm: &mut Gm) -> String {
    let r = gm.ok("resources/read", json!({ "uri": URI }));
    assert_eq!(r["contents"][0]["mimeType"], "application/typescript", "{r}");
    r["contents"][0]["text"].as_str().expect("text").to_owned()
}

/// gm.d.ts once it declares every one of `methods` (child servers start in the background).
fn dts_with(gm: &mut Gm, methods: &[&str]) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = read_dts(gm);
        if methods.iter().all(|m| text.contains(&format!("\n  {m}(args"))) {
            return text;
        }
        assert!(Instant::now() < until, "gm.d.ts never declared all of {methods:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gm_d_ts_is_listed_and_declares_every_verb_gm_verbs_lists_child_tools_included() {
    let (mut gm, _dir) = serve_with(&[("t", &["--name", "t"])]);
    gm.read_skill();
    let text = dts_with(&mut gm, &["t_echo"]);

    let resources = gm.ok("resources/list", json!({}))["resources"].clone();
    let listed = resources.as_array().expect("list").iter().find(|r| r["uri"] == URI).cloned();
    let listed = listed.unwrap_or_else(|| panic!("{URI} not in {resources}"));
    assert_eq!(listed["mimeType"], "application/typescript");
    assert_eq!(listed["size"], text.len(), "{listed}");
    let digest = listed["_meta"]["io.modelcontextprotocol.skills/digest"].as_str().expect("digest");
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    // In the gm skill's SEP-2640 manifest too.
    let skill = gm.ok("skills/get", json!({ "uri": "skill://gm/SKILL.md" }))["skill"].clone();
    assert!(skill["resources"].as_array().expect("manifest").iter().any(|r| r["uri"] == URI), "{skill}");

    // Every name gm.verbs() lists (what a body can call) is a method of Gm: a verb added to the
    // registry and left out of the declarations fails here.
    let names = gm.js("return gm.verbs().map(v => v.name)");
    let names: Vec<&str> = names.as_array().expect("names").iter().filter_map(Value::as_str).collect();
    assert!(names.contains(&"read_file") && names.contains(&"t_echo"), "{names:?}");
    let missing: Vec<&&str> = names.iter().filter(|n| !text.contains(&format!("\n  {n}(args"))).collect();
    assert!(missing.is_empty(), "gm.d.ts does not declare {missing:?}");
    assert!(text.contains("  t_echo(args?: TEchoArgs): Promise<GmToolResult>;"), "{text}");
    assert!(text.contains("  read_file(args: ReadFileArgs): Promise<any>;"), "{text}");

    // A body reads it as it reads any skill file.
    let page = gm.js(&format!("return await gm.read_file({{ path: '{URI}' }})"));
    assert_eq!(page["content"].as_str(), Some(text.as_str()), "{page}");
    assert_eq!(page["next"], Value::Null, "read whole in one page");
}

#[test]
fn a_child_server_that_starts_later_changes_gm_d_ts_and_its_subscribers_are_told() {
    let (mut gm, dir) = serve_with(&[("slow", &["--slow-start", "3000", "--name", "slow"])]);
    let init = gm.ok(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } }),
    );
    assert_eq!(init["capabilities"]["resources"]["subscribe"], true, "{init}");
    assert_eq!(gm.ok("resources/subscribe", json!({ "uri": URI })), json!({}));
    let before = read_dts(&mut gm);
    assert!(!before.contains("slow_echo("), "the server has not started yet: the test needs it later");

    // A second session of the same worker that did not subscribe.
    let ws = dir.path().join("ws");
    let mut other = Gm::start_in(&ws, &[], &[]);
    other.initialize("2025-11-25");

    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let m = gm.recv(left).expect("notifications/resources/updated before the deadline");
        if m["method"] == "notifications/resources/updated" {
            assert_eq!(m["params"], json!({ "uri": URI }), "{m}");
            break;
        }
    }
    let after = read_dts(&mut gm);
    assert_ne!(before, after);
    assert!(after.contains("  slow_echo(args?: SlowEchoArgs): Promise<GmToolResult>;"), "{after}");

    // The other session hears that the tools changed, not that gm.d.ts did: it did not ask.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let m = other.recv(left).expect("notifications/tools/list_changed");
        assert_ne!(m["method"], "notifications/resources/updated", "{m}");
        if m["method"] == "notifications/tools/list_changed" {
            break;
        }
    }
    // The updated notification would have gone out with the list change, before this reply.
    other.send(&json!({ "jsonrpc": "2.0", "id": "after", "method": "ping" }));
    loop {
        let m = other.recv(common::TIMEOUT).expect("the ping's reply");
        assert_ne!(m["method"], "notifications/resources/updated", "{m}");
        if m["id"] == "after" {
            break;
        }
    }
    assert_eq!(gm.ok("resources/unsubscribe", json!({ "uri": URI })), json!({}));
}

/// The ```js blocks of a markdown file: the run_code bodies it shows.
fn js_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if matches!(l.trim_end(), "```js" | "```javascript") => current = Some(Vec::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take().map(|b| b.join("\n"))),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// tsc's diagnostics, one a line: `file(line,col): error TSnnnn: message`.
fn tsc(typescript: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("node")
        .arg(typescript.join("node_modules/typescript/bin/tsc"))
        .args(args)
        .args(["--pretty", "false"])
        .current_dir(dir)
        .output()
        .expect("node runs tsc");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // 0: no errors; 1 or 2: errors were found (reported above); anything else: tsc itself failed.
    assert!(matches!(out.status.code(), Some(0..=2)), "tsc failed: {:?}\n{text}", out.status);
    text
}

/// The bodies a model writes, well typed: one for each thing gm.d.ts declares beside the verbs.
const GOOD: &[&str] = &[
    "const r = await gm.try(() => gm.read_file({ path: 'missing.txt' }));\nif (r.ok === false) return r.error.code;\nreturn r.content;",
    "const names = gm.verbs().filter(v => v.server === undefined).map(v => v.name);\nconsole.log('verbs', names.length);\nreturn names;",
    "const hits = await gm.grep({ pattern: 'fn main', mode: 'word', glob: '**/*.rs', limit: 5 });\nreturn hits.matches.map(m => m.path);",
    "const t0 = performance.now();\nawait new Promise(r => setTimeout(r, 10));\nconst { exitCode } = await gm.run_shell({ command: 'true', env: { A: 'b' }, timeoutMs: 1000 });\nreturn { exitCode, ms: performance.now() - t0 };",
    "try { await gm.job_status({ name: 'nope' }); } catch (e) { return e.code; }\nreturn (await gm.list_dir()).total;",
    "const cfg = require('./package.json');\nawait gm.git_add({ paths: ['.'] });\nreturn (await gm.everything_echo({ anything: [1, 'two'] })).structuredContent;",
];

/// Bodies tsc must reject, each with a piece of the diagnostic it must give.
const BAD: &[(&str, &str)] = &[
    ("return gm.read_file({pth: 'x'});", "'pth' does not exist in type 'ReadFileArgs'"),
    ("return gm.read_file({ path: 1 });", "Type 'number' is not assignable to type 'string'"),
    ("return gm.write_file({ path: 'a.txt' });", "Property 'content' is missing"),
    ("return gm.grep({ pattern: 'x', mode: 'fuzzy' });", "Type '\"fuzzy\"' is not assignable"),
    ("return gm.git_add({ paths: 'src' });", "Type 'string' is not assignable to type 'string[]'"),
    ("return gm.read_fiel({ path: 'a' });", "Property 'read_fiel' does not exist on type 'Gm'"),
    ("return gm.git_status({ verbose: true });", "is not assignable to type 'never'"),
    ("return gm.list_dir({ limit: '5' });", "Type 'string' is not assignable to type 'number'"),
];

#[test]
fn tsc_accepts_the_skill_and_readme_bodies_and_rejects_misspelled_or_mistyped_arguments() {
    let typescript = common::npm_packages(&[TYPESCRIPT]);
    // The README's child-server example calls the everything and browser servers: test servers
    // under those names, with those tools, stand in for them.
    let (mut gm, _dir) = serve_with(&[
        ("everything", &["--name", "everything", "--extra-tool", "get_sum"]),
        ("browser", &["--name", "browser", "--extra-tool", "browser_navigate", "--extra-tool", "browser_snapshot"]),
    ]);
    let dts = dts_with(&mut gm, &["everything_get_sum", "browser_browser_navigate", "browser_browser_snapshot"]);

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let skill = js_blocks(&read("skills/gm/SKILL.md"));
    let readme = js_blocks(&read("README.md"));
    assert!(!skill.is_empty(), "no ```js body in skills/gm/SKILL.md");
    assert!(readme.len() >= 2, "the README's two run_code bodies: {readme:?}");

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("gm.d.ts"), &dts).expect("gm.d.ts");
    let mut files = vec!["gm.d.ts".to_owned()];
    let mut samples: Vec<(String, String)> = Vec::new();
    let good = skill.iter().map(|b| ("skill", b.as_str())).chain(readme.iter().map(|b| ("readme", b.as_str())));
    for (i, (from, body)) in good.chain(GOOD.iter().map(|b| ("good", *b))).enumerate() {
        samples.push((format!("good-{i}-{from}.ts"), body.to_owned()));
    }
    for (i, (body, _)) in BAD.iter().enumerate() {
        samples.push((format!("bad-{i}.ts"), (*body).to_owned()));
    }
    for (name, body) in &samples {
        // The body as run_code runs it: the inside of an async function.
        std::fs::write(dir.path().join(name), format!("async function body() {{\n{body}\n}}\n")).expect("sample");
        files.push(name.clone());
    }
    // Bodies are JavaScript: strict, but untyped parameters and catch variables stay `any` as
    // in JavaScript. Each sample is a module of its own; gm.d.ts stays a global script.
    let tsconfig = json!({
        "compilerOptions": {
            "noEmit": true, "target": "es2022", "lib": ["es2022"], "types": [], "module": "es2022",
            "moduleDetection": "force", "strict": true, "noImplicitAny": false, "useUnknownInCatchVariables": false,
        },
        "files": files,
    });
    std::fs::write(dir.path().join("tsconfig.json"), tsconfig.to_string()).expect("tsconfig");
    // One run for every sample (tsc starts in about a second): a syntax error anywhere stops
    // tsc before it checks types, and fails the good sample it is in.
    let diagnostics = tsc(&typescript, dir.path(), &["-p", "tsconfig.json"]);
    // A diagnostic's further lines (what was missing, where) are indented under it.
    let mut all: Vec<String> = Vec::new();
    for line in diagnostics.lines() {
        match all.last_mut() {
            Some(last) if line.starts_with(' ') => {
                last.push('\n');
                last.push_str(line);
            }
            _ => all.push(line.to_owned()),
        }
    }
    let of = |file: &str| -> Vec<&str> {
        all.iter().filter(|d| d.starts_with(&format!("{file}("))).map(String::as_str).collect()
    };

    let mut wrong = Vec::new();
    for (name, body) in &samples {
        let errors = of(name);
        if name.starts_with("good") && !errors.is_empty() {
            wrong.push(format!("{name} should compile:\n{body}\n{}", errors.join("\n")));
        }
    }
    for (i, (body, expected)) in BAD.iter().enumerate() {
        let errors = of(&format!("bad-{i}.ts"));
        if !errors.iter().any(|e| e.contains(expected)) {
            wrong.push(format!("bad-{i}.ts should fail with {expected:?}:\n{body}\ngot: {errors:?}"));
        }
    }
    let in_dts = of("gm.d.ts");
    assert!(in_dts.is_empty(), "gm.d.ts itself does not compile:\n{}", in_dts.join("\n"));
    assert!(wrong.is_empty(), "{}\n\nall of tsc's output:\n{diagnostics}", wrong.join("\n\n"));

    // The declarations hold under the strictest settings too, for a host that checks with them.
    let strict = json!({
        "compilerOptions": { "noEmit": true, "target": "es2022", "lib": ["es2022"], "types": [], "strict": true },
        "files": ["gm.d.ts"],
    });
    std::fs::write(dir.path().join("tsconfig.strict.json"), strict.to_string()).expect("tsconfig");
    let strict = tsc(&typescript, dir.path(), &["-p", "tsconfig.strict.json"]);
    assert!(strict.trim().is_empty(), "gm.d.ts under --strict:\n{strict}");
}

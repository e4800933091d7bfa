//! The reply budget (issue 37): a result over `--max-result-bytes` (80,000 bytes by default)
//! comes back cut as valid JSON of the same shape, the largest parts first, with
//! `cut: { bytes, spill }` naming a file in `.gm/out/` that holds the whole value; on both
//! surfaces, over stdio and HTTP, for a child server's result passed through and for a body's
//! console. A reply under the budget is written as it always was, byte for byte.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Gm, TIMEOUT};
use gm_actors::mcp_client::stdio::{Line, Process, Stderr};
use serde_json::{json, Value};

const DEFAULT_BUDGET: usize = 80_000;
const CUT_META: &str = "com.anentrypoint.gmnew/cut";
const RUN_META: &str = "com.anentrypoint.gmnew/run";

/// Bytes of content a tool result carries: its text blocks and its structured content.
fn content_bytes(result: &Value) -> usize {
    let texts: usize =
        result["content"].as_array().expect("content").iter().map(|b| b["text"].as_str().map_or(0, str::len)).sum();
    let structured = result.get("structuredContent").map_or(0, |s| s.to_string().len());
    texts + structured
}

/// The whole value a cut reply's `cut.spill` names, read from disk.
fn spilled(workspace: &Path, cut: &Value) -> Value {
    let spill = cut["spill"].as_str().unwrap_or_else(|| panic!("no spill in {cut}"));
    assert!(spill.starts_with(".gm/out/"), "{spill}");
    let text = std::fs::read_to_string(workspace.join(spill)).expect("the spill file");
    serde_json::from_str(&text).expect("the spill is the whole value as JSON")
}

/// The count in a string's `…[cut N bytes]` (or `items`) marker at its end.
fn marker_count(s: &str, unit: &str) -> usize {
    let (_, tail) = s.rsplit_once("…[cut ").unwrap_or_else(|| panic!("no marker at the end of …{}", tail(s)));
    let number = tail.strip_suffix(&format!(" {unit}]")).unwrap_or_else(|| panic!("marker {tail}"));
    number.replace(',', "").parse().expect("a count")
}

fn tail(s: &str) -> &str {
    let mut at = s.len().saturating_sub(80);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

/// A cut run_code reply: the structured content, after the checks every cut reply passes.
fn checked_cut(result: &Value, budget: usize) -> Value {
    assert_eq!(result["isError"], false, "{}", tail(&result.to_string()));
    let size = content_bytes(result);
    assert!(size <= budget, "the reply carries {size} bytes, over {budget}");
    let sc = result["structuredContent"].clone();
    assert_eq!(result["_meta"][CUT_META], sc["cut"], "the cut is in _meta too");
    let summary = common::text_of(result);
    assert!(summary.contains("structuredContent holds it cut as valid JSON"), "{summary}");
    assert!(summary.contains(sc["cut"]["spill"].as_str().expect("spill")), "{summary}");
    sc
}

#[test]
fn a_3_mb_string_comes_back_cut_under_the_default_budget_and_whole_in_a_spill_read_file_reads() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call("run_code", json!({ "code": "return 'x'.repeat(3e6)" }));
    let sc = checked_cut(&r, DEFAULT_BUDGET);
    let result = sc["result"].as_str().expect("still a string");
    let kept = result.find('…').expect("the marker");
    assert!(kept > 50_000 && result[..kept].bytes().all(|b| b == b'x'), "kept {kept}");
    assert_eq!(marker_count(result, "bytes"), 3_000_000 - kept);
    let whole = spilled(&gm.workspace, &sc["cut"]);
    assert_eq!(whole["result"].as_str().map(str::len), Some(3_000_000));
    // `bytes`: how much of the whole value's JSON the reply leaves out.
    let spill = gm.workspace.join(sc["cut"]["spill"].as_str().expect("spill"));
    let whole_len = std::fs::metadata(spill).expect("spill").len();
    let left_out = sc["cut"]["bytes"].as_u64().expect("bytes");
    assert!(left_out < whole_len && whole_len - left_out <= DEFAULT_BUDGET as u64, "{left_out} of {whole_len}");
    // A body pages the spill like any file.
    let spill = sc["cut"]["spill"].as_str().expect("spill");
    let read = gm.js(&format!(
        "const f = await gm.read_file({{ path: '{spill}' }}); return JSON.parse(f.content).result.length;"
    ));
    assert_eq!(read, 3_000_000);
}

#[test]
fn an_array_of_100000_objects_comes_back_as_its_first_items_and_the_count_left_out() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call(
        "run_code",
        json!({ "code": "return Array.from({ length: 100000 }, (_, i) => ({ i, name: 'item ' + i }));" }),
    );
    let sc = checked_cut(&r, DEFAULT_BUDGET);
    let items = sc["result"].as_array().expect("still an array");
    let (last, first) = items.split_last().expect("items");
    assert!(first.len() > 1000, "only {} items kept", first.len());
    for (i, item) in first.iter().enumerate() {
        assert_eq!(item, &json!({ "i": i, "name": format!("item {i}") }));
    }
    assert_eq!(marker_count(last.as_str().expect("a marker item"), "items"), 100_000 - first.len());
    assert_eq!(spilled(&gm.workspace, &sc["cut"])["result"].as_array().map(Vec::len), Some(100_000));
}

#[test]
fn an_object_with_one_huge_field_keeps_its_ten_small_ones_whole() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call(
        "run_code",
        json!({ "code": "const o = { huge: 'h'.repeat(2e6) }; for (let i = 0; i < 10; i++) o['small' + i] = 's'.repeat(500) + i; return o;" }),
    );
    let sc = checked_cut(&r, DEFAULT_BUDGET);
    let o = sc["result"].as_object().expect("still an object");
    assert_eq!(o.len(), 11, "every key is kept");
    for i in 0..10 {
        assert_eq!(o[&format!("small{i}")], format!("{}{i}", "s".repeat(500)));
    }
    let huge = o["huge"].as_str().expect("huge");
    assert!(huge.starts_with("hhhh") && marker_count(huge, "bytes") > 1_900_000);
}

#[test]
fn a_bodys_long_console_keeps_its_head_and_tail_and_is_whole_in_a_spill() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r =
        gm.call("run_code", json!({ "code": "for (let i = 0; i < 100000; i++) console.log('line ' + i); return 1;" }));
    assert_eq!(r["isError"], false);
    assert!(content_bytes(&r) <= DEFAULT_BUDGET, "{}", content_bytes(&r));
    let sc = &r["structuredContent"];
    assert_eq!(sc["result"], 1);
    let console = sc["console"].as_array().expect("console");
    assert_eq!(console.first(), Some(&json!({ "level": "log", "text": "line 0" })));
    assert_eq!(console.last(), Some(&json!({ "level": "log", "text": "line 99999" })));
    let marker = console.iter().find(|l| l["level"] == "gm").expect("a line says what was cut");
    let text = marker["text"].as_str().expect("text");
    let spill = text.split("the whole console is in ").nth(1).and_then(|s| s.strip_suffix(']')).expect("spill");
    let whole = std::fs::read_to_string(gm.workspace.join(spill)).expect("the console's spill");
    assert_eq!(whole.lines().count(), 100_000);
    assert!(whole.starts_with("[log] line 0\n") && whole.ends_with("[log] line 99999\n"));
    // The console's text block keeps its head and tail too.
    let block = r["content"][1]["text"].as_str().expect("the console block");
    assert!(block.contains("line 0\n") && block.contains("line 99999"), "{}", tail(block));
    // A console in a reply that fits its budget is whole, though it is more than a quarter of it.
    let r =
        gm.call("run_code", json!({ "code": "for (let i = 0; i < 45; i++) console.log('l'.repeat(500)); return 1;" }));
    assert!(content_bytes(&r) > 60_000 && content_bytes(&r) <= DEFAULT_BUDGET, "{}", content_bytes(&r));
    let console = r["structuredContent"]["console"].as_array().expect("console");
    assert_eq!(console.len(), 45);
    assert!(console.iter().all(|l| l["level"] == "log"));
}

#[test]
fn a_huge_error_is_cut_in_both_blocks_which_stay_under_the_budget() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call("run_code", json!({ "code": "throw new Error('e'.repeat(1e6));" }));
    assert_eq!(r["isError"], true);
    assert!(content_bytes(&r) <= DEFAULT_BUDGET, "{}", content_bytes(&r));
    // Some hosts show only an error's text: it holds the cut error as well.
    let text: Value = serde_json::from_str(&common::text_of(&r)).expect("the text block is the cut value");
    assert_eq!(text, r["structuredContent"]);
    let error = &text["error"];
    assert_eq!(error["code"], "js_error");
    assert!(marker_count(error["message"].as_str().expect("message"), "bytes") > 900_000);
    let whole = spilled(&gm.workspace, &text["cut"]);
    assert_eq!(whole["error"]["message"].as_str().map(str::len), Some(1_000_000));
}

#[test]
fn max_result_bytes_lowers_and_raises_the_cut_up_to_the_ceiling() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let code = "return 'x'.repeat(300000)";
    let cut_at = |gm: &mut Gm, bytes: Option<u64>| {
        let mut args = json!({ "code": code });
        if let Some(b) = bytes {
            args["maxResultBytes"] = json!(b);
        }
        gm.call("run_code", args)
    };
    let default = checked_cut(&cut_at(&mut gm, None), DEFAULT_BUDGET);
    let lowered = checked_cut(&cut_at(&mut gm, Some(5_000)), 5_000);
    let shown = |sc: &Value| sc["result"].as_str().expect("string").find('…').expect("marker");
    assert!(shown(&lowered) < 5_000 && shown(&default) > 50_000, "{} {}", shown(&lowered), shown(&default));
    // Raised so that it fits once: whole in structuredContent, the text block a summary.
    let raised = cut_at(&mut gm, Some(400_000));
    assert_eq!(raised["structuredContent"]["result"].as_str().map(str::len), Some(300_000));
    assert!(raised["structuredContent"].get("cut").is_none());
    assert!(common::text_of(&raised).contains("is in structuredContent only"), "{}", common::text_of(&raised));
    assert!(content_bytes(&raised) <= 400_000);
    // Raised to the ceiling: both blocks whole, as without a budget.
    let whole = cut_at(&mut gm, Some(1_000_000));
    let text: Value = serde_json::from_str(&common::text_of(&whole)).expect("the value's JSON");
    assert_eq!(text, whole["structuredContent"]);
    // Past the ceiling is refused.
    let refused = gm.call_err("run_code", json!({ "code": code, "maxResultBytes": 1_000_001 }));
    assert_eq!(refused["code"], "invalid_args", "{refused}");
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("1000000")), "{refused}");
}

#[test]
fn the_max_result_bytes_flag_sets_the_budget_over_the_variable_and_the_ceiling_flag_lets_calls_go_higher() {
    let mut gm = Gm::start_in_temp(
        &["--max-result-bytes", "6000", "--max-result-bytes-ceiling", "2000000"],
        &[("GM_MAX_RESULT_BYTES", "3000")],
    );
    gm.ready();
    let r = gm.call("run_code", json!({ "code": "return 'x'.repeat(100000)" }));
    let sc = checked_cut(&r, 6_000);
    assert!(content_bytes(&r) > 4_000, "{}", content_bytes(&r));
    assert!(sc["result"].as_str().is_some_and(|s| s.contains("…[cut ")));
    let big = gm.call("run_code", json!({ "code": "return 'x'.repeat(700000)", "maxResultBytes": 1_500_000 }));
    assert_eq!(big["structuredContent"]["result"].as_str().map(str::len), Some(700_000));
}

#[test]
fn on_the_tools_surface_a_verbs_big_reply_is_cut_and_kept_whole() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.ready();
    std::fs::write(gm.workspace.join("one-line.txt"), "z".repeat(3_000_000)).expect("write");
    let r = gm.call("read_file", json!({ "path": "one-line.txt" }));
    let sc = checked_cut(&r, DEFAULT_BUDGET);
    let content = sc["content"].as_str().expect("content");
    assert!(content.starts_with("zzz") && marker_count(content, "bytes") > 2_900_000);
    assert_eq!(sc["totalLines"], 1, "the small fields are whole");
    let whole = spilled(&gm.workspace, &sc["cut"]);
    assert_eq!(whole["content"].as_str().map(str::len), Some(3_000_000));
}

#[test]
fn a_child_servers_1_mb_result_is_cut_the_same_way() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    let server = json!({ "command": env!("CARGO_BIN_EXE_mcp-test-server"), "args": ["--big"] });
    std::fs::write(ws.join(".gm/mcp.json"), json!({ "mcpServers": { "t": server } }).to_string()).expect("mcp.json");
    common::approve_workspace_servers(&ws);
    let home = common::trust_home();
    let mut gm = Gm::start_in(&ws, &[], &[("HOME", home.to_str().expect("utf-8"))]);
    gm.ready();
    let r = gm.call("run_code", json!({ "code": "return await gm.t_big({ bytes: 1000000 });" }));
    let sc = checked_cut(&r, DEFAULT_BUDGET);
    let text = sc["result"]["content"][0]["text"].as_str().expect("the child's text block, cut");
    assert!(text.starts_with("yyyy") && marker_count(text, "bytes") > 900_000, "{}", tail(text));
    assert_eq!(sc["result"]["content"][0]["type"], "text", "the child's result keeps its shape");
    let whole = spilled(&ws, &sc["cut"]);
    assert_eq!(whole["result"]["content"][0]["text"].as_str().map(str::len), Some(1_000_000));
}

/// `gm serve` spoken to line by line, its reply lines kept as the bytes it wrote.
struct RawGm {
    process: Process,
}

impl RawGm {
    fn start(workspace: &Path) -> RawGm {
        let mut cmd: Command = common::gm_command();
        cmd.arg("serve").current_dir(workspace);
        RawGm { process: Process::spawn_command(cmd, Stderr::Inherit).expect("gm starts") }
    }

    fn send(&mut self, message: Value) {
        use std::io::Write;
        let stdin = self.process.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{message}").expect("write");
        stdin.flush().expect("flush");
    }

    /// The line of the reply to `id`, as written.
    fn reply(&mut self, id: i64) -> String {
        loop {
            match self.process.stdout.next_line(Some(TIMEOUT)).expect("read") {
                Line::Line(bytes) => {
                    let line = String::from_utf8(bytes).expect("UTF-8");
                    let v: Value = serde_json::from_str(&line).expect("every line is JSON");
                    if v["id"] == id {
                        return line;
                    }
                }
                other => panic!("no reply to {id}: {other:?}"),
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> String {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.reply(id)
    }
}

#[test]
fn a_reply_under_the_budget_is_byte_for_byte_as_before_and_one_over_it_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut gm = RawGm::start(&ws);
    gm.request(
        1,
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } }),
    );
    gm.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    gm.request(2, "resources/read", json!({ "uri": "skill://gm/SKILL.md" }));
    let call = |gm: &mut RawGm, id: i64, n: usize| {
        let code = format!("console.log('hi'); return {{ s: 'x'.repeat({n}), n: 1 }};");
        gm.request(
            id,
            "tools/call",
            json!({ "name": "run_code", "arguments": { "code": code, "maxResultBytes": 10_000 } }),
        )
    };
    // Under the budget: the line is the one gm wrote before budgets, field for field and byte
    // for byte: the value's JSON as the text block, the console, the run, the value again.
    let line = call(&mut gm, 3, 4_800);
    let reply: Value = serde_json::from_str(&line).expect("JSON");
    let value = reply["result"]["structuredContent"].to_string();
    let run = reply["result"]["_meta"][RUN_META].as_str().expect("run");
    let expected = format!(
        r#"{{"jsonrpc":"2.0","id":3,"result":{{"content":[{{"type":"text","text":{}}},{{"type":"text","text":{}}}],"isError":false,"_meta":{{"{RUN_META}":{}}},"structuredContent":{value}}}}}"#,
        serde_json::to_string(&value).expect("text"),
        serde_json::to_string("console:\n[log] hi\n").expect("text"),
        serde_json::to_string(run).expect("run"),
    );
    assert_eq!(line, expected);
    // Over it the value is written once, under a summary; far over it, cut.
    let once: Value = serde_json::from_str(&call(&mut gm, 4, 5_200)).expect("JSON");
    assert!(common::text_of(&once["result"]).contains("in structuredContent only"));
    assert_eq!(once["result"]["structuredContent"]["result"]["s"].as_str().map(str::len), Some(5_200));
    let cut: Value = serde_json::from_str(&call(&mut gm, 5, 20_000)).expect("JSON");
    assert!(cut["result"]["structuredContent"]["result"]["s"].as_str().is_some_and(|s| s.contains("…[cut ")));
    assert!(content_bytes(&cut["result"]) <= 10_000);
    drop(gm);
    std::thread::sleep(Duration::from_millis(50));
    common::stop_worker(&ws);
}

#[test]
fn over_http_a_3_mb_string_is_cut_the_same_way() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let (mut child, lines) = common::spawn_http_front(&ws, &[], &[]);
    let mut http = common::HttpClient::of(&lines, None);
    http.token = Some(std::fs::read_to_string(ws.join(".gm/http.token")).unwrap_or_default().trim().to_owned());
    let session = http.initialize("budget-test");
    let post = |session: Option<&str>, body: Value| http.post(session, body);
    let read =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } });
    assert!(post(Some(&session), read).status().is_success());
    let call = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "run_code", "arguments": { "code": "return 'x'.repeat(3e6)" } } });
    let reply: Value = post(Some(&session), call).json().expect("the reply is JSON");
    let sc = checked_cut(&reply["result"], DEFAULT_BUDGET);
    assert!(marker_count(sc["result"].as_str().expect("string"), "bytes") > 2_900_000);
    assert_eq!(spilled(&ws, &sc["cut"])["result"].as_str().map(str::len), Some(3_000_000));
    common::stop_http_front(&mut child);
    if gm_actors::sys::is_locked(&ws.join(".gm/worker.pid")) {
        common::stop_worker(&ws);
    }
}

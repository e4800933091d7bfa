//! The MCP protocol edge, spoken byte for byte to the real binary.

mod common;

use std::time::{Duration, Instant};

use common::{text_of, Gm};
use serde_json::{json, Value};

const VERSIONS: [&str; 5] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07"];

#[test]
fn initialize_echoes_every_supported_version() {
    for v in VERSIONS {
        let mut gm = Gm::start(&[]);
        let r = gm.initialize(v);
        assert_eq!(r["protocolVersion"], v);
        assert_eq!(r["serverInfo"]["name"], "gm");
        assert!(r["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object());
        assert!(r["capabilities"]["tools"].is_object());
    }
}

#[test]
fn initialize_answers_an_unknown_version_with_the_latest() {
    let mut gm = Gm::start(&[]);
    assert_eq!(gm.initialize("2099-01-01")["protocolVersion"], "2025-11-25");
}

#[test]
fn a_discover_probe_before_initialize_keeps_the_connection_usable() {
    let mut gm = Gm::start(&[]);
    // A probe without an envelope, as an older client may send: answered, and the connection
    // may still initialize.
    let d = gm.ok("server/discover", json!({}));
    let versions: Vec<&str> =
        d["supportedVersions"].as_array().expect("list").iter().filter_map(Value::as_str).collect();
    assert_eq!(&versions[..3], ["2026-07-28", "2025-11-25", "2025-06-18"]);
    gm.ready();
    assert_eq!(gm.js("return 40 + 2"), 42);
}

#[test]
fn ids_may_be_zero_negative_or_strings() {
    let mut gm = Gm::start(&[]);
    for id in [json!(0), json!(-5), json!("abc"), json!("")] {
        gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }));
        let r = gm.recv_id(&id);
        assert_eq!(r["result"], json!({}), "{id}");
    }
}

#[test]
fn requests_split_across_writes_or_packed_into_one_are_all_answered() {
    // The reader ends a read when a pipe read comes back short; whatever arrives next, in
    // pieces or several lines at once, must still wake it.
    let mut gm = Gm::start(&[]);
    let line = |id: u64| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n");
    let first = line(1);
    let (a, b) = first.as_bytes().split_at(10);
    gm.send_raw(a);
    std::thread::sleep(std::time::Duration::from_millis(50));
    gm.send_raw(b);
    assert_eq!(gm.recv_id(&json!(1))["result"], json!({}));
    let packed: String = (2..=40).map(line).collect();
    gm.send_raw(packed.as_bytes());
    for id in 2..=40 {
        assert_eq!(gm.recv_id(&json!(id))["result"], json!({}), "{id}");
    }
    // A line longer than one read of the reader's buffer (64 KiB), sent in one write.
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"ping\",\"params\":{{\"_meta\":{{\"pad\":\"{}\"}}}}}}\n",
        "y".repeat(200_000)
    );
    gm.send_raw(long.as_bytes());
    assert_eq!(gm.recv_id(&json!(41))["result"], json!({}));
}

fn expect_error(gm: &mut Gm, raw: &[u8], code: i64) -> Value {
    gm.send_raw(raw);
    let r = gm.recv(common::TIMEOUT).expect("an error reply");
    assert_eq!(r["error"]["code"], code, "for {}: {r}", String::from_utf8_lossy(raw));
    r
}

#[test]
fn malformed_input_gets_the_named_error_and_the_server_keeps_serving() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    expect_error(&mut gm, b"{not json\n", -32700);
    expect_error(&mut gm, b"\xff\xfe{}\n", -32700);
    expect_error(&mut gm, b"42\n", -32600);
    expect_error(&mut gm, b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}\n", -32600);
    expect_error(&mut gm, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}\n", -32600);
    expect_error(&mut gm, b"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}\n", -32600);
    expect_error(&mut gm, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"no/such\"}\n", -32601);
    expect_error(
        &mut gm,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":7}}\n",
        -32602,
    );
    expect_error(
        &mut gm,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}\n",
        -32602,
    );
    expect_error(
        &mut gm,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"finish\",\"arguments\":[1]}}\n",
        -32602,
    );
    expect_error(
        &mut gm,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":{\"uri\":\"skill://gm/NOPE.md\"}}\n",
        -32002,
    );
    let batch = expect_error(&mut gm, b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n", -32600);
    assert!(batch["error"]["message"].as_str().unwrap_or("").contains("2025-03-26"));
    assert_eq!(gm.ok("ping", json!({})), json!({}));
}

#[test]
fn a_line_over_the_limit_is_refused_without_stopping_the_server() {
    let mut gm = Gm::start(&["--max-line-bytes", "1000"]);
    gm.initialize("2025-11-25");
    let mut big =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}", "x".repeat(5000));
    big.push('\n');
    let r = expect_error(&mut gm, big.as_bytes(), -32600);
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("1000"), "{r}");
    assert_eq!(gm.ok("ping", json!({})), json!({}));
}

#[test]
fn batches_work_on_2025_03_26() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-03-26");
    gm.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}]\n");
    let r = gm.recv(common::TIMEOUT).expect("batch reply");
    let replies = r.as_array().expect("an array reply");
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0]["result"], json!({}));
    assert_eq!(replies[1]["error"]["code"], -32601);
}

#[test]
fn the_default_surface_is_exactly_three_tools() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let tools = gm.ok("tools/list", json!({}))["tools"].clone();
    let names: Vec<&str> = tools.as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["next_context", "run_code", "finish"]);
    let run_code = &tools[1];
    let description = run_code["description"].as_str().expect("description");
    for verb in [
        "gm.read_file",
        "gm.write_file",
        "gm.edit_file",
        "gm.stat_file",
        "gm.list_dir",
        "gm.query_log",
        "gm.verbs()",
        "gm.try(fn)",
    ] {
        assert!(description.contains(verb), "run_code's description names {verb}");
    }
}

#[test]
fn the_tools_surface_serves_every_verb_with_an_object_schema_in_pages() {
    let mut gm = Gm::start(&["--surface", "tools", "--page-size", "3"]);
    gm.initialize("2025-11-25");
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let r = gm.ok("tools/list", params);
        pages += 1;
        for t in r["tools"].as_array().expect("tools") {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert_eq!(t["inputSchema"]["$schema"], "https://json-schema.org/draft/2020-12/schema");
            assert!(t["description"].as_str().is_some_and(|d| !d.is_empty()));
            names.push(t["name"].as_str().expect("name").to_owned());
        }
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert!(pages >= 3);
    for verb in ["next_context", "finish", "read_file", "write_file", "edit_file", "stat_file", "list_dir", "query_log"]
    {
        assert!(names.iter().any(|n| n == verb), "{verb} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "run_code"));
    assert_eq!(gm.request("tools/list", json!({ "cursor": "999" }))["error"]["code"], -32602);
}

#[test]
fn every_call_result_carries_the_run_id_and_trace_fields_reach_the_log() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    let r = gm.ok(
        "tools/call",
        json!({
            "name": "stat_file",
            "arguments": { "path": "." },
            "_meta": { "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b", "baggage": "k=v" },
        }),
    );
    let run = r["_meta"]["com.anentrypoint.gmnew/run"].as_str().expect("run id").to_owned();
    let action = gm.events_of("action").into_iter().find(|e| e["tool"] == "stat_file").expect("action event");
    assert_eq!(action["run"], run);
    assert_eq!(action["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert_eq!(action["tracestate"], "a=b");
    assert_eq!(action["baggage"], "k=v");
    assert_eq!(action["inFlight"], 1);
}

#[test]
fn a_cancel_for_a_call_that_cannot_be_cancelled_is_logged_and_the_call_runs_on() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    gm.send(&json!({ "jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": { "name": "list_dir", "arguments": {} } }));
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 77, "reason": "test" } }));
    let r = gm.recv_id(&json!(77));
    assert_eq!(r["result"]["isError"], false);
    let ignored = gm.events_of("cancel-ignored");
    assert_eq!(ignored.len(), 1, "{ignored:?}");
    assert_eq!(ignored[0]["requestId"], 77);
}

#[test]
fn resources_prompts_and_skills_are_served_with_digests() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let resources = gm.ok("resources/list", json!({}))["resources"].clone();
    let uris: Vec<&str> = resources.as_array().expect("list").iter().filter_map(|r| r["uri"].as_str()).collect();
    for uri in ["skill://gm/SKILL.md", "skill://gm/WORKFLOWS.md", "skill://gm-continue/SKILL.md"] {
        assert!(uris.contains(&uri), "{uri} in {uris:?}");
    }
    assert_eq!(gm.ok("resources/templates/list", json!({})), json!({ "resourceTemplates": [] }));

    let skills = gm.ok("skills/list", json!({}))["skills"].clone();
    let gm_skill = skills
        .as_array()
        .expect("skills")
        .iter()
        .find(|s| s["uri"] == "skill://gm/SKILL.md")
        .expect("gm skill")
        .clone();
    assert_eq!(gm_skill["frontmatter"]["name"], "gm");
    let text = gm.read_skill()["contents"][0]["text"].as_str().expect("text").to_owned();
    let manifest = gm_skill["resources"].as_array().expect("manifest");
    let skill_md = manifest.iter().find(|r| r["uri"] == "skill://gm/SKILL.md").expect("SKILL.md in manifest");
    assert_eq!(skill_md["size"], text.len());
    let digest = skill_md["digest"].as_str().expect("digest");
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    let got = gm.ok("skills/get", json!({ "uri": "skill://gm-continue/SKILL.md" }));
    assert_eq!(got["resultType"], "complete");
    assert_eq!(got["skill"]["frontmatter"]["name"], "gm-continue", "SEP-2640 puts the entry under skill: {got}");
    assert_eq!(got["skill"]["uri"], "skill://gm-continue/SKILL.md");
    assert!(got.get("ttlMs").is_none(), "no caching hints before protocol 2026-07-28");
    assert_eq!(gm.ok("skills/list", json!({}))["resultType"], "complete");
    assert_eq!(gm.request("skills/get", json!({ "uri": "skill://none/SKILL.md" }))["error"]["code"], -32602);

    let prompts = gm.ok("prompts/list", json!({}))["prompts"].clone();
    let names: Vec<&str> = prompts.as_array().expect("prompts").iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["gm", "gm-continue"]);
    let p = gm.ok("prompts/get", json!({ "name": "gm", "arguments": { "task": "port the parser" } }));
    let body = p["messages"][0]["content"]["text"].as_str().expect("text");
    assert!(body.contains("The seven rules of a run") && body.contains("port the parser"));
    assert_eq!(gm.request("prompts/get", json!({ "name": "nope" }))["error"]["code"], -32602);
}

/// SEP-2640: a skill's SKILL.md resource is listed under its frontmatter's name and
/// description, and every `_meta` key of a skill resource carries the skills extension's prefix.
#[test]
fn a_skill_md_resource_is_named_and_described_by_its_frontmatter_with_prefixed_meta_keys() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let resources = gm.ok("resources/list", json!({}))["resources"].clone();
    let resources = resources.as_array().expect("list");
    let by_uri = |uri: &str| resources.iter().find(|r| r["uri"] == uri).cloned().unwrap_or_else(|| panic!("{uri}"));
    for skill in ["gm", "gm-continue"] {
        let uri = format!("skill://{skill}/SKILL.md");
        let listed = by_uri(&uri);
        let entry = gm.ok("skills/get", json!({ "uri": uri }))["skill"]["frontmatter"].clone();
        assert_eq!((&listed["name"], &listed["description"]), (&entry["name"], &entry["description"]), "{listed}");
        assert_eq!(listed["name"], skill);
    }
    // A file other than SKILL.md has no frontmatter to take a name from: its path names it.
    let workflows = by_uri("skill://gm/WORKFLOWS.md");
    assert_eq!(workflows["name"], "gm/WORKFLOWS.md");
    for r in resources {
        let meta = r["_meta"].as_object().expect("_meta");
        assert!(meta.keys().all(|k| k.starts_with("io.modelcontextprotocol.skills/")), "{r}");
        let digest = meta["io.modelcontextprotocol.skills/digest"].as_str().expect("digest");
        assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    }
}

#[test]
fn gm_exits_within_a_second_of_stdin_closing_and_logs_the_stop() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let closed = Instant::now();
    gm.close_stdin();
    let status = gm.wait_exit(Duration::from_secs(5)).expect("gm exited");
    assert!(closed.elapsed() < Duration::from_secs(1), "took {:?}", closed.elapsed());
    assert!(status.success());
    // The session's end is in the log by the time its relay has exited; the worker stays for
    // other sessions.
    let events = common::read_log(&gm.log_path());
    assert_eq!(events.last().expect("events")["kind"], "session-end");
}

#[test]
fn seq_continues_across_restarts_of_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    for _ in 0..2 {
        let mut gm = Gm::start_in(dir.path(), &[], &[]);
        gm.initialize("2025-11-25");
        common::shut_down(gm);
    }
    let events = common::read_log(&dir.path().join(".gm/log.jsonl"));
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // Each worker's own events carry its id, each session's its run's.
    let runs: std::collections::HashSet<&str> = events.iter().filter_map(|e| e["run"].as_str()).collect();
    assert_eq!(runs.iter().filter(|r| r.starts_with("worker-")).count(), 2, "{runs:?}");
    assert_eq!(runs.len(), 4, "{runs:?}");
}

#[test]
fn a_torn_last_log_line_is_repaired_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join(".gm/log.jsonl");
    std::fs::create_dir_all(log.parent().expect("dir")).expect("mkdir");
    std::fs::write(&log, "{\"seq\":41,\"ts\":\"t\",\"run\":\"r\",\"kind\":\"start\"}\n{\"seq\":42,\"ts\":\"t\",\"ru")
        .expect("write");
    let mut gm = Gm::start_in(dir.path(), &[], &[]);
    gm.initialize("2025-11-25");
    let events = gm.log_events();
    assert_eq!(events[0]["seq"], 41);
    assert_eq!(events[1]["seq"], 42);
    assert_eq!(events[1]["kind"], "start");
    assert_eq!(events[1]["repairedBytes"], 22);
}

#[test]
fn stdout_carries_only_protocol_lines() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    // A body that logs to the console must not leak onto stdout.
    let r = gm.call("run_code", json!({ "code": "console.log('hello'); console.error('oops'); return 1" }));
    assert!(text_of(&r).contains("\"result\":1"), "{r}");
    gm.close_stdin();
    while let Some(v) = gm.recv(Duration::from_millis(300)) {
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
    }
}

#[test]
fn verb_arguments_travel_as_sent_and_bad_ones_are_a_structured_error_logged_with_them() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    // A string id, escapes and non-ASCII in the arguments: the reply and the log keep them.
    let path = "dir \"q\"/ü\\n.txt";
    gm.send_raw(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"s-1\",\"method\":\"tools/call\",\"params\":{{\"name\":\"stat_file\",\"arguments\":{}}}}}\n",
            json!({ "path": path })
        )
        .as_bytes(),
    );
    let reply = gm.recv_id(&json!("s-1"));
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["exists"], false);
    assert!(reply["result"]["structuredContent"]["path"].as_str().unwrap_or("").ends_with(path), "{reply}");
    // null arguments read as none; a wrong type is invalid_args naming the problem.
    let r = gm.ok("tools/call", json!({ "name": "stat_file", "arguments": null }));
    assert_eq!(r["structuredContent"]["error"]["code"], "invalid_args", "{r}");
    let err = gm.call_err("stat_file", json!({ "path": 5 }));
    assert_eq!(err["code"], "invalid_args");
    let message = err["message"].as_str().unwrap_or("");
    assert!(message.contains("invalid type") && !message.contains("line 1"), "{message}");
    assert_eq!(gm.ok("ping", json!({})), json!({}));
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(5)).expect("gm exits");
    let actions = gm.events_of("action");
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert_eq!((&actions[0]["id"], &actions[0]["args"]["path"]), (&json!("s-1"), &json!(path)));
    assert_eq!(actions[0]["outcome"], "ok");
    assert_eq!((&actions[2]["args"], &actions[2]["error"]), (&json!({ "path": 5 }), &json!("invalid_args")));
}

/// Why `schema` would trip a strict linter or a single-type schema dialect, if it would.
fn not_plain(schema: &Value, at: &str) -> Option<String> {
    match schema {
        Value::Object(m) => {
            if let Some(t) = m.get("type") {
                if !t.is_string() {
                    return Some(format!("{at}: type {t} is not one type"));
                }
            }
            for key in ["anyOf", "oneOf", "$ref", "$defs", "nullable"] {
                if m.contains_key(key) {
                    return Some(format!("{at}: uses {key}"));
                }
            }
            if m.get("enum").and_then(Value::as_array).is_some_and(|e| e.iter().any(Value::is_null)) {
                return Some(format!("{at}: an enum with null"));
            }
            if let Some(f) = m.get("format").and_then(Value::as_str) {
                if !["date-time", "uri", "email", "uuid"].contains(&f) {
                    return Some(format!("{at}: format {f} is not a JSON Schema format"));
                }
            }
            m.iter().find_map(|(k, v)| not_plain(v, &format!("{at}.{k}")))
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| not_plain(v, &format!("{at}[{i}]"))),
        _ => None,
    }
}

#[test]
fn every_input_schema_is_plain_optional_fields_are_absent_not_null() {
    for surface in ["code", "tools"] {
        let mut gm = Gm::start(&["--surface", surface, "--page-size", "1000"]);
        gm.initialize("2025-11-25");
        let tools = gm.ok("tools/list", json!({}))["tools"].clone();
        for tool in tools.as_array().expect("tools") {
            let name = tool["name"].as_str().expect("name");
            if let Some(why) = not_plain(&tool["inputSchema"], name) {
                panic!("{surface} surface: {why}");
            }
        }
    }
    let mut gm = Gm::start(&[]);
    gm.ready();
    for verb in gm.js("return gm.verbs()").as_array().expect("verbs") {
        let name = verb["name"].as_str().expect("name");
        assert_eq!(not_plain(&verb["inputSchema"], name), None);
    }
}

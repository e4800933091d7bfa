//! The run loop through a real MCP connection: the read gate, next_context, run_code, finish.

mod common;

use std::time::{Duration, Instant};

use common::Gm;
use serde_json::json;

#[test]
fn run_code_is_refused_until_the_skill_is_read_on_this_connection() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let err = gm.call_err("run_code", json!({ "code": "return 1" }));
    assert_eq!(err["code"], "skill_not_read");
    assert!(err["message"].as_str().expect("message").contains("resources/read"));
    assert!(err["message"].as_str().expect("message").contains("skill://gm/SKILL.md"));
    // The prompt route does not open the gate.
    gm.ok("prompts/get", json!({ "name": "gm" }));
    assert_eq!(gm.call_err("run_code", json!({ "code": "return 1" }))["code"], "skill_not_read");
    // Another skill file does not open it either.
    gm.ok("resources/read", json!({ "uri": "skill://gm/WORKFLOWS.md" }));
    assert_eq!(gm.call_err("run_code", json!({ "code": "return 1" }))["code"], "skill_not_read");
    gm.read_skill();
    assert_eq!(gm.js("return 1"), 1);
    assert_eq!(gm.events_of("skill-read").len(), 2);
}

#[test]
fn the_gate_is_per_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &[], &[]);
    first.ready();
    assert_eq!(first.js("return 1"), 1);
    let mut second = Gm::start_in(dir.path(), &[], &[]);
    second.initialize("2025-11-25");
    assert_eq!(second.call_err("run_code", json!({ "code": "return 1" }))["code"], "skill_not_read");
}

#[test]
fn run_code_drives_the_file_verbs_and_logs_each_call() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.js(
        "await gm.write_file({ path: 'src/a.txt', content: 'one\\ntwo\\n' });
         const e = await gm.edit_file({ path: 'src/a.txt', old: 'two', new: 'three' });
         const f = await gm.read_file({ path: 'src/a.txt' });
         const d = await gm.list_dir({ path: 'src' });
         const s = await gm.stat_file({ path: 'src/a.txt' });
         return { content: f.content, diff: e.diff, names: d.entries.map(x => x.name), size: s.size, verbs: gm.verbs().map(v => v.name) };",
    );
    assert_eq!(r["content"], "one\nthree\n");
    assert!(r["diff"].as_str().expect("diff").contains("+three"));
    assert_eq!(r["names"], json!(["a.txt"]));
    assert_eq!(r["size"], 10);
    let verbs = r["verbs"].as_array().expect("verbs");
    for name in [
        "read_file",
        "write_file",
        "edit_file",
        "stat_file",
        "list_dir",
        "run_shell",
        "job_start",
        "job_status",
        "job_stop",
        "query_log",
    ] {
        assert!(verbs.contains(&json!(name)), "gm.verbs() lists {name}");
    }
    assert_eq!(std::fs::read_to_string(gm.workspace.join("src/a.txt")).expect("file"), "one\nthree\n");
    let calls: Vec<String> =
        gm.events_of("code-call").iter().map(|e| e["verb"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(calls, ["write_file", "edit_file", "read_file", "list_dir", "stat_file"]);
}

#[test]
fn a_throw_comes_back_with_message_stack_and_the_line_in_the_body() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let err = gm
        .call_err("run_code", json!({ "code": "const x = 1;\nconst y = 2;\nthrow new RangeError('bad ' + (x + y));" }));
    assert_eq!(err["code"], "js_error");
    assert_eq!(err["name"], "RangeError");
    assert_eq!(err["message"], "bad 3");
    assert_eq!(err["line"], 3);
    assert_eq!(err["lineText"], "throw new RangeError('bad ' + (x + y));");
    assert!(err["stack"].as_str().expect("stack").contains("eval_script:3"));
    let err = gm.call_err("run_code", json!({ "code": "\nawait gm.read_file({ path: 'missing.txt' });" }));
    assert_eq!(err["details"]["code"], "not_found");
    assert_eq!(err["line"], 2);
    let err = gm.call_err("run_code", json!({ "code": "return (" }));
    assert_eq!(err["name"], "SyntaxError");
}

#[test]
fn gm_try_returns_failures_as_data() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.js("return await gm.try(() => gm.read_file({ path: 'nope' }));");
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["code"], "not_found");
}

#[test]
fn console_output_is_captured_beside_the_result() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let out = gm.call_ok("run_code", json!({ "code": "console.log('a', 1, {b: 2}); console.error('e'); return null" }));
    assert_eq!(out["console"], json!([{ "level": "log", "text": "a 1 {\"b\":2}" }, { "level": "error", "text": "e" }]));
}

#[test]
fn require_and_import_load_workspace_files() {
    let mut gm = Gm::start(&[]);
    std::fs::create_dir_all(gm.workspace.join("lib")).expect("mkdir");
    std::fs::write(
        gm.workspace.join("lib/math.js"),
        "const h = require('./half'); module.exports = { twice: x => x * 2, half: h };",
    )
    .expect("write");
    std::fs::write(gm.workspace.join("lib/half.js"), "module.exports = x => x / 2;").expect("write");
    std::fs::write(gm.workspace.join("lib/esm.mjs"), "export const three = 3;").expect("write");
    std::fs::write(gm.workspace.join("data.json"), "{\"k\": [1, 2]}").expect("write");
    gm.ready();
    let r = gm.js(
        "const m = require('./lib/math'); const e = await import('./lib/esm.mjs'); const d = require('./data.json');
         return [m.twice(4), m.half(8), e.three, d.k.length];",
    );
    assert_eq!(r, json!([8, 4, 3, 2]));
    let err = gm.call_err("run_code", json!({ "code": "require('./nope')" }));
    assert!(err["message"].as_str().expect("message").contains("cannot find module"));
}

/// Polls job_status (with its wait) until the job is no longer running.
fn settle(gm: &mut Gm, name: &str) -> serde_json::Value {
    for _ in 0..40 {
        let info = gm.js(&format!("return await gm.job_status({{ name: '{name}', wait: 2000 }})"));
        if info["state"] != "running" {
            return info;
        }
    }
    panic!("{name} never ended");
}

#[test]
fn a_body_past_its_budget_goes_on_in_the_background_and_reports_through_job_status() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let started = Instant::now();
    let r = gm.call_ok(
        "run_code",
        json!({ "code": "await new Promise(r => setTimeout(r, 600)); console.log('late'); return { done: true }", "timeoutMs": 200 }),
    );
    assert!(started.elapsed() < Duration::from_millis(550), "the call returned at its budget");
    assert_eq!(r["state"], "running");
    let name = r["background"].as_str().expect("a job name").to_owned();
    let info = settle(&mut gm, &name);
    assert_eq!(info["state"], "exited", "{info}");
    assert_eq!(info["kind"], "body");
    assert_eq!(info["result"], json!({ "done": true }));
    assert_eq!(info["tail"], "[log] late\n");

    let r = gm.call_ok(
        "run_code",
        json!({ "code": "await new Promise(r => setTimeout(r, 300)); throw new Error('bg fail')", "timeoutMs": 100 }),
    );
    let info = settle(&mut gm, r["background"].as_str().expect("name"));
    assert_eq!((info["exitCode"].as_i64(), info["error"]["message"].as_str()), (Some(1), Some("bg fail")));
    let done: Vec<_> = gm.events_of("job").into_iter().filter(|e| e["what"] == "done").collect();
    assert_eq!(done.len(), 2);
}

#[test]
fn a_busy_background_body_leaves_the_server_serving_and_job_stop_ends_it() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call_ok("run_code", json!({ "code": "while (true) {}", "timeoutMs": 200 }));
    let name = r["background"].as_str().expect("name").to_owned();
    let started = Instant::now();
    assert_eq!(gm.js("return 2"), 2, "another engine serves while one loops");
    assert!(started.elapsed() < Duration::from_secs(2));
    let stopped = gm.js(&format!("return await gm.job_stop({{ name: '{name}' }})"));
    assert_eq!(stopped["state"], "killed");
    let info = settle(&mut gm, &name);
    assert_eq!(info["state"], "killed");
    assert_eq!(gm.js("return 3"), 3);
}

#[test]
fn finish_with_stop_background_stops_bodies_still_running() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.call_ok("run_code", json!({ "code": "await new Promise(() => {})", "timeoutMs": 100 }));
    let name = r["background"].as_str().expect("name").to_owned();
    let f = gm.call_ok("finish", json!({ "stopBackground": true }));
    assert_eq!(f["stoppedBackground"], json!([name.clone()]));
    let info = settle(&mut gm, &name);
    assert_eq!(info["state"], "killed");
}

#[test]
fn a_background_body_is_stopped_by_a_restart_and_the_log_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &[], &[]);
    first.ready();
    let r = first.call_ok("run_code", json!({ "code": "await new Promise(() => {})", "timeoutMs": 100 }));
    let name = r["background"].as_str().expect("name").to_owned();
    common::shut_down(first);
    let mut second = Gm::start_in(dir.path(), &[], &[]);
    second.ready();
    let stopped = second.events_of("job").into_iter().find(|e| e["name"] == name.as_str()).expect("a job event");
    assert_eq!(stopped["what"], "stopped");
    let info = second.js(&format!("return await gm.job_status({{ name: '{name}' }})"));
    assert_eq!(info["state"], "lost");
    assert_eq!(info["error"]["code"], "stopped_by_restart");
}

#[test]
fn a_budget_over_the_maximum_is_refused() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let err = gm.call_err("run_code", json!({ "code": "return 1", "timeoutMs": 300001 }));
    assert_eq!(err["code"], "invalid_args");
    assert!(err["message"].as_str().expect("message").contains("300000"));
    assert_eq!(gm.call_err("run_code", json!({ "code": "return 1", "timeoutMs": 0 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("run_code", json!({ "code": 5 }))["code"], "invalid_args");
}

#[test]
fn a_runaway_allocation_is_an_error_and_the_server_survives() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let err = gm.call_err("run_code", json!({ "code": "const a = []; while (true) a.push('x'.repeat(1 << 20));" }));
    assert_eq!(err["code"], "out_of_memory");
    assert_eq!(gm.js("return 2"), 2);
}

#[test]
fn cancelling_a_run_code_call_interrupts_the_body_and_sends_no_reply() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    gm.send(&json!({ "jsonrpc": "2.0", "id": "spin", "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "while (true) {}" } } }));
    std::thread::sleep(Duration::from_millis(200));
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "spin" } }));
    // The next call is answered, and the cancelled one never is.
    assert_eq!(gm.js("return 3"), 3);
    assert!(gm.recv(Duration::from_millis(300)).is_none());
    let action = gm.events_of("action").into_iter().find(|e| e["id"] == "spin").expect("logged");
    assert_eq!(action["cancelled"], true);
    assert_eq!(action["error"], "cancelled");
}

#[test]
fn parallel_calls_overlap_and_the_log_shows_in_flight() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let started = Instant::now();
    for i in 0..4 {
        gm.send(&json!({ "jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
            "params": { "name": "run_code", "arguments": { "code": "await new Promise(r => setTimeout(r, 400)); return 1" } } }));
    }
    for i in 0..4 {
        let r = gm.recv_id(&json!(100 + i));
        assert_eq!(r["result"]["isError"], false);
    }
    assert!(started.elapsed() < Duration::from_millis(1500), "calls ran one after another: {:?}", started.elapsed());
    let max_in_flight = gm.events_of("action").iter().filter_map(|e| e["inFlight"].as_u64()).max();
    assert_eq!(max_in_flight, Some(4));
}

#[test]
fn max_inflight_bounds_the_calls_running_at_once() {
    let mut gm = Gm::start(&["--max-inflight", "2"]);
    gm.ready();
    for i in 0..4 {
        gm.send(&json!({ "jsonrpc": "2.0", "id": 200 + i, "method": "tools/call",
            "params": { "name": "run_code", "arguments": { "code": "await new Promise(r => setTimeout(r, 100)); return 1" } } }));
    }
    for i in 0..4 {
        gm.recv_id(&json!(200 + i));
    }
    let max_in_flight = gm.events_of("action").iter().filter_map(|e| e["inFlight"].as_u64()).max();
    assert_eq!(max_in_flight, Some(2));
}

#[test]
fn next_context_rereads_the_rules_every_step_and_keeps_the_task() {
    let skills = tempfile::tempdir().expect("tempdir");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    for rel in ["gm/SKILL.md", "gm/WORKFLOWS.md", "gm-continue/SKILL.md"] {
        let to = skills.path().join(rel);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(src.join(rel), &to).expect("copy");
    }
    let ws = tempfile::tempdir().expect("tempdir");
    let skills_dir = skills.path().to_str().expect("utf8").to_owned();
    let mut gm = Gm::start_in(ws.path(), &[], &[("GM_SKILLS_DIR", &skills_dir)]);
    gm.initialize("2025-11-25");
    let first = gm.call_ok("next_context", json!({ "task": "ship the parser" }));
    assert_eq!(first["step"], 1);
    assert_eq!(first["task"], "ship the parser");
    assert_eq!(first["rules"].as_array().expect("rules").len(), 7);
    assert_eq!(first["openRows"], json!([]));
    assert_eq!(first["background"], json!([]));

    let path = skills.path().join("gm/SKILL.md");
    let text = std::fs::read_to_string(&path).expect("read");
    let at = text.find("## The seven rules of a run").expect("heading");
    let edited = format!("{}{}", &text[..at], text[at..].replacen("\n1. ", "\n1. EDITED RULE. ", 1));
    std::fs::write(&path, edited).expect("write");
    let second = gm.call_ok("next_context", json!({}));
    assert_eq!(second["step"], 2);
    assert_eq!(second["task"], "ship the parser");
    assert!(second["rules"][0].as_str().expect("rule").starts_with("EDITED RULE."));
    assert!(second["recentEvents"].as_array().expect("events").iter().any(|e| e["kind"] == "action"));
}

#[test]
fn the_served_rules_are_the_rules_in_the_skill_file() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let served = gm.call_ok("next_context", json!({}))["rules"].clone();
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/gm/SKILL.md"))
        .expect("skill file");
    let section = &text[text.find("## The seven rules of a run").expect("heading")..];
    let from_file: Vec<String> = section
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(". ").filter(|(n, _)| n.parse::<u8>().is_ok()).map(|(_, r)| r.trim().to_owned()))
        .collect();
    assert_eq!(from_file.len(), 7);
    assert_eq!(served, json!(from_file));
}

#[test]
fn the_gm_prompt_sets_the_task_seen_by_next_context() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    gm.ok("prompts/get", json!({ "name": "gm", "arguments": { "task": "fix issue 12" } }));
    assert_eq!(gm.call_ok("next_context", json!({}))["task"], "fix issue 12");
}

#[test]
fn finish_logs_the_end_with_its_gaps_before_replying() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    gm.call_ok("next_context", json!({ "task": "t" }));
    let r = gm.call_ok("finish", json!({ "summary": "did t", "gaps": ["not benchmarked"] }));
    assert_eq!(r["gaps"], json!(["not benchmarked"]));
    // finish syncs the log before it replies: the end event is on disk now.
    let events = common::read_log(&gm.log_path());
    let end = events.iter().find(|e| e["kind"] == "end").expect("end event");
    assert_eq!(end["gaps"], json!(["not benchmarked"]));
    assert_eq!(end["summary"], "did t");
    assert_eq!(end["steps"], 1);
    assert_eq!(r["lastSeq"], end["seq"]);
    assert_eq!(gm.call_err("finish", json!({ "gaps": "not a list" }))["code"], "invalid_args");
}

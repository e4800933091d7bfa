//! gm driven by a real third-party MCP client: the `rmcp` crate's client over a child process.

use rmcp::model::{CallToolRequestParam, ClientInfo, Implementation, ProtocolVersion, ReadResourceRequestParam};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

fn gm(workspace: &std::path::Path, surface: &str) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gm"));
    cmd.env(
        "GM_DEFAULTS_DIR",
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/no-child-servers"),
    );
    cmd.args(["serve", "--surface", surface]).current_dir(workspace);
    TokioChildProcess::new(cmd).expect("spawn gm")
}

fn args(v: Value) -> Option<serde_json::Map<String, Value>> {
    v.as_object().cloned()
}

fn client_info(version: ProtocolVersion) -> ClientInfo {
    ClientInfo {
        protocol_version: version,
        capabilities: Default::default(),
        client_info: Implementation {
            name: "rmcp-test".into(),
            version: "0".into(),
            ..Implementation::from_build_env()
        },
    }
}

#[tokio::test]
async fn rmcp_client_connects_reads_the_skill_and_runs_code_that_writes_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let client = ().serve(gm(dir.path(), "code")).await.expect("handshake");
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.name, "gm");

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["next_context", "run_code", "finish"]);

    let refused = client
        .call_tool(CallToolRequestParam { name: "run_code".into(), arguments: args(json!({ "code": "return 1" })) })
        .await
        .expect("call");
    assert_eq!(refused.is_error, Some(true));

    let skill = client
        .read_resource(ReadResourceRequestParam { uri: "skill://gm/SKILL.md".into() })
        .await
        .expect("resources/read");
    assert_eq!(skill.contents.len(), 1);

    let code = "await gm.write_file({ path: 'out/r.txt', content: 'from rmcp' }); return (await gm.stat_file({ path: 'out/r.txt' })).size;";
    let r = client
        .call_tool(CallToolRequestParam { name: "run_code".into(), arguments: args(json!({ "code": code })) })
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(false));
    assert_eq!(r.structured_content.as_ref().map(|s| s["result"].clone()), Some(json!(9)));
    let meta = serde_json::to_value(r.meta.expect("_meta")).expect("meta json");
    assert!(meta["com.anentrypoint.gmnew/run"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(std::fs::read_to_string(dir.path().join("out/r.txt")).expect("file"), "from rmcp");

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert_eq!(prompts.len(), 2);
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn rmcp_client_uses_the_tools_surface_at_older_protocol_versions() {
    for version in [ProtocolVersion::V_2024_11_05, ProtocolVersion::V_2025_06_18] {
        let dir = tempfile::tempdir().expect("tempdir");
        let client = client_info(version.clone()).serve(gm(dir.path(), "tools")).await.expect("handshake");
        assert_eq!(client.peer_info().expect("info").protocol_version, version);
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == "edit_file"));
        client
            .call_tool(CallToolRequestParam {
                name: "write_file".into(),
                arguments: args(json!({ "path": "v.txt", "content": "a b" })),
            })
            .await
            .expect("write");
        let r = client
            .call_tool(CallToolRequestParam {
                name: "edit_file".into(),
                arguments: args(json!({ "path": "v.txt", "old": "b", "new": "c" })),
            })
            .await
            .expect("edit");
        assert_eq!(r.is_error, Some(false));
        assert_eq!(std::fs::read_to_string(dir.path().join("v.txt")).expect("file"), "a c");
        client.cancel().await.expect("close");
    }
}

/// The pids in the run log's `start` events, one per worker the relay started.
fn worker_pids(workspace: &std::path::Path) -> Vec<i32> {
    let log = std::fs::read_to_string(workspace.join(".gm/log.jsonl")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "start")
        .filter_map(|e| e["pid"].as_i64().map(|p| p as i32))
        .collect()
}

#[tokio::test]
async fn rmcp_client_survives_a_killed_worker_on_the_same_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let client = ().serve(gm(dir.path(), "code")).await.expect("handshake");
    client.read_resource(ReadResourceRequestParam { uri: "skill://gm/SKILL.md".into() }).await.expect("read");
    let code = "await gm.write_file({ path: 'started', content: 'x' }); await gm.run_shell({ command: 'sleep 60' }); return 1;";
    let peer = client.peer().clone();
    let blocked = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParam { name: "run_code".into(), arguments: args(json!({ "code": code })) }).await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.path().join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "the body never started");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let first = worker_pids(dir.path())[0];
    // SAFETY: kill(2) on the worker's pid, read from the log.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);

    let lost = blocked.await.expect("task").expect("an answer, not a transport error");
    assert_eq!(lost.is_error, Some(true));
    let error = lost.structured_content.expect("structured")["error"].clone();
    assert_eq!(error["code"], "worker_restarted", "{error}");

    let r = client
        .call_tool(CallToolRequestParam { name: "run_code".into(), arguments: args(json!({ "code": "return 'on';" })) })
        .await
        .expect("call after the restart");
    assert_eq!(r.is_error, Some(false), "the gate is still open: {r:?}");
    assert_eq!(worker_pids(dir.path()).len(), 2);
    client.cancel().await.expect("close");
}

//! gm driven by rmcp 3, which speaks MCP 2026-07-28: over stdio and over `gm serve --http`, a
//! client that discovers (no `initialize`) lists the tools, reads the skill and runs code; one
//! that keeps the handshake still gets 2025-11-25 on the same binary.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use rmcp3::model::{CallToolRequestParams, ProtocolVersion, ReadResourceRequestParams};
use rmcp3::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp3::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp3::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{json, Value};

fn no_child_servers() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/no-child-servers")
}

fn gm_stdio(workspace: &std::path::Path) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gm"));
    cmd.env("GM_DEFAULTS_DIR", no_child_servers()).env("GM_WORKER_IDLE_MS", "3000");
    cmd.args(["serve"]).current_dir(workspace);
    TokioChildProcess::new(cmd).expect("spawn gm")
}

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] }
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Lists the tools, reads the skill, runs a body; returns the body's result.
async fn use_gm<S: rmcp3::Service<rmcp3::RoleClient>>(
    client: &rmcp3::service::RunningService<rmcp3::RoleClient, S>,
) -> Value {
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["next_context", "run_code", "finish"]);
    let skill =
        client.read_resource(ReadResourceRequestParams::new("skill://gm/SKILL.md")).await.expect("resources/read");
    assert_eq!(skill.contents.len(), 1);
    let code = "await gm.write_file({ path: 'r3.txt', content: 'rmcp 3' }); return (await gm.stat_file({ path: 'r3.txt' })).size;";
    let r = client
        .call_tool(CallToolRequestParams::new("run_code").with_arguments(args(json!({ "code": code }))))
        .await
        .expect("tools/call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    r.structured_content.expect("structured")["result"].clone()
}

#[tokio::test]
async fn rmcp3_discovers_gm_over_stdio_and_runs_code_without_initialize() {
    let dir = tempfile::tempdir().expect("tempdir");
    let client = ().serve_with_lifecycle(gm_stdio(dir.path()), discover()).await.expect("discover");
    assert_eq!(client.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2026_07_28));
    assert_eq!(use_gm(&client).await, 6);
    client.cancel().await.expect("close");
    let log = std::fs::read_to_string(dir.path().join(".gm/log.jsonl")).expect("log");
    assert!(log.lines().any(|l| l.contains("\"kind\":\"initialize\"") && l.contains("\"stateless\":true")), "{log}");
}

#[tokio::test]
async fn rmcp3_over_http_speaks_2026_07_28_and_2025_11_25_with_the_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut front: Child = Command::new(env!("CARGO_BIN_EXE_gm"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(&ws)
        .env("GM_DEFAULTS_DIR", no_child_servers())
        .env("GM_WORKER_IDLE_MS", "3000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gm serve --http");
    let stderr = front.stderr.take().expect("stderr");
    // Read on: gm's later lines must find their pipe open.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("gm: listening on ") {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let url = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("gm says where it listens");
    let token = std::fs::read_to_string(ws.join(".gm/http.token")).expect("token").trim().to_owned();
    let transport = || {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(token.clone()),
        )
    };

    let modern = ().serve_with_lifecycle(transport(), discover()).await.expect("discover over HTTP");
    assert_eq!(modern.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2026_07_28));
    assert_eq!(use_gm(&modern).await, 6);
    modern.cancel().await.expect("close");

    let legacy =
        ().serve_with_lifecycle(transport(), ClientLifecycleMode::Initialize).await.expect("initialize over HTTP");
    assert_eq!(legacy.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2025_11_25));
    assert_eq!(use_gm(&legacy).await, 6);
    legacy.cancel().await.expect("close");

    // SAFETY: kill(2) on the front this test spawned.
    unsafe { libc::kill(front.id() as i32, libc::SIGTERM) };
    let _ = front.wait();
}

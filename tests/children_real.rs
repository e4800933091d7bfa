//! Child MCP servers that users run: the reference server-everything from npm, and the
//! Playwright browser server driving Debian's chromium headless. Installed by the tests
//! themselves (`npm install` of pinned versions into the build's temp dir); chromium comes from
//! the machine (`.ci/run` installs it).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::{json, Value};

const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";
const PLAYWRIGHT: &str = "@playwright/mcp@0.0.83";
const CHROMIUM: &str = "/usr/bin/chromium";

fn everything_entry(extra: Value) -> Value {
    let dir = common::npm_packages(&[EVERYTHING]);
    let cli = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut e = json!({ "command": "node", "args": [cli.to_str().expect("utf8"), "stdio"] });
    if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(extra.clone());
    }
    e
}

fn serve_with(ws: &Path, servers: Value) -> Gm {
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    std::fs::write(ws.join(".gm/mcp.json"), json!({ "mcpServers": servers }).to_string()).expect("mcp.json");
    common::approve_workspace_servers(ws);
    let home = common::trust_home();
    let mut gm = Gm::start_in(ws, &[], &[("HOME", home.to_str().expect("utf8"))]);
    gm.ready();
    gm
}

#[test]
fn server_everything_tools_are_calls_with_their_schemas_results_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gm = serve_with(dir.path(), json!({ "everything": everything_entry(json!({})) }));
    let r = gm.js("const echo = await gm.everything_echo({ message: 'hello from gm' });
         const sum = await gm.everything_get_sum({ a: 2, b: 40 });
         const structured = await gm.everything_get_structured_content({ location: 'New York' });
         const bad = await gm.try(() => gm.everything_get_sum({ a: 'x', b: 1 }));
         const schema = gm.verbs().find(v => v.name === 'everything_echo');
         return { echo, sum, structured, bad, schema };");
    assert_eq!(r["echo"]["content"][0]["text"], "Echo: hello from gm", "{r}");
    assert!(r["sum"]["content"][0]["text"].as_str().expect("text").contains("42"), "{r}");
    assert!(r["structured"]["structuredContent"]["temperature"].is_number(), "structured content as sent: {r}");
    assert_eq!(r["bad"]["ok"], false);
    assert_eq!(r["bad"]["error"]["code"], "tool_error");
    assert_eq!(r["schema"]["server"], "everything");
    assert_eq!(r["schema"]["tool"], "echo");
    assert_eq!(r["schema"]["inputSchema"]["required"], json!(["message"]), "the child's schema as it sent it");
}

#[test]
fn a_long_running_tool_of_server_everything_is_cut_at_its_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gm = serve_with(dir.path(), json!({ "everything": everything_entry(json!({ "timeoutMs": 500 })) }));
    let started = Instant::now();
    let err = gm.call_err(
        "run_code",
        json!({ "code": "await gm.everything_trigger_long_running_operation({ duration: 10, steps: 5 });" }),
    );
    // The operation runs 10 s; the time also holds the child's start (npx, node), which a
    // loaded machine stretched past 5 s once.
    assert!(started.elapsed() < Duration::from_secs(9), "{:?}", started.elapsed());
    assert_eq!(err["details"]["code"], "timeout", "{err}");
    // The server is still there for the next call.
    assert_eq!(
        gm.js("return (await gm.everything_echo({ message: 'still here' })).content[0].text"),
        "Echo: still here"
    );
}

/// Serves one page whose title the test looks for; returns its URL.
fn page_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                    break;
                }
            }
            let body = "<!doctype html><html><head><title>gm drives a browser</title></head><body><h1>Hello, browser</h1></body></html>";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn a_body_drives_a_headless_browser_through_the_playwright_server() {
    assert!(
        Path::new(CHROMIUM).is_file(),
        "this test needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
    );
    let dir = common::npm_packages(&[PLAYWRIGHT]);
    let cli = dir.join("node_modules/@playwright/mcp/cli.js");
    let ws = tempfile::tempdir().expect("tempdir");
    let entry = json!({
        "command": "node",
        "args": [cli.to_str().expect("utf8"), "--headless", "--no-sandbox", "--isolated", "--executable-path", CHROMIUM],
        "startupTimeoutMs": 60000,
        "timeoutMs": 60000,
    });
    let mut gm = serve_with(ws.path(), json!({ "browser": entry }));
    let url = page_server();
    let r = gm.js(&format!(
        "const nav = await gm.browser_browser_navigate({{ url: '{url}' }});
         const text = nav.content.map(c => c.text || '').join('\\n');
         const snap = await gm.browser_browser_snapshot({{}});
         await gm.browser_browser_close({{}});
         return {{ text, snapshot: snap.content.map(c => c.text || '').join('\\n') }};"
    ));
    let text = r["text"].as_str().expect("text");
    assert!(text.contains("gm drives a browser"), "the page's title came back: {text}");
    assert!(r["snapshot"].as_str().expect("snapshot").contains("Hello, browser"), "{r}");
    let calls: Vec<String> = gm
        .events_of("code-call")
        .iter()
        .filter(|e| e["server"] == "browser")
        .map(|e| e["tool"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(calls, ["browser_navigate", "browser_snapshot", "browser_close"]);
}

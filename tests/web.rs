//! fetch against a small HTTP server on 127.0.0.1 started by the test.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::json;

/// Serves: /ok, /redirect/<n> (a chain of n hops to /ok), /loop (to itself via /loop2),
/// /slow (answers after 3 s), /big (5 MB of text), /bin (binary). Returns the base URL.
fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                        break;
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let reply = |code: &str, headers: &str, body: &[u8]| -> Vec<u8> {
                    let mut r = format!(
                        "HTTP/1.1 {code}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                };
                let out = if path == "/ok" {
                    reply("200 OK", "Content-Type: text/plain\r\nX-Test: yes\r\n", b"hello from the test server\n")
                } else if let Some(n) = path.strip_prefix("/redirect/") {
                    let n: u32 = n.parse().unwrap_or(0);
                    let next = if n <= 1 { "/ok".to_owned() } else { format!("/redirect/{}", n - 1) };
                    reply("302 Found", &format!("Location: {next}\r\n"), b"")
                } else if path == "/loop" {
                    reply("302 Found", "Location: /loop2\r\n", b"")
                } else if path == "/loop2" {
                    reply("302 Found", "Location: /loop\r\n", b"")
                } else if path == "/slow" {
                    std::thread::sleep(Duration::from_secs(3));
                    reply("200 OK", "", b"late")
                } else if path == "/big" {
                    let body: Vec<u8> = (0..5 * 1024 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
                    reply("200 OK", "Content-Type: text/plain\r\n", &body)
                } else if path == "/utf8cut" {
                    // One byte past the inline cap, so the cut splits the last character.
                    let mut body = vec![b'a'; 32 * 1024 - 1];
                    body.extend_from_slice("é".as_bytes());
                    reply("200 OK", "Content-Type: text/plain\r\n", &body)
                } else if path == "/hang" {
                    std::thread::sleep(Duration::from_secs(30));
                    reply("200 OK", "", b"too late")
                } else if path == "/bin" {
                    reply("200 OK", "Content-Type: application/octet-stream\r\n", &[0, 1, 2, 255, 0, 7])
                } else {
                    reply("404 Not Found", "", b"no")
                };
                let _ = stream.write_all(&out);
            });
        }
    });
    base
}

fn tools() -> Gm {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    gm
}

#[test]
fn fetch_returns_status_headers_and_body_and_follows_redirects() {
    let base = server();
    let mut gm = tools();
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/ok") }));
    assert_eq!(r["status"], 200);
    assert_eq!(r["body"], "hello from the test server\n");
    assert_eq!(r["headers"]["x-test"], "yes");
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/redirect/5") }));
    assert_eq!((r["status"].as_u64(), r["redirects"].as_u64()), (Some(200), Some(5)));
    assert!(r["url"].as_str().expect("url").ends_with("/ok"));
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/missing") }));
    assert_eq!(r["status"], 404, "an HTTP error status is an answer, not a failure");
}

#[test]
fn loops_long_chains_and_timeouts_are_clear_errors() {
    let base = server();
    let mut gm = tools();
    let e = gm.call_err("fetch", json!({ "url": format!("{base}/loop") }));
    assert!(e["message"].as_str().expect("message").contains("redirect loop"), "{e}");
    let e = gm.call_err("fetch", json!({ "url": format!("{base}/redirect/25") }));
    assert!(e["message"].as_str().expect("message").contains("more than 20 redirects"), "{e}");
    let started = Instant::now();
    let e = gm.call_err("fetch", json!({ "url": format!("{base}/slow"), "timeoutMs": 300 }));
    assert!(e["message"].as_str().expect("message").contains("timed out"), "{e}");
    assert_eq!(e["code"], "timeout", "a timeout is worth a retry, not a refusal");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(gm.call_err("fetch", json!({ "url": "not a url" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("fetch", json!({ "url": "ftp://example.invalid/x" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("fetch", json!({ "url": format!("{base}/ok"), "method": "TRACE" }))["code"], "invalid_args");
}

#[test]
fn large_and_binary_bodies_are_saved_whole() {
    let base = server();
    let mut gm = tools();
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/big") }));
    let total = 5 * 1024 * 1024;
    assert_eq!(r["bodyBytes"], total);
    assert_eq!(r["body"].as_str().expect("body").len(), 32 * 1024);
    assert_eq!(r["bodyCut"], total - 32 * 1024);
    let file = r["bodyFile"].as_str().expect("file");
    assert_eq!(std::fs::metadata(file).expect("saved").len(), total as u64);
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/bin") }));
    assert_eq!(r["binary"], true);
    assert_eq!(r["body"], "");
    assert_eq!(std::fs::read(r["bodyFile"].as_str().expect("file")).expect("saved"), [0, 1, 2, 255, 0, 7]);
}

#[test]
fn a_server_that_cannot_be_reached_is_unavailable_not_refused() {
    // A port that was bound and released: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let mut gm = tools();
    let e = gm.call_err("fetch", json!({ "url": format!("http://127.0.0.1:{port}/x") }));
    assert_eq!(e["code"], "unavailable", "{e}");
}

#[test]
fn a_body_cut_inside_a_character_counts_the_bytes_left_out_exactly() {
    let base = server();
    let mut gm = tools();
    let r = gm.call_ok("fetch", json!({ "url": format!("{base}/utf8cut") }));
    let total = 32 * 1024 + 1;
    assert_eq!(r["bodyBytes"], total);
    assert_eq!(r["body"].as_str().expect("body").len(), 32 * 1024 - 1, "the split character is left out whole");
    assert_eq!(r["bodyCut"], 2);
}

#[test]
fn fetch_is_not_read_only_since_it_can_post() {
    let mut gm = tools();
    let tools = gm.ok("tools/list", json!({}))["tools"].clone();
    let fetch = tools.as_array().expect("tools").iter().find(|t| t["name"] == "fetch").expect("fetch").clone();
    assert_eq!(fetch["annotations"]["readOnlyHint"], false);
}

#[test]
fn cancelling_a_fetch_from_a_body_ends_the_wait_at_once() {
    let base = server();
    let mut gm = Gm::start(&[]);
    gm.ready();
    let url = format!("{base}/hang");
    gm.send(&json!({ "jsonrpc": "2.0", "id": "f", "method": "tools/call",
        "params": { "name": "run_code", "arguments": { "code": format!("return await gm.fetch({{ url: '{url}' }});") } } }));
    std::thread::sleep(Duration::from_millis(300));
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "f" } }));
    let started = Instant::now();
    assert_eq!(gm.js("return 1"), 1);
    assert!(gm.recv(Duration::from_millis(200)).is_none(), "the cancelled call is not answered");
    let call = loop {
        if let Some(c) = gm.events_of("code-call").into_iter().find(|e| e["verb"] == "fetch") {
            break c;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "the fetch ended at the cancel");
    };
    assert_eq!(call["error"], "cancelled");
}

//! A small MCP server for gm's tests and benchmarks of child servers: it can be told to crash
//! before or after `initialize`, hang, print garbage, page its tool list, and it records the
//! notifications it receives (cancellations) to a file.
//!
//!   mcp-test-server [--crash-before-init] [--crash-before-init-times FILE N] [--hang]
//!                   [--crash-before-init-while FILE] [--hang-while FILE] [--slow-start MS]
//!                   [--garbage] [--pages] [--record FILE] [--name NAME] [--extra-tool NAME]...
//!                   [--ignore-eof] [--grandchild FILE] [--big]
//!
//! `--ignore-eof` keeps it running after its stdin ends (a server whose loop is stuck);
//! `--grandchild FILE` starts a `sleep` in its process group and writes that pid to FILE;
//! `--crash-before-init-while FILE` and `--hang-while FILE` crash or hang at a start while FILE
//! exists (a restart that fails, then works); `--slow-start MS` waits before reading anything.
//!
//! Tools: echo (returns its arguments), sleep ({ ms }), fail (an isError result), crash (exits
//! mid-call), env ({ name }: an environment variable), add_tool (adds `extra` and sends
//! notifications/tools/list_changed), pid, stall (answers, then stops reading its stdin for
//! { ms }, for ever without: its event loop blocked), read_file and reset (names other tests
//! need), and with `--big`, big ({ bytes }: a text block that long).

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

struct Options {
    crash_before_init: bool,
    hang: bool,
    garbage: bool,
    pages: bool,
    record: Option<String>,
    name: String,
    /// More tools named on the command line (`--extra-tool NAME`, repeatable), which echo.
    extra: Vec<String>,
    ignore_eof: bool,
    grandchild: Option<String>,
    slow_start: Option<u64>,
    /// List the tool `big` too (the others' count stays as tests know it without).
    big: bool,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let mut crash_before_init = args.iter().any(|a| a == "--crash-before-init");
    // Crash before initialize the first N times: the count of starts so far is kept in FILE.
    if let Some(i) = args.iter().position(|a| a == "--crash-before-init-times") {
        if let (Some(file), Some(n)) = (args.get(i + 1), args.get(i + 2).and_then(|n| n.parse::<u32>().ok())) {
            let started: u32 = std::fs::read_to_string(file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
            let _ = std::fs::write(file, (started + 1).to_string());
            crash_before_init |= started < n;
        }
    }
    let exists = |flag: &str| value(flag).is_some_and(|file| std::path::Path::new(&file).exists());
    crash_before_init |= exists("--crash-before-init-while");
    Options {
        crash_before_init,
        hang: args.iter().any(|a| a == "--hang") || exists("--hang-while"),
        garbage: args.iter().any(|a| a == "--garbage"),
        pages: args.iter().any(|a| a == "--pages"),
        record: value("--record"),
        name: value("--name").unwrap_or_else(|| "test".into()),
        extra: args.windows(2).filter(|w| w[0] == "--extra-tool").map(|w| w[1].clone()).collect(),
        ignore_eof: args.iter().any(|a| a == "--ignore-eof"),
        grandchild: value("--grandchild"),
        slow_start: value("--slow-start").and_then(|ms| ms.parse().ok()),
        big: args.iter().any(|a| a == "--big"),
    }
}

fn tool(name: &str, description: &str) -> Value {
    json!({ "name": name, "description": description, "inputSchema": { "type": "object", "properties": {} } })
}

fn main() {
    let opts = options();
    eprintln!("mcp-test-server {} starting", opts.name);
    if opts.crash_before_init {
        eprintln!("crashing before initialize, as asked");
        std::process::exit(3);
    }
    if let Some(ms) = opts.slow_start {
        std::thread::sleep(Duration::from_millis(ms));
    }
    if let Some(file) = &opts.grandchild {
        // Inherits this server's process group, as what a server starts usually does.
        if let Ok(child) = std::process::Command::new("sleep").arg("1000").spawn() {
            let _ = std::fs::write(file, child.id().to_string());
        }
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let send = {
        let out = out.clone();
        move |v: Value| {
            let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = writeln!(o, "{v}");
            let _ = o.flush();
        }
    };
    let mut tools = vec![
        tool("echo", "Returns its arguments."),
        tool("sleep", "Sleeps { ms } milliseconds, then answers."),
        tool("fail", "Answers with isError: true."),
        tool("crash", "Exits in the middle of the call."),
        tool("env", "The value of the environment variable { name }."),
        tool("add_tool", "Adds the tool `extra` and says the tools changed."),
        tool("read_file", "A tool with a native verb's name."),
        tool("reset", "A tool a config denies."),
        tool("pid", "This server's process id."),
        tool("stall", "Answers, then stops reading its stdin for { ms } (for ever without)."),
    ];
    if opts.big {
        tools.push(tool("big", "A text block of { bytes } bytes."));
    }
    tools.extend(opts.extra.iter().map(|n| tool(n, "Named on the command line; echoes.")));
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("").to_owned();
        let Some(id) = msg.get("id").cloned() else {
            if let Some(file) = &opts.record {
                if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
                    let _ = writeln!(f, "{line}");
                }
            }
            continue;
        };
        if opts.garbage {
            // Not JSON-RPC: gm must skip it and still read the reply after it.
            let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = writeln!(o, "this is not json {{{{");
            let _ = o.flush();
        }
        let reply = |result: Value| json!({ "jsonrpc": "2.0", "id": id, "result": result });
        match method.as_str() {
            "initialize" => {
                if opts.hang {
                    continue;
                }
                let asked = msg["params"]["protocolVersion"].clone();
                send(reply(json!({
                    "protocolVersion": asked,
                    "capabilities": { "tools": { "listChanged": true } },
                    "serverInfo": { "name": opts.name, "version": "1.0.0" },
                })));
            }
            "tools/list" => {
                if opts.pages {
                    let at: usize = msg["params"]["cursor"].as_str().and_then(|c| c.parse().ok()).unwrap_or(0);
                    let mut page = json!({ "tools": tools.get(at..at + 1).unwrap_or_default() });
                    if at + 1 < tools.len() {
                        page["nextCursor"] = json!((at + 1).to_string());
                    }
                    send(reply(page));
                } else {
                    send(reply(json!({ "tools": tools })));
                }
            }
            "tools/call" => {
                let args = msg["params"]["arguments"].clone();
                let text = |t: String| json!({ "content": [{ "type": "text", "text": t }] });
                let called = msg["params"]["name"].as_str().unwrap_or("");
                let called = if called == "extra" || opts.extra.iter().any(|e| e == called) { "echo" } else { called };
                match called {
                    "echo" | "read_file" | "reset" => {
                        let mut r = text(args.to_string());
                        r["structuredContent"] = json!({ "echo": args, "server": opts.name });
                        // What the caller put in `_meta` (a traceparent), for tests/otel.rs.
                        if let Some(meta) = msg["params"].get("_meta") {
                            r["structuredContent"]["meta"] = meta.clone();
                        }
                        send(reply(r));
                    }
                    "sleep" => {
                        let ms = args["ms"].as_u64().unwrap_or(1000);
                        let (send, r) = (send.clone(), reply(text(format!("slept {ms} ms"))));
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(ms));
                            send(r);
                        });
                    }
                    "pid" => {
                        let mut r = text(std::process::id().to_string());
                        r["structuredContent"] = json!({ "pid": std::process::id() });
                        send(reply(r));
                    }
                    "stall" => {
                        send(reply(text("stalling".into())));
                        // This loop is the only reader of stdin: nothing is read meanwhile.
                        let ms = args["ms"].as_u64().unwrap_or(u64::MAX / 4);
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    "big" => {
                        let bytes = args["bytes"].as_u64().unwrap_or(1 << 20) as usize;
                        send(reply(text("y".repeat(bytes))));
                    }
                    "fail" => {
                        let mut r = text("it failed, as asked".into());
                        r["isError"] = json!(true);
                        send(reply(r));
                    }
                    "crash" => {
                        eprintln!("crashing in the middle of a call, as asked");
                        std::process::exit(7);
                    }
                    "env" => {
                        let name = args["name"].as_str().unwrap_or("");
                        let mut r = text(std::env::var(name).unwrap_or_default());
                        r["structuredContent"] = json!({ "name": name, "value": std::env::var(name).ok() });
                        send(reply(r));
                    }
                    "add_tool" => {
                        if !tools.iter().any(|t| t["name"] == "extra") {
                            tools.push(tool("extra", "Added by add_tool."));
                        }
                        send(reply(text("added".into())));
                        send(json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" }));
                    }
                    other => send(
                        json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32602, "message": format!("no tool {other}") } }),
                    ),
                }
            }
            "ping" => send(reply(json!({}))),
            other => send(
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": format!("no method {other}") } }),
            ),
        }
    }
    if opts.ignore_eof {
        eprintln!("stdin ended; running on, as asked");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

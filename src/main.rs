//! The `gm` binary: `gm serve` and one subcommand per verb. Only glue lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use gm::run_state::DEFAULT_STEP_BUDGET;
use gm::serve::{self, ServeOptions, DEFAULT_MAX_INFLIGHT, DEFAULT_MAX_LINE_BYTES, DEFAULT_PAGE_SIZE};
use gm::server::surface::Surface;
use gm::verbs;
use serde_json::{json, Value};

// gm builds many small JSON values per call; mimalloc serves them faster than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn workspace_arg() -> Arg {
    Arg::new("workspace")
        .long("workspace")
        .short('w')
        .value_name("DIR")
        .value_parser(value_parser!(PathBuf))
        .help("The workspace directory (default: the current directory)")
}

fn cli() -> Command {
    let mut cmd = Command::new("gm")
        .version(env!("CARGO_PKG_VERSION"))
        .about("gm: the hands and memory of a long-horizon coding agent, as an MCP server")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("serve")
                .about("Serve MCP over stdio in the workspace")
                .arg(workspace_arg())
                .arg(
                    Arg::new("surface")
                        .long("surface")
                        .value_parser(value_parser!(Surface))
                        .default_value("code")
                        .help("code: next_context, run_code, finish; tools: every verb as its own tool"),
                )
                .arg(
                    Arg::new("max-inflight")
                        .long("max-inflight")
                        .value_parser(value_parser!(usize))
                        .help(format!("Calls that may run at once [default: {DEFAULT_MAX_INFLIGHT}]")),
                )
                .arg(
                    Arg::new("max-line-bytes")
                        .long("max-line-bytes")
                        .value_parser(value_parser!(usize))
                        .help(format!("Longest JSON-RPC message read; longer ones are dropped unread with an error [default: {DEFAULT_MAX_LINE_BYTES}]")),
                )
                .arg(
                    Arg::new("mcp-config")
                        .long("mcp-config")
                        .value_name("FILE")
                        .value_parser(value_parser!(PathBuf))
                        .help("A config of child MCP servers (the mcpServers shape of .mcp.json), read after defaults/mcp.json and .gm/mcp.json"),
                )
                .arg(
                    Arg::new("step-budget")
                        .long("step-budget")
                        .value_parser(value_parser!(u64).range(1..))
                        .help(format!("Steps a run may take unless its task sets another budget [default: {DEFAULT_STEP_BUDGET}]")),
                )
                .arg(
                    Arg::new("max-result-bytes")
                        .long("max-result-bytes")
                        .value_name("N")
                        .value_parser(value_parser!(u64).range(gm::budget::MIN_RESULT_BYTES as u64..))
                        .help(format!("Bytes of content a tool result may carry; a bigger one is cut as valid JSON, largest parts first, and kept whole in .gm/out/ [default: ${} or {}]", gm::budget::MAX_RESULT_BYTES_ENV, gm::budget::DEFAULT_MAX_RESULT_BYTES)),
                )
                .arg(
                    Arg::new("max-result-bytes-ceiling")
                        .long("max-result-bytes-ceiling")
                        .value_name("N")
                        .value_parser(value_parser!(u64).range(gm::budget::MIN_RESULT_BYTES as u64..))
                        .help(format!("The most a run_code call may ask for with maxResultBytes [default: ${} or {}]", gm::budget::CEILING_ENV, gm::budget::DEFAULT_CEILING)),
                )
                .arg(
                    Arg::new("no-relay")
                        .long("no-relay")
                        .action(ArgAction::SetTrue)
                        .help("Serve in this process, without the relay that restarts a worker that dies (for debugging and benchmarks)"),
                )
                .arg(
                    // How a relay starts the workspace's worker, with the deaths of the last minute.
                    Arg::new("worker")
                        .long("worker")
                        .value_parser(value_parser!(u32))
                        .hide(true),
                )
                .arg(
                    Arg::new("http")
                        .long("http")
                        .value_name("ADDR")
                        .num_args(0..=1)
                        .default_missing_value("127.0.0.1:0")
                        .conflicts_with("no-relay")
                        .help("Serve Streamable HTTP at http://ADDR/mcp instead of stdio [ADDR default: 127.0.0.1:0, a free port]; loopback only unless --http-allow-remote"),
                )
                .arg(
                    Arg::new("http-allow-remote")
                        .long("http-allow-remote")
                        .action(ArgAction::SetTrue)
                        .help("Let --http listen on an address other machines can reach (the token guards it)"),
                )
                .arg(
                    Arg::new("http-token")
                        .long("http-token")
                        .value_name("none")
                        .value_parser(["none"])
                        .help("`none`: no bearer token for --http (loopback only), for clients that cannot send one"),
                )
                .arg(
                    Arg::new("page-size")
                        .long("page-size")
                        .value_parser(value_parser!(usize))
                        .help(format!("Items per page of tools/list, resources/list and skills/list [default: {DEFAULT_PAGE_SIZE}]")),
                )
                .arg(
                    Arg::new("sandbox")
                        .long("sandbox")
                        .value_name("MODE")
                        .value_parser(["off", "workspace-write", "read-only"])
                        .help("The box shells, jobs and the workspace's child servers run in, enforced by the kernel: off, workspace-write (write the workspace less .gm/ and .git/, the temporary folder, --sandbox-allow-write), read-only [default: ~/.gmnew/config.json's, else off]"),
                )
                .arg(
                    Arg::new("sandbox-allow-write")
                        .long("sandbox-allow-write")
                        .value_name("DIR")
                        .action(ArgAction::Append)
                        .value_parser(value_parser!(PathBuf))
                        .help("One more folder a confined process may write (repeatable; relative to the workspace)"),
                )
                .arg(
                    Arg::new("sandbox-network")
                        .long("sandbox-network")
                        .value_name("on|off")
                        .value_parser(["on", "off"])
                        .help("off: a confined process has no network at all, loopback included [default: on]"),
                ),
        );
    cmd = cmd.subcommand(
        Command::new("bench")
            .about("Replay the tool calls of a recorded run log against a fresh gm serve in a scratch copy of the workspace")
            .arg(Arg::new("log").value_name("LOG").required(true).value_parser(value_parser!(PathBuf)).help("A run log (.gm/log.jsonl)"))
            .arg(workspace_arg().help("The workspace as it was when the recording started (default: the log's workspace)"))
            .arg(Arg::new("surface").long("surface").help("code or tools (default: the surface the log was recorded on)"))
            .arg(Arg::new("max-inflight").long("max-inflight").value_parser(value_parser!(usize)).help("The server's --max-inflight [default: 8]"))
            .arg(Arg::new("concurrency").long("concurrency").value_parser(value_parser!(usize)).help("Independent calls sent at once [default: 1]"))
            .arg(Arg::new("repeat").long("repeat").value_parser(value_parser!(usize)).help("Replay the whole log this many times [default: 1]"))
            .arg(Arg::new("keep").long("keep").value_parser(value_parser!(PathBuf)).help("Replay into this new directory and keep it"))
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the report as JSON")),
    );
    cmd = cmd.subcommand(
        Command::new("otel-export")
            .about("Send a recorded run log to the OpenTelemetry collector the OTEL_* variables (or ~/.gmnew/config.json) name, as the spans gm exports live")
            .arg(workspace_arg())
            .arg(Arg::new("log").long("log").value_parser(value_parser!(PathBuf)).help("The log to send [default: <workspace>/.gm/log.jsonl]"))
            .arg(Arg::new("since").long("since").value_parser(value_parser!(u64)).help("Only events from this seq on")),
    );
    cmd = cmd.subcommand(
        Command::new("status")
            .about("Show the workspace's worker: its build, sessions, jobs, background bodies and child servers")
            .arg(workspace_arg())
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the status as JSON"))
            .arg(
                Arg::new("open")
                    .long("open")
                    .action(ArgAction::SetTrue)
                    .help("Print a one-time link to the status page of the workspace's `gm serve --http`"),
            ),
    );
    cmd = cmd.subcommand(
        Command::new("docs").about("Print a reference table of gm as markdown, from the code itself").arg(
            Arg::new("table")
                .value_name("TABLE")
                .required(true)
                .value_parser(clap::builder::PossibleValuesParser::new(gm::docs::TABLES))
                .help("Which table"),
        ),
    );
    cmd = cmd.subcommand(
        Command::new("install")
            .about("Register gm with Claude Code: set mcpServers.gm in ~/.claude.json, keeping everything else")
            .arg(file_arg("config", "The config file to write (default: ~/.claude.json)"))
            .arg(file_arg("mcp-config", "A child-server config, passed to the registered `gm serve` as --mcp-config"))
            .arg(
                Arg::new("local")
                    .long("local")
                    .value_name("DIR")
                    .value_parser(value_parser!(PathBuf))
                    .help("Install the build in DIR (an unpacked release archive, or target/release) into ~/.gmnew and register ~/.gmnew/current/gm"),
            ),
    );
    cmd = cmd.subcommand(
        Command::new("uninstall")
            .about("Remove mcpServers.gm from ~/.claude.json, and nothing else")
            .arg(file_arg("config", "The config file to write (default: ~/.claude.json)")),
    );
    cmd = cmd.subcommand(
        Command::new("trust")
            .about("Approve the servers the workspace's .gm/mcp.json names: each is shown in full and asked about (y/N) on a terminal")
            .arg(workspace_arg())
            .arg(Arg::new("yes").long("yes").action(ArgAction::SetTrue).help("Approve every waiting server without asking"))
            .arg(
                Arg::new("list")
                    .long("list")
                    .action(ArgAction::SetTrue)
                    .conflicts_with_all(["yes", "revoke"])
                    .help("List this workspace's approvals"),
            )
            .arg(
                Arg::new("revoke")
                    .long("revoke")
                    .value_name("NAME")
                    .num_args(0..=1)
                    .conflicts_with("yes")
                    .help("Remove the approval of server NAME, or every approval of this workspace"),
            ),
    );
    cmd = cmd.subcommand(
        Command::new("dist")
            .about("Package this build as a release archive, with its debug info beside it and manifest.json")
            .arg(
                Arg::new("out")
                    .long("out")
                    .value_name("DIR")
                    .value_parser(value_parser!(PathBuf))
                    .default_value(gm::dist::DEFAULT_OUT)
                    .help("Where the archive, the debug info and manifest.json go"),
            )
            .arg(file_arg(
                "sign",
                "Sign the archive with this minisign secret key (an encrypted one takes its password from $GMNEW_SIGN_PASSWORD): <archive>.minisig and the manifest entry's signature",
            )),
    );
    for v in verbs::registry() {
        cmd = cmd.subcommand(
            Command::new(v.name)
                .about(v.description)
                .arg(
                    Arg::new("args")
                        .value_name("JSON")
                        .default_value("{}")
                        .help("The verb's arguments as a JSON object"),
                )
                .arg(workspace_arg())
                .arg(
                    Arg::new("schema")
                        .long("schema")
                        .action(ArgAction::SetTrue)
                        .help("Print the argument schema and exit"),
                ),
        );
    }
    cmd
}

fn file_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name).long(name).value_name("FILE").value_parser(value_parser!(PathBuf)).help(help)
}

fn workspace_of(m: &ArgMatches) -> PathBuf {
    m.get_one::<PathBuf>("workspace").cloned().unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> ExitCode {
    // `gm __sandbox POLICY -- PROGRAM ARGS...`: a job's command confined (execs the program);
    // before anything else, so the helper does nothing gm's CLI would.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == gm_actors::sandbox::HELPER) {
        let code = gm_actors::sandbox::run_helper(&argv[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let matches = cli().get_matches();
    let Some((name, sub)) = matches.subcommand() else { return ExitCode::from(2) };
    if name == "serve" {
        let worker = sub.get_one::<u32>("worker").copied();
        let sandbox_flags = gm::sandbox_config::SandboxFlags {
            mode: sub.get_one::<String>("sandbox").and_then(|m| gm_actors::sandbox::Mode::parse(m)),
            allow_write: sub.get_many::<PathBuf>("sandbox-allow-write").into_iter().flatten().cloned().collect(),
            network: sub.get_one::<String>("sandbox-network").map(|n| n == "on"),
        };
        // The user's choice only: the flags, then ~/.gmnew/config.json; never the workspace.
        let sandbox = match gm::sandbox_config::resolve(&sandbox_flags, gm::sandbox_config::home_config().as_deref()) {
            Ok(s) => s,
            Err(e) => {
                gm_actors::stderr_line!("gm: {e}");
                return ExitCode::FAILURE;
            }
        };
        let flag = |id: &str| sub.get_one::<u64>(id).map(|&n| usize::try_from(n).unwrap_or(usize::MAX));
        let budget = match gm::budget::Limits::from_env(flag("max-result-bytes"), flag("max-result-bytes-ceiling")) {
            Ok(b) => b,
            Err(e) => {
                gm_actors::stderr_line!("gm: {e}");
                return ExitCode::from(2);
            }
        };
        // Every worker reads the budget, however it is started: the relay passes its own
        // arguments on, but a worker the HTTP front starts gets only the settings the front
        // names, and the environment. Set here, before any thread exists.
        std::env::set_var(gm::budget::MAX_RESULT_BYTES_ENV, budget.max_result_bytes.to_string());
        std::env::set_var(gm::budget::CEILING_ENV, budget.ceiling.to_string());
        let relay_options = || gm::relay::RelayOptions {
            serve_args: std::env::args_os().skip(2).collect(),
            workspace: workspace_of(sub),
            surface: sub.get_one::<Surface>("surface").copied().unwrap_or(Surface::Code),
            max_line_bytes: sub.get_one::<usize>("max-line-bytes").copied().unwrap_or(DEFAULT_MAX_LINE_BYTES),
            page_size: sub.get_one::<usize>("page-size").copied().unwrap_or(DEFAULT_PAGE_SIZE),
            step_budget: sub.get_one::<u64>("step-budget").copied().unwrap_or(DEFAULT_STEP_BUDGET),
            max_inflight: sub.get_one::<usize>("max-inflight").copied().unwrap_or(DEFAULT_MAX_INFLIGHT),
            mcp_config: sub.get_one::<PathBuf>("mcp-config").cloned(),
            sandbox: sandbox.clone(),
            budget,
        };
        if let (None, Some(addr)) = (worker, sub.get_one::<String>("http")) {
            let code = gm::http::run(gm::http::HttpOptions {
                addr: addr.clone(),
                allow_remote: sub.get_flag("http-allow-remote"),
                no_token: sub.get_one::<String>("http-token").is_some_and(|t| t == "none"),
                session: relay_options(),
            });
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        if worker.is_none() && !sub.get_flag("no-relay") {
            let code = gm::relay::run(relay_options());
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        let opts = ServeOptions {
            mode: match worker {
                Some(restarts) => serve::Mode::Worker { restarts },
                None => serve::Mode::Stdio,
            },
            workspace: workspace_of(sub),
            surface: sub.get_one::<Surface>("surface").copied().unwrap_or(Surface::Code),
            max_inflight: sub.get_one::<usize>("max-inflight").copied().unwrap_or(DEFAULT_MAX_INFLIGHT),
            max_line_bytes: sub.get_one::<usize>("max-line-bytes").copied().unwrap_or(DEFAULT_MAX_LINE_BYTES),
            page_size: sub.get_one::<usize>("page-size").copied().unwrap_or(DEFAULT_PAGE_SIZE),
            step_budget: sub.get_one::<u64>("step-budget").copied().unwrap_or(DEFAULT_STEP_BUDGET),
            mcp_config: sub.get_one::<PathBuf>("mcp-config").cloned(),
            sandbox,
            budget,
        };
        return match serve::serve(opts) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                gm_actors::stderr_line!("gm: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if name == "bench" {
        return bench(sub);
    }
    if name == "status" && sub.get_flag("open") {
        return match gm::http::open_link(&workspace_of(sub)) {
            Ok(Some(link)) => {
                println!("{link}");
                ExitCode::SUCCESS
            }
            Ok(None) => {
                gm_actors::stderr_line!("gm status --open: no `gm serve --http` runs in this workspace");
                ExitCode::from(3)
            }
            Err(e) => {
                gm_actors::stderr_line!("gm status --open: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if name == "status" {
        return status(&workspace_of(sub), sub.get_flag("json"));
    }
    if name == "otel-export" {
        let log = sub.get_one::<PathBuf>("log").cloned().unwrap_or_else(|| workspace_of(sub).join(".gm/log.jsonl"));
        let since = sub.get_one::<u64>("since").copied();
        let home = gm::sandbox_config::home_config();
        return report(name, gm::telemetry::replay::export_log(&log, since, home.as_deref()));
    }
    let path = |id: &str| sub.get_one::<PathBuf>(id).cloned();
    if name == "install" {
        let opts = gm::install::InstallOptions {
            config: path("config"),
            mcp_config: path("mcp-config"),
            local: path("local"),
        };
        return report(name, gm::install::install(&opts));
    }
    if name == "uninstall" {
        return report(name, gm::install::uninstall(path("config").as_deref()));
    }
    if name == "trust" {
        return trust(sub);
    }
    if name == "dist" {
        let out = path("out").unwrap_or_else(|| PathBuf::from(gm::dist::DEFAULT_OUT));
        return report(name, gm::dist::dist(&out, path("sign").as_deref()));
    }
    if name == "docs" {
        let table = sub.get_one::<String>("table").and_then(|t| gm::docs::table(t));
        return match table {
            Some(t) => {
                print!("{t}");
                ExitCode::SUCCESS
            }
            None => ExitCode::from(2),
        };
    }
    let Some(verb) = verbs::find(name) else { return ExitCode::from(2) };
    if sub.get_flag("schema") {
        println!("{}", serde_json::to_string_pretty(&(verb.schema)()).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let text = sub.get_one::<String>("args").map(String::as_str).unwrap_or("{}");
    let args: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let err = json!({ "error": { "code": "invalid_args", "message": format!("arguments are not JSON: {e}") } });
            println!("{}", serde_json::to_string_pretty(&err).unwrap_or_default());
            return ExitCode::from(2);
        }
    };
    match serve::run_verb(&workspace_of(sub), name, args) {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}", serde_json::to_string_pretty(&json!({ "error": e })).unwrap_or_default());
            ExitCode::FAILURE
        }
    }
}

/// A command's report as JSON on stdout, or its error on stderr.
fn report<T: serde::Serialize, E: std::fmt::Display>(command: &str, result: Result<T, E>) -> ExitCode {
    match result {
        Ok(r) => {
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            gm_actors::stderr_line!("gm {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `gm status`: exit 0 with the worker's status, 3 when no worker serves the workspace (as
/// `systemctl status` says "not running"), 1 on an error.
fn status(workspace: &std::path::Path, json_out: bool) -> ExitCode {
    match gm::worker::status::query(workspace) {
        Ok(status) => {
            let http = gm::http::front_info(workspace);
            if json_out {
                let v = json!({ "workspace": workspace, "running": status.is_some(), "status": status, "http": http });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", gm::worker::status::render(workspace, status.as_ref()));
                if let Some(h) = http {
                    println!(
                        "http    {}  pid {}  (status page: gm status --open)",
                        h["url"].as_str().unwrap_or("?"),
                        h["pid"]
                    );
                }
            }
            if status.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }
        Err(e) => {
            gm_actors::stderr_line!("gm status: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `gm trust`: answers come from stdin only when it is a terminal.
fn trust(m: &ArgMatches) -> ExitCode {
    use gm::trust::cli::{self, Action};
    use std::io::IsTerminal;
    let action = if m.get_flag("list") {
        Action::List
    } else if m.contains_id("revoke") {
        Action::Revoke(m.get_one::<String>("revoke").cloned())
    } else {
        Action::Approve { yes: m.get_flag("yes") }
    };
    let store = match gm::trust::TrustStore::from_home() {
        Ok(store) => store,
        Err(e) => {
            gm_actors::stderr_line!("gm trust: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    let mut out = std::io::stdout();
    match cli::run(&workspace_of(m), &action, &store, &mut stdin.lock(), terminal, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            gm_actors::stderr_line!("gm trust: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(m: &ArgMatches) -> ExitCode {
    let json_out = m.get_flag("json");
    let opts = gm::bench::BenchOptions {
        log: m.get_one::<PathBuf>("log").cloned().unwrap_or_default(),
        workspace: m.get_one::<PathBuf>("workspace").cloned(),
        surface: m.get_one::<String>("surface").cloned(),
        max_inflight: m.get_one::<usize>("max-inflight").copied().unwrap_or(DEFAULT_MAX_INFLIGHT),
        concurrency: m.get_one::<usize>("concurrency").copied().unwrap_or(1),
        repeat: m.get_one::<usize>("repeat").copied().unwrap_or(1),
        keep: m.get_one::<PathBuf>("keep").cloned(),
        progress: !json_out,
    };
    match gm::bench::run(&opts) {
        Ok(report) => {
            if json_out {
                println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            } else {
                println!("{}", gm::bench::table(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            gm_actors::stderr_line!("gm bench: {e}");
            ExitCode::FAILURE
        }
    }
}

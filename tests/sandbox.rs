//! Confinement on this machine's kernel (Landlock, user namespaces), through the real binary,
//! each rule through a run_code body: what a shell, a job and a workspace's child server may
//! write, the network, gm's own file verbs in the box, and that nothing in the workspace can
//! widen it. Workspaces live under the build's temporary folder, not /tmp, so that "the
//! workspace's parent" is not the (writable) temporary folder; each gm gets a TMPDIR and a HOME
//! of its own.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{git, Gm};
use serde_json::{json, Value};

fn test_server() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-test-server")
}

/// A git workspace, a HOME and a TMPDIR of its own, side by side in one folder.
struct Boxed {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
}

impl Boxed {
    fn new() -> Boxed {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (ws, home, tmp) = (root.join("ws"), root.join("home"), root.join("tmp"));
        for d in [&ws, &home, &tmp] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        git(&ws, &["init", "-q"]);
        git(&ws, &["config", "user.email", "t@example.com"]);
        git(&ws, &["config", "user.name", "t"]);
        std::fs::write(ws.join("README.md"), "hello\n").expect("write");
        git(&ws, &["add", "README.md"]);
        git(&ws, &["commit", "-q", "-m", "init"]);
        Boxed { _dir: dir, root, ws, home, tmp }
    }

    fn serve(&self, args: &[&str]) -> Gm {
        self.serve_env(args, &[])
    }

    fn serve_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Gm {
        let mut env = vec![("HOME", self.home.to_str().expect("utf-8")), ("TMPDIR", self.tmp.to_str().expect("utf-8"))];
        env.extend_from_slice(extra);
        let mut gm = Gm::start_in(&self.ws, args, &env);
        gm.ready();
        gm
    }
}

/// Runs `command` in a shell from a run_code body; its exit code.
fn shell(gm: &mut Gm, command: &str) -> i64 {
    let r = gm.js(&format!("return (await gm.run_shell({{ command: {} }})).exitCode", json!(command)));
    r.as_i64().unwrap_or_else(|| panic!("an exit code: {r}"))
}

#[test]
fn workspace_write_lets_a_shell_write_the_workspace_and_its_temporary_folder_and_nothing_else() {
    let b = Boxed::new();
    // A sandbox setting in the workspace itself is never read.
    std::fs::create_dir_all(b.ws.join(".gm")).expect(".gm");
    std::fs::write(b.ws.join(".gm/config.json"), r#"{"sandbox":{"mode":"off"}}"#).expect("write");
    let git_config = std::fs::read(b.ws.join(".git/config")).expect("config");
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    assert_eq!(shell(&mut gm, "touch in-workspace"), 0);
    assert_eq!(shell(&mut gm, "touch \"$TMPDIR/in-tmp\""), 0);
    for refused in [
        "touch ../in-parent",
        "touch \"$HOME/in-home\"",
        "touch .gm/in-gm",
        "echo x >> .gm/log.jsonl",
        "touch .git/hooks/pre-commit",
        "git config core.hooksPath /tmp/evil",
        "rm -rf .gm",
        "umount .gm",
    ] {
        assert_ne!(shell(&mut gm, refused), 0, "{refused} went through");
    }
    assert!(b.ws.join("in-workspace").exists() && b.tmp.join("in-tmp").exists());
    // A failed confined shell names its box next to the error; a shell that worked does not.
    let failed = gm.js("return await gm.run_shell({ command: 'touch \"$HOME/again\"' })");
    assert_eq!(failed["sandbox"]["mode"], "workspace-write", "{failed}");
    let writable = failed["sandbox"]["writable"].as_array().expect("writable").clone();
    assert!(writable.iter().any(|w| w.as_str() == b.ws.to_str()), "{failed}");
    assert!(failed["stderr"].as_str().is_some_and(|e| e.contains("Permission denied")), "{failed}");
    let worked = gm.js("return await gm.run_shell({ command: 'true' })");
    assert!(worked.get("sandbox").is_none(), "{worked}");
    for absent in
        [b.root.join("in-parent"), b.home.join("in-home"), b.ws.join(".gm/in-gm"), b.ws.join(".git/hooks/pre-commit")]
    {
        assert!(!absent.exists(), "{} was written", absent.display());
    }
    assert_eq!(std::fs::read(b.ws.join(".git/config")).expect("config"), git_config, ".git/config unchanged");
    // The log is still valid JSON lines, and gm's own writes (the log) go on.
    common::read_log(&b.ws.join(".gm/log.jsonl"));
    let start = gm.events_of("start").pop().expect("start event");
    assert_eq!(start["sandbox"]["mode"], "workspace-write", "{start}");
    let first = gm.call_ok("next_context", json!({}));
    assert_eq!(first["sandbox"]["mode"], "workspace-write", "the agent sees its box: {first}");
    let status = common::gm_command().args(["status"]).current_dir(&b.ws).output().expect("gm status");
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("sandbox workspace-write") && status.contains("network on"), "{status}");
    common::shut_down(gm);
}

#[test]
fn gm_trust_run_from_a_confined_shell_approves_nothing() {
    let b = Boxed::new();
    std::fs::create_dir_all(b.ws.join(".gm")).expect(".gm");
    let servers = json!({ "mcpServers": { "x": { "command": test_server(), "args": ["--name", "x"] } } });
    std::fs::write(b.ws.join(".gm/mcp.json"), servers.to_string()).expect("mcp.json");
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    let gm_bin = common::gm_bin();
    assert_ne!(shell(&mut gm, &format!("{gm_bin} trust --yes --workspace .")), 0);
    assert!(!b.home.join(".gmnew/trust.json").exists(), "an approval was written from inside the box");
    common::shut_down(gm);
}

#[test]
fn gms_own_file_verbs_obey_the_box_and_its_git_verbs_still_commit() {
    let b = Boxed::new();
    std::fs::write(b.home.join("profile"), "the user's\n").expect("profile");
    std::os::unix::fs::symlink(b.home.join("profile"), b.ws.join("notes.md")).expect("link");
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    let home_file = b.home.join("x").display().to_string();
    for (verb, args) in [
        ("write_file", json!({ "path": home_file, "content": "x" })),
        ("write_file", json!({ "path": "notes.md", "content": "through a link" })),
        ("write_file", json!({ "path": ".gm/planted", "content": "x" })),
        ("edit_file", json!({ "path": "notes.md", "old": "the user's", "new": "the agent's" })),
    ] {
        let err = gm.call_err("run_code", json!({ "code": format!("return await gm.{verb}({args})") }));
        assert_eq!(err["details"]["code"], "refused", "{verb} {args}: {err}");
        assert!(err["message"].as_str().is_some_and(|m| m.contains("--sandbox workspace-write")), "{err}");
    }
    assert!(!b.home.join("x").exists());
    assert_eq!(std::fs::read_to_string(b.home.join("profile")).expect("profile"), "the user's\n");
    let r = gm.js("await gm.write_file({ path: 'src/a.txt', content: 'a' });
         await gm.edit_file({ path: 'README.md', old: 'hello', new: 'hi' });
         await gm.git_add({ paths: ['src/a.txt', 'README.md'] });
         return await gm.git_commit({ message: 'from the box' });");
    assert!(r.to_string().contains("from the box") || r["sha"].is_string(), "{r}");
    assert_eq!(git(&b.ws, &["log", "-1", "--format=%s"]), "from the box");
    common::shut_down(gm);
}

#[test]
fn a_background_jobs_grandchild_is_confined_while_its_log_and_exit_code_are_kept() {
    let b = Boxed::new();
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    let command = format!("sh -c 'sh -c \"touch {}/grandchild\"; echo tried'; touch in-job", b.home.display());
    let r = gm.js(&format!(
        "await gm.job_start({{ name: 'deep', command: {} }});
         for (let i = 0; i < 200; i++) {{
           const s = await gm.job_status({{ name: 'deep', wait: 100 }});
           if (s.state !== 'running') return s;
         }}
         return 'still running';",
        json!(command)
    ));
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["exitCode"], 0, "the last command (inside the workspace) succeeded: {r}");
    assert!(r["tail"].as_str().is_some_and(|t| t.contains("tried")), "the job's output is in its log: {r}");
    assert!(!b.home.join("grandchild").exists(), "a grandchild wrote outside the box");
    assert!(b.ws.join("in-job").exists(), "the job may write the workspace");
    common::shut_down(gm);
}

#[test]
fn a_workspace_server_is_confined_whatever_its_entry_says_while_the_users_own_is_not() {
    let b = Boxed::new();
    let (ws_marker, own_marker, asked_marker) =
        (b.home.join("ws-marker"), b.home.join("own-marker"), b.home.join("asked-marker"));
    let starts = |marker: &Path, name: &str| json!({ "command": "sh", "args": ["-c", format!("touch {} ; exec {} --name {name}", marker.display(), test_server())] });
    std::fs::create_dir_all(b.ws.join(".gm")).expect(".gm");
    let mut entry = starts(&ws_marker, "repo");
    entry["sandbox"] = json!(false);
    std::fs::write(b.ws.join(".gm/mcp.json"), json!({ "mcpServers": { "repo": entry } }).to_string()).expect("write");
    let defaults = b.root.join("defaults");
    std::fs::create_dir_all(&defaults).expect("mkdir");
    let mut asked = starts(&asked_marker, "asked");
    asked["sandbox"] = json!(true);
    let own_servers = json!({ "mcpServers": { "own": starts(&own_marker, "own"), "asked": asked } });
    std::fs::write(defaults.join("mcp.json"), own_servers.to_string()).expect("write");
    let trust = common::gm_command()
        .args(["trust", "--yes"])
        .current_dir(&b.ws)
        .env("HOME", &b.home)
        .env("GM_DEFAULTS_DIR", &defaults)
        .stdin(Stdio::null())
        .output()
        .expect("gm trust");
    assert!(trust.status.success(), "{}", String::from_utf8_lossy(&trust.stderr));
    let mut gm =
        b.serve_env(&["--sandbox", "workspace-write"], &[("GM_DEFAULTS_DIR", defaults.to_str().expect("utf-8"))]);
    let r = gm.js("return [await gm.repo_echo({ x: 1 }), await gm.own_echo({ x: 2 }), await gm.asked_echo({ x: 3 })]");
    assert!(r.to_string().contains('1') && r.to_string().contains('3'), "every server answers: {r}");
    assert!(!asked_marker.exists(), "a server of the user's own layer that asked for the box is confined");
    assert!(!ws_marker.exists(), "the workspace's server wrote outside the box");
    assert!(own_marker.exists(), "the user's own server (no \"sandbox\": true) is not confined");
    common::shut_down(gm);
}

/// A TCP and a UDP listener on loopback; whether the shell reached either.
fn reaches_loopback(gm: &mut Gm) -> (bool, bool) {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_read_timeout(Some(std::time::Duration::from_millis(500))).expect("timeout");
    tcp.set_nonblocking(true).expect("nonblocking");
    let (tp, up) = (tcp.local_addr().expect("addr").port(), udp.local_addr().expect("addr").port());
    shell(gm, &format!("exec 3<>/dev/tcp/127.0.0.1/{tp} && echo hi >&3; echo hi > /dev/udp/127.0.0.1/{up}; true"));
    let tcp_reached = tcp.accept().is_ok();
    let mut buf = [0u8; 16];
    let udp_reached = udp.recv(&mut buf).is_ok();
    (tcp_reached, udp_reached)
}

#[test]
fn with_the_network_off_a_confined_shell_reaches_no_loopback_listener_tcp_or_udp() {
    let b = Boxed::new();
    let mut gm = b.serve(&["--sandbox", "workspace-write", "--sandbox-network", "off"]);
    assert_eq!(reaches_loopback(&mut gm), (false, false));
    common::shut_down(gm);
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    assert_eq!(reaches_loopback(&mut gm), (true, true), "with the network on, both go through");
    common::shut_down(gm);
}

#[test]
fn sandbox_off_lets_everything_through() {
    let b = Boxed::new();
    let mut gm = b.serve(&["--sandbox", "off"]);
    assert_eq!(shell(&mut gm, "touch \"$HOME/in-home\" && touch .gm/in-gm"), 0);
    assert!(b.home.join("in-home").exists());
    let home_file = b.home.join("x").display().to_string();
    gm.js(&format!("return await gm.write_file({{ path: {}, content: 'x' }})", json!(home_file)));
    assert_eq!(reaches_loopback(&mut gm), (true, true));
    let failed = gm.js("return await gm.run_shell({ command: 'exit 3' })");
    assert!(failed.get("sandbox").is_none(), "no box to name: {failed}");
    common::shut_down(gm);
}

#[test]
fn read_only_leaves_a_shell_only_its_private_temporary_folder_and_the_home_config_can_choose_it() {
    let b = Boxed::new();
    std::fs::create_dir_all(b.home.join(".gmnew")).expect("mkdir");
    std::fs::write(b.home.join(".gmnew/config.json"), r#"{"sandbox":{"mode":"read-only"}}"#).expect("write");
    let mut gm = b.serve(&[]);
    assert_ne!(shell(&mut gm, "touch in-workspace"), 0);
    assert!(!b.ws.join("in-workspace").exists());
    let r = gm.js("return (await gm.run_shell({ command: 'touch \"$TMPDIR/mine\" && echo \"$TMPDIR\"' }))");
    assert_eq!(r["exitCode"], 0, "{r}");
    let private: PathBuf = r["stdout"].as_str().expect("stdout").trim().into();
    assert_ne!(private, b.tmp, "a folder of its own, not the shared temporary folder");
    assert!(!private.exists(), "removed once the shell ended");
    let status = gm.call_ok("next_context", json!({}));
    assert_eq!(status["sandbox"]["mode"], "read-only", "{status}");
    common::shut_down(gm);
}

#[test]
fn a_second_session_asking_another_box_is_told_it_is_not_in_force() {
    let b = Boxed::new();
    let first = b.serve(&["--sandbox", "workspace-write"]);
    let mut second = b.serve(&["--sandbox", "off"]);
    let opened = second.events_of("session").pop().expect("session");
    let options: Vec<Value> = opened["notInForce"].as_array().cloned().unwrap_or_default();
    assert!(options.iter().any(|o| o["option"] == "--sandbox"), "{opened}");
    // The box is the workspace's: the second session's shells are confined too.
    assert_ne!(shell(&mut second, "touch \"$HOME/x\""), 0);
    common::shut_down(second);
    common::shut_down(first);
}

#[test]
fn a_git_directory_made_after_the_start_is_protected_before_the_next_shell() {
    let b = Boxed::new();
    std::fs::remove_dir_all(b.ws.join(".git")).expect("no repository yet");
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    assert_eq!(shell(&mut gm, "touch before-git"), 0);
    git(&b.ws, &["init", "-q"]);
    assert_ne!(shell(&mut gm, "touch .git/hooks/post-checkout"), 0, "the new .git was writable");
    assert!(!b.ws.join(".git/hooks/post-checkout").exists());
    assert_eq!(shell(&mut gm, "touch after-git"), 0);
    common::shut_down(gm);
}

#[test]
fn many_confined_shells_and_jobs_at_once_all_run_in_the_box() {
    // Repetition: shells (which run alone) and jobs (which do not) started together, each
    // joining the keeper's namespaces; every one confined, none failing to start.
    let b = Boxed::new();
    let mut gm = b.serve(&["--sandbox", "workspace-write"]);
    let home = b.home.display().to_string();
    let r = gm.js(&format!(
        "const shells = [];
         for (let i = 0; i < 30; i++) shells.push(gm.run_shell({{ command: `touch in-ws-${{i}}; touch {home}/out-${{i}}` }}));
         const jobs = [];
         for (let i = 0; i < 10; i++) jobs.push(gm.job_start({{ name: `j${{i}}`, command: `touch {home}/job-${{i}}; touch job-ws-${{i}}` }}));
         const ran = await Promise.all(shells);
         await Promise.all(jobs);
         for (let i = 0; i < 10; i++) {{
           for (let k = 0; k < 100; k++) {{
             const s = await gm.job_status({{ name: `j${{i}}`, wait: 100 }});
             if (s.state !== 'running') break;
           }}
         }}
         return ran.map(s => s.exitCode);"
    ));
    assert_eq!(r.as_array().map(Vec::len), Some(30), "{r}");
    assert!(r.as_array().into_iter().flatten().all(|c| c != 0), "each shell's write to HOME failed: {r}");
    for i in 0..30 {
        assert!(b.ws.join(format!("in-ws-{i}")).exists(), "shell {i} did not run");
        assert!(!b.home.join(format!("out-{i}")).exists(), "shell {i} wrote outside the box");
    }
    for i in 0..10 {
        assert!(b.ws.join(format!("job-ws-{i}")).exists(), "job {i} did not run");
        assert!(!b.home.join(format!("job-{i}")).exists(), "job {i} wrote outside the box");
    }
    common::shut_down(gm);
}

#[test]
fn a_bad_sandbox_setting_in_the_users_config_stops_gm_naming_the_file_and_a_bad_flag_is_refused() {
    let b = Boxed::new();
    std::fs::create_dir_all(b.home.join(".gmnew")).expect("mkdir");
    let config = b.home.join(".gmnew/config.json");
    std::fs::write(&config, r#"{"sandbox":{"mode":"danger-full-access"}}"#).expect("write");
    let out = common::gm_command()
        .args(["serve"])
        .current_dir(&b.ws)
        .env("HOME", &b.home)
        .stdin(Stdio::null())
        .output()
        .expect("gm serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("config.json") && stderr.contains("danger-full-access"), "{stderr}");
    assert!(!b.ws.join(".gm/log.jsonl").exists(), "nothing started");
    let out = common::gm_command()
        .args(["serve", "--sandbox", "everything"])
        .current_dir(&b.ws)
        .stdin(Stdio::null())
        .output()
        .expect("gm serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("workspace-write"), "the choices are named");
    // The helper, given no policy it can read, says so and runs nothing.
    let out = common::gm_command()
        .args(["__sandbox", "{not json", "--", "touch", "x"])
        .current_dir(&b.ws)
        .output()
        .expect("helper");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!b.ws.join("x").exists());
}

/// Runs `cmd` with a seccomp filter that answers `ENOSYS` to the syscalls in `deny`, as a
/// kernel built without them would (the filter is inherited by the relay, its worker and
/// every process they start).
fn without_syscalls(cmd: &mut std::process::Command, deny: &'static [u32]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls prctl with a filter built before the
    // fork's copy of memory; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            const LD_W_ABS: u16 = 0x20;
            const JEQ_K: u16 = 0x15;
            const RET_K: u16 = 0x06;
            const ARCH_X86_64: u32 = 0xC000_003E;
            const ALLOW: u32 = 0x7fff_0000;
            const ERRNO: u32 = 0x0005_0000;
            let mut prog = [libc::sock_filter { code: 0, jt: 0, jf: 0, k: 0 }; 16];
            let mut n = 0;
            let mut push = |code: u16, jt: u8, jf: u8, k: u32| {
                prog[n] = libc::sock_filter { code, jt, jf, k };
                n += 1;
            };
            push(LD_W_ABS, 0, 0, 4); // seccomp_data.arch
            push(JEQ_K, 1, 0, ARCH_X86_64);
            push(RET_K, 0, 0, ALLOW);
            push(LD_W_ABS, 0, 0, 0); // seccomp_data.nr
            for (i, nr) in deny.iter().enumerate() {
                // Equal: jump to the ERRNO return after the remaining tests and the ALLOW.
                let to_errno = (deny.len() - i) as u8;
                push(JEQ_K, to_errno, 0, *nr);
            }
            push(RET_K, 0, 0, ALLOW);
            push(RET_K, 0, 0, ERRNO | libc::ENOSYS as u32);
            let fprog = libc::sock_fprog { len: n as u16, filter: prog.as_mut_ptr() };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &fprog as *const _) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn a_kernel_without_landlock_makes_a_box_refuse_to_start_and_never_runs_unconfined() {
    const LANDLOCK: &[u32] = &[444, 445, 446]; // create_ruleset, add_rule, restrict_self
    let b = Boxed::new();
    for mode in ["workspace-write", "read-only"] {
        let mut cmd = common::gm_command();
        cmd.args(["serve", "--sandbox", mode])
            .current_dir(&b.ws)
            .env("HOME", &b.home)
            .env("TMPDIR", &b.tmp)
            .stdin(Stdio::null());
        without_syscalls(&mut cmd, LANDLOCK);
        let out = cmd.output().expect("gm serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode}: gm must not start unconfined: {stderr}");
        assert!(stderr.contains("cannot confine") && stderr.contains("Landlock"), "{mode}: {stderr}");
        assert!(!b.ws.join(".gm/log.jsonl").exists(), "{mode}: nothing started");
    }
    // The same kernel with the box off serves as always.
    let mut cmd = common::gm_command();
    cmd.args(["serve", "--sandbox", "off"])
        .current_dir(&b.ws)
        .env("HOME", &b.home)
        .env("TMPDIR", &b.tmp)
        .env("GM_DEFAULTS_DIR", common::no_child_servers())
        .env("GM_WORKER_IDLE_MS", "500")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    without_syscalls(&mut cmd, LANDLOCK);
    let mut child = cmd.spawn().expect("gm serve");
    let mut stdin = child.stdin.take().expect("stdin");
    use std::io::{BufRead, Write};
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"t","version":"0"}}}}}}"#
    )
    .expect("write");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert!(line.contains("\"result\""), "{line}");
    drop(stdin);
    let _ = child.wait();
}

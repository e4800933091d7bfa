//! gm's life as a process: signals end what it started, and a restart keeps the run.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::json;

/// Whether a process is alive.
fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether a process group still has members.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

fn wait_for_file(path: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_stop_signal_ends_the_foreground_shell_logs_the_stop_and_gives_stdin_its_flags_back() {
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT"), (libc::SIGHUP, "SIGHUP")] {
        let (mut gm, stdin) = Gm::start_with_own_pipe(&[]);
        // SAFETY: fcntl(F_GETFL) on a descriptor we own.
        let before = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
        gm.ready();
        gm.js("await gm.job_start({ name: 'outlives', command: 'echo $$ > job.pid; sleep 1000' });");
        let job = wait_for_file(&gm.workspace.join("job.pid")).parse::<i32>().expect("pid");
        gm.send(&json!({ "jsonrpc": "2.0", "id": "shell", "method": "tools/call",
            "params": { "name": "run_code", "arguments": { "code": "await gm.run_shell({ command: 'echo $$ > fg.pid; sleep 1000' })" } } }));
        let shell = wait_for_file(&gm.workspace.join("fg.pid")).parse::<i32>().expect("pid");
        assert!(group_alive(shell));
        let sent = Instant::now();
        gm.signal(signal);
        let status = gm.wait_exit(Duration::from_secs(3)).unwrap_or_else(|| panic!("gm outlived {name}"));
        assert!(sent.elapsed() < Duration::from_secs(1), "{name}: gm took {:?} to exit", sent.elapsed());
        assert_eq!(status.code(), Some(128 + signal), "{name}");
        assert!(!group_alive(shell), "{name}: the foreground shell's group outlived gm");
        assert!(process_alive(job), "{name}: a background job outlives gm, as documented");
        // SAFETY: as above.
        let after = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(after & libc::O_NONBLOCK, before & libc::O_NONBLOCK, "{name}: stdin's flags were not restored");
        let stop = common::read_log(&gm.log_path()).into_iter().find(|e| e["kind"] == "stop").expect("a stop event");
        assert_eq!(stop["signal"], name);
        // SAFETY: kill(2) on the job's process.
        unsafe { libc::kill(job, libc::SIGKILL) };
    }
}

#[test]
fn stdin_closing_gives_stdin_its_flags_back() {
    let (mut gm, stdin) = Gm::start_with_own_pipe(&[]);
    gm.initialize("2025-11-25");
    gm.close_stdin();
    let status = gm.wait_exit(Duration::from_secs(3)).expect("gm exits");
    assert!(status.success());
    // SAFETY: fcntl(F_GETFL) on a descriptor we own.
    let flags = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
    assert_eq!(flags & libc::O_NONBLOCK, 0);
}

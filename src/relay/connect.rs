//! Finding the workspace's worker, or starting it: under `.gm/worker.lock`, a relay connects to
//! the worker's socket, and when nobody listens starts a worker (detached, so it outlives the
//! relay), waits for it to say it is ready, and connects. The first line each way is the hello
//! and the welcome (`worker::hello`).

use gm_actors::sys::local::{self, Half, Stream as UnixStream};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gm_actors::sys;

use crate::worker::exits::{self, Exit};
use crate::worker::hello::{Answer, Build, First, Hello};
use crate::worker::paths::{self, Files};

/// How long a starting worker may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a worker may take to answer a hello.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(15);
/// The most of a failed worker's stderr kept for the message.
const STDERR_KEEP: usize = 16 << 10;

/// A connection to the workspace's worker, past the hello: the session's lines go out on
/// `writer` and come back on `reader` (a pipe each way, or both the socket).
pub struct Connection {
    pub reader: BufReader<Half>,
    pub writer: Half,
    pub worker: Build,
    /// What this relay asked that the running worker does otherwise.
    pub differs: Vec<String>,
    /// The worker took the host's stdio with the hello: the socket carries only the relay's
    /// own lines (see `crate::worker::direct`).
    pub direct: bool,
}

/// Makes the descriptors a direct hello brings (the host's stdin and stdout, the journal),
/// just before it is said.
pub type DirectFds<'a> = &'a dyn Fn() -> std::io::Result<Vec<std::os::fd::OwnedFd>>;

#[derive(Debug)]
pub enum ConnectError {
    /// A worker this relay started exited before it was ready, having printed this.
    Startup { message: String },
    /// The worker refused the session.
    Refused(String),
    /// Anything else (the socket folder, the lock, a spawn that failed).
    Other(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Startup { message } => f.write_str(message),
            ConnectError::Refused(why) => write!(f, "the workspace's worker refused this session: {why}"),
            ConnectError::Other(why) => f.write_str(why),
        }
    }
}

/// What a relay needs to find or start its workspace's worker.
pub struct Finder {
    pub files: Files,
    /// The binary a worker is started from.
    pub exe: PathBuf,
    /// `gm serve`'s arguments, passed on to a worker this relay starts.
    pub serve_args: Vec<OsString>,
    /// The workers this relay started, and how each ended once reaped.
    pub reaped: Arc<Reaped>,
}

/// How the workers a relay started ended, as its reaper threads saw them.
#[derive(Default)]
pub struct Reaped {
    causes: Mutex<HashMap<u32, Option<String>>>,
    changed: Condvar,
}

impl Reaped {
    fn started(&self, pid: u32) {
        lock(&self.causes).insert(pid, None);
    }

    fn ended(&self, pid: u32, cause: String) {
        lock(&self.causes).insert(pid, Some(cause));
        self.changed.notify_all();
    }

    /// How worker `pid` ended, when this relay started it: waits up to `limit` for it to be
    /// reaped (a core dump can take a while). `None` for a worker another relay started.
    pub fn cause(&self, pid: u32, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        let mut causes = lock(&self.causes);
        loop {
            match causes.get(&pid) {
                None => return None,
                Some(Some(cause)) => return Some(cause.clone()),
                Some(None) => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            causes = match self.changed.wait_timeout(causes, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Finder {
    /// Connects to the worker, starting one when none listens, and says hello as `hello`.
    /// `restarts`: the deaths of the last minute, for the new worker's start event.
    /// `before_start` runs just before a worker is started, if one is.
    /// `direct_fds` makes the descriptors of a hello that asks for `direct`.
    pub fn connect(
        &self,
        hello: &Hello,
        restarts: usize,
        before_start: &dyn Fn(),
        direct_fds: Option<DirectFds<'_>>,
    ) -> Result<Connection, ConnectError> {
        std::fs::create_dir_all(&self.files.state_dir)
            .map_err(|e| ConnectError::Other(format!("cannot make {}: {e}", self.files.state_dir.display())))?;
        // The folder ignores itself from the start (the worker would see to it too, later).
        let _ = crate::gitignore::ignore_own_folder(&self.files.state_dir);
        let socket = paths::socket_path(&self.files.workspace)
            .map_err(|e| ConnectError::Other(format!("the worker socket's folder: {e}")))?;
        // Held until the hello is answered: a worker deciding to leave takes it too, so it
        // never leaves under a relay that found it.
        let _lock = gm_actors::state_file::lock(&self.files.start_lock, true)
            .map_err(|e| ConnectError::Other(format!("cannot lock {}: {e}", self.files.start_lock.display())))?;
        if let Ok(stream) = UnixStream::connect(&socket) {
            return handshake(stream, hello, direct_fds);
        }
        // A worker whose starter went away before it listened (a host killed while gm
        // started) is still starting: wait for it rather than start a second one, which
        // would refuse.
        if let Some(stream) = wait_for_starting(&socket, &self.files.life_lock) {
            return handshake(stream, hello, direct_fds);
        }
        before_start();
        let pid = match self.start_worker(restarts, &socket) {
            Ok(Started::Ours(pid)) => pid,
            Ok(Started::Theirs(stream)) => return handshake(stream, hello, direct_fds),
            // Ours refused because another took the workspace as ours started (one whose
            // starter went away just before it locked): that one is joined.
            Err(e @ ConnectError::Startup { .. }) => {
                return match wait_for_starting(&socket, &self.files.life_lock) {
                    Some(stream) => handshake(stream, hello, direct_fds),
                    None => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let connected = UnixStream::connect(&socket)
            .map_err(|e| {
                ConnectError::Other(format!("the worker (pid {pid}) said it was ready but its socket refuses: {e}"))
            })
            .and_then(|stream| handshake(stream, hello, direct_fds));
        if connected.is_err() && !sys::process_exists(pid) {
            // It died as it started: its end is recorded before anyone counts the deaths.
            let _ = self.reaped.cause(pid, Duration::from_secs(10));
        }
        connected
    }

    /// Starts a worker and waits until it listens; returns its pid. A worker that exits first
    /// is a startup error, with what it printed; its exit is recorded as a death.
    fn start_worker(&self, restarts: usize, socket: &std::path::Path) -> Result<Started, ConnectError> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("serve")
            .arg("--worker")
            .arg(restarts.to_string())
            .args(&self.serve_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sys::detach(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| ConnectError::Other(format!("cannot start the worker {}: {e}", self.exe.display())))?;
        let pid = child.id();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ConnectError::Other("the worker's pipes were not made".into()));
        };
        // Read on a thread of its own: a worker that prints much before it is ready must not
        // block on a full pipe. The worker's stderr moves to .gm/worker.log once it is ready,
        // which ends this read.
        let errors = std::thread::Builder::new()
            .name("gm-relay-stderr".into())
            .spawn(move || {
                let mut kept = Vec::new();
                let _ = stderr.take(STDERR_KEEP as u64).read_to_end(&mut kept);
                kept
            })
            .ok();
        let ready = match wait_ready(stdout, socket, &self.files.life_lock, pid) {
            Ready::Theirs(stream) => {
                // Another worker took the workspace while ours waited for it to let go: ours
                // has done nothing yet and goes; the other is joined.
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Started::Theirs(stream));
            }
            Ready::Ours => true,
            Ready::Failed => false,
        };
        let exits_file = self.files.exits.clone();
        if ready {
            // Reaped here while this relay lives, so its end is known to every relay.
            self.reaped.started(pid);
            let reaped = self.reaped.clone();
            let _ = std::thread::Builder::new().name("gm-relay-reaper".into()).spawn(move || {
                if let Ok(status) = child.wait() {
                    let cause = sys::exit_cause(&status);
                    match exits::of(&exits_file, pid) {
                        Some(e) if e.clean => {}
                        _ => exits::record(&exits_file, &Exit::now(pid, false, cause.clone())),
                    }
                    reaped.ended(pid, cause);
                }
            });
            return Ok(Started::Ours(pid));
        }
        let _ = child.kill();
        let status = child.wait().map(|s| sys::exit_cause(&s)).unwrap_or_else(|_| "an unknown cause".into());
        let printed = errors.and_then(|t| t.join().ok()).unwrap_or_default();
        let printed = String::from_utf8_lossy(&printed).trim().to_owned();
        let message = if printed.is_empty() {
            format!("gm's worker ended ({status}) before it was ready")
        } else {
            printed.strip_prefix("gm: ").unwrap_or(&printed).to_owned()
        };
        exits::record(&exits_file, &Exit::now(pid, false, format!("did not start: {message}")));
        Err(ConnectError::Startup { message })
    }
}

/// Connects to a worker that holds its life lock but does not listen yet, once it does;
/// `None` when no worker lives (or it never listens within [`READY_TIMEOUT`]).
fn wait_for_starting(socket: &std::path::Path, life_lock: &std::path::Path) -> Option<UnixStream> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while sys::is_locked(life_lock) && Instant::now() < deadline {
        if let Ok(stream) = UnixStream::connect(socket) {
            return Some(stream);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// What became of a worker this relay started.
enum Started {
    /// It listens: its pid.
    Ours(u32),
    /// Another worker took the workspace first (one whose starter went away before it
    /// locked it): a connection to that one.
    Theirs(UnixStream),
}

enum Ready {
    Ours,
    Theirs(UnixStream),
    /// It exited, or took too long.
    Failed,
}

/// Waits for the worker's `ready` line. Meanwhile the socket is tried now and then: a worker
/// that holds the workspace and is not `pid` (ours waits for it to let go, which a serving
/// worker never does) is joined instead.
fn wait_ready(
    stdout: std::process::ChildStdout,
    socket: &std::path::Path,
    life_lock: &std::path::Path,
    pid: u32,
) -> Ready {
    use std::os::fd::AsRawFd;
    const PROBE_EVERY: Duration = Duration::from_millis(20);
    let deadline = Instant::now() + READY_TIMEOUT;
    let fd = stdout.as_raw_fd();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ready::Failed;
        }
        match sys::wait_readable(fd, left.min(PROBE_EVERY)) {
            Ok(true) => {}
            Ok(false) => {
                if let Ok(stream) = UnixStream::connect(socket) {
                    if holder_pid(life_lock).is_some_and(|holder| holder != pid) {
                        return Ready::Theirs(stream);
                    }
                }
                continue;
            }
            Err(_) => return Ready::Failed,
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return Ready::Failed,
            Ok(_) if line.trim() == "ready" => return Ready::Ours,
            Ok(_) => {}
        }
    }
}

/// The pid the workspace's life lock names (the worker that holds it writes it there).
fn holder_pid(life_lock: &std::path::Path) -> Option<u32> {
    let text = std::fs::read(life_lock).ok()?;
    let holder: serde_json::Value = serde_json::from_slice(&text).ok()?;
    holder["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
}

/// Says hello and reads the answer. A hello that asks for pipes brings them: the worker
/// keeps its ends, this side the others, and the socket is done with once the welcome says
/// the worker took them.
fn handshake(stream: UnixStream, hello: &Hello, direct_fds: Option<DirectFds<'_>>) -> Result<Connection, ConnectError> {
    let io = |e: std::io::Error| ConnectError::Other(format!("the worker's socket: {e}"));
    let mut line = serde_json::to_vec(&First::Hello(hello.clone())).map_err(|e| ConnectError::Other(e.to_string()))?;
    line.push(b'\n');
    let pipes = if let Some(fds) = direct_fds.filter(|_| hello.direct) {
        let fds = fds().map_err(io)?;
        let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        local::send_with_fds(&stream, &line, &borrowed).map_err(io)?;
        None
    } else if hello.pipes {
        let (to_worker, to_worker_w) = local::pipe().map_err(io)?;
        let (from_worker, from_worker_w) = local::pipe().map_err(io)?;
        local::send_with_fds(&stream, &line, &[to_worker.as_fd(), from_worker_w.as_fd()]).map_err(io)?;
        // The worker has its own copies now; ours would keep it from seeing this side close.
        drop((to_worker, from_worker_w));
        Some((from_worker, to_worker_w))
    } else {
        (&stream).write_all(&line).map_err(io)?;
        None
    };
    stream.set_read_timeout(Some(WELCOME_TIMEOUT)).map_err(io)?;
    // Kept as the session's reader when the socket carries it: a worker that took the host's
    // stdio may write a line right behind its welcome, and it may be read with it.
    let mut reader = BufReader::with_capacity(1 << 16, local::half_of(stream.try_clone().map_err(io)?));
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(io)?;
    let welcome = match serde_json::from_str::<Answer>(&answer) {
        Ok(Answer::Welcome(w)) => w,
        Ok(Answer::Refused { why }) => return Err(ConnectError::Refused(why)),
        Err(_) if answer.is_empty() => return Err(ConnectError::Other("the worker closed the connection".into())),
        Err(e) => return Err(ConnectError::Other(format!("the worker's answer is not a welcome: {e}"))),
    };
    let (reader, writer) = match pipes {
        Some((from_worker, to_worker)) if welcome.pipes => (BufReader::with_capacity(1 << 16, from_worker), to_worker),
        // An older worker dropped the pipes unread: the socket carries the session.
        _ => {
            stream.set_read_timeout(None).map_err(io)?;
            (reader, local::half_of(stream))
        }
    };
    Ok(Connection { reader, writer, worker: welcome.worker, differs: welcome.differs, direct: welcome.direct })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::hello::WorkerSettings;

    fn hello() -> Hello {
        Hello {
            protocol: crate::worker::hello::PROTOCOL,
            session: "s-test".into(),
            relay: Build::this_process(),
            surface: "tools".into(),
            page_size: 200,
            step_budget: 10,
            max_line_bytes: 1 << 20,
            worker: WorkerSettings {
                max_inflight: 4,
                mcp_config: None,
                sandbox: Default::default(),
                max_result_bytes: None,
            },
            notes: Vec::new(),
            stateless: false,
            pipes: true,
            direct: false,
            http: false,
        }
    }

    /// A worker of an older build reads the hello without its descriptors (they are closed
    /// unread) and welcomes without `pipes`: the session stays on the socket, both ways.
    #[test]
    fn a_worker_that_does_not_take_the_pipes_is_spoken_to_on_the_socket() {
        let (ours, theirs) = UnixStream::pair().expect("pair");
        let old_worker = std::thread::spawn(move || {
            let mut reader = BufReader::new(theirs.try_clone().expect("clone"));
            let mut line = String::new();
            reader.read_line(&mut line).expect("hello");
            let hello: serde_json::Value = serde_json::from_str(&line).expect("json");
            assert_eq!(hello["pipes"], true);
            let mut theirs = theirs;
            let build = serde_json::to_value(Build::this_process()).expect("build");
            let welcome = serde_json::json!({ "gm": "welcome", "protocol": 1, "worker": build, "differs": [] });
            writeln!(theirs, "{welcome}").expect("welcome");
            line.clear();
            reader.read_line(&mut line).expect("a session line");
            theirs.write_all(format!("echo {line}").as_bytes()).expect("echo");
        });
        let mut conn = handshake(ours, &hello(), None).expect("welcomed");
        conn.writer.write_all(b"ping\n").expect("write");
        let mut back = String::new();
        conn.reader.read_line(&mut back).expect("read");
        assert_eq!(back, "echo ping\n");
        old_worker.join().expect("old worker");
    }
}

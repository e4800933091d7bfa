//! The box on Linux, in the order it must be built (see `mod.rs`): a user and mount namespace
//! (and a network namespace when the network is off), the process's own uid and gid mapped
//! into it, mount propagation made private, each protected subpath bind-mounted onto itself
//! and remounted read-only (keeping the flags the kernel locks, as bubblewrap does), then
//! `no_new_privs` and the Landlock domain: read everywhere, write only the writable set, TCP
//! handled with no rule when the network is off (a second wall behind the empty network
//! namespace), and no change of the mount topology — so nothing inside can undo a mount.
//!
//! [`Prepared::new`] does everything that allocates or may fail for a person to read, before
//! the fork; [`Prepared::apply`] runs in the child between fork and exec and makes only
//! system calls on what was prepared.
//!
//! A worker builds the namespaces once, in a *keeper* process (`gm __sandbox --keep POLICY`,
//! which makes them, reports `ready` and waits for its stdin to close), and each confined
//! process joins them (`setns`) instead of making its own: a mount namespace made and torn
//! down per process costs 2-3 ms here (its teardown waits for an RCU grace period), joining one
//! costs microseconds. The Landlock domain is still made per process. A protected path that
//! appears later (a `git init` after the start) gets a new keeper before the next process.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    ABI,
};

use super::{Policy, SandboxError, DEVICES};

/// The newest Landlock ABI gm asks for; an older kernel gives what it has (best effort), and
/// one without Landlock is refused by [`supported`].
const ABI_WANTED: ABI = ABI::V5;

/// Whether this kernel can build the box: Landlock, and user namespaces.
pub fn supported() -> Result<(), String> {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns the ABI version.
    let abi = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32 /* VERSION */)
    };
    if abi < 1 {
        return Err(format!("the kernel has no Landlock ({})", std::io::Error::last_os_error()));
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        return Err("user namespaces are turned off (/proc/sys/user/max_user_namespaces is 0)".into());
    }
    Ok(())
}

/// One protected subpath and the flags its remount keeps.
#[derive(Debug)]
struct ReadOnly {
    path: CString,
    keep: libc::c_ulong,
}

/// Everything [`Prepared::apply`] needs, made before the fork.
#[derive(Debug)]
pub struct Prepared {
    /// How the namespaces are had: made here, or joined from a keeper.
    spaces: Spaces,
    ruleset: OwnedFd,
}

#[derive(Debug)]
enum Spaces {
    Make(Namespaces),
    Join(std::sync::Arc<Keeper>),
}

/// What making the namespaces takes.
#[derive(Debug)]
struct Namespaces {
    unshare: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    read_only: Vec<ReadOnly>,
}

impl Namespaces {
    fn of(policy: &Policy) -> Result<(Namespaces, Vec<PathBuf>), SandboxError> {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut unshare = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        if !policy.network {
            unshare |= libc::CLONE_NEWNET;
        }
        let mut read_only = Vec::new();
        let mut mounted = Vec::new();
        for p in &policy.read_only {
            // A path that is not there has nothing to protect; a link is not followed (its
            // target is another path, protected or not on its own).
            match std::fs::symlink_metadata(p) {
                Ok(meta) if !meta.file_type().is_symlink() => {
                    let path = c_path(p)?;
                    let keep = locked_flags(&path).map_err(os(format!("cannot look at {}", p.display())))?;
                    read_only.push(ReadOnly { path, keep });
                    mounted.push(p.clone());
                }
                _ => {}
            }
        }
        let spaces = Namespaces {
            unshare,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            read_only,
        };
        Ok((spaces, mounted))
    }

    /// Makes the namespaces and the read-only mounts. System calls only.
    fn make(&self) -> std::io::Result<()> {
        // SAFETY (every block below): plain system calls on NUL-terminated strings and buffers
        // that live in `self`, made before the fork; nothing allocates or takes a lock.
        check(unsafe { libc::unshare(self.unshare) })?;
        write_proc(c"/proc/self/setgroups", b"deny")?;
        write_proc(c"/proc/self/uid_map", &self.uid_map)?;
        write_proc(c"/proc/self/gid_map", &self.gid_map)?;
        // Mounts made here stay here.
        check(unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        })?;
        for ro in &self.read_only {
            check(unsafe {
                libc::mount(
                    ro.path.as_ptr(),
                    ro.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            })?;
            check(unsafe {
                libc::mount(
                    std::ptr::null(),
                    ro.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | ro.keep,
                    std::ptr::null(),
                )
            })?;
        }
        Ok(())
    }
}

/// A process that holds a box's namespaces for the confined processes to join.
#[derive(Debug)]
pub struct Keeper {
    child: std::sync::Mutex<std::process::Child>,
    user: OwnedFd,
    mnt: OwnedFd,
    net: Option<OwnedFd>,
    /// The protected paths it mounted read-only (those that existed when it started).
    pub mounted: Vec<PathBuf>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Keeper {
    /// Whether the keeper still runs (a killed one holds nothing to join).
    pub fn alive(&self) -> bool {
        self.child.lock().is_ok_and(|mut c| matches!(c.try_wait(), Ok(None)))
    }

    /// Starts `exe __sandbox --keep POLICY` and opens its namespaces.
    pub fn start(policy: &Policy, exe: &Path) -> Result<Keeper, SandboxError> {
        use std::io::BufRead;
        let (_, mounted) = Namespaces::of(policy)?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg(super::HELPER)
            .arg("--keep")
            .arg(policy.to_arg())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        crate::sys::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(os("cannot start the sandbox's keeper"))?;
        let ready = child.stdout.take().map(|out| {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            line
        });
        if ready.as_deref().map(str::trim) != Some("ready") {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(SandboxError::Unsupported(format!("the namespaces could not be made ({status})")));
        }
        let ns = |name: &str| -> Result<OwnedFd, SandboxError> {
            let path = format!("/proc/{}/ns/{name}", child.id());
            std::fs::File::open(&path).map(OwnedFd::from).map_err(os(format!("cannot open {path}")))
        };
        let (user, mnt) = (ns("user")?, ns("mnt")?);
        let net = if policy.network { None } else { Some(ns("net")?) };
        Ok(Keeper { child: std::sync::Mutex::new(child), user, mnt, net, mounted })
    }
}

/// `gm __sandbox --keep POLICY`: makes the box's namespaces, says `ready`, and holds them until
/// its stdin closes (the worker ended). Returns the exit code.
pub fn keep(policy: &Policy) -> i32 {
    use std::io::{Read, Write};
    let spaces = match Namespaces::of(policy) {
        Ok((spaces, _)) => spaces,
        Err(e) => {
            crate::stderr_line!("gm {}: {e}", super::HELPER);
            return 126;
        }
    };
    if let Err(e) = spaces.make() {
        crate::stderr_line!("gm {}: cannot make the namespaces: {e}", super::HELPER);
        return 126;
    }
    let mut out = std::io::stdout();
    if out.write_all(b"ready\n").and_then(|()| out.flush()).is_err() {
        return 1;
    }
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    0
}

fn os(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Os { what, source }
}

fn c_path(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Policy(format!("{} holds a NUL byte", p.display())))
}

/// The mount flags a remount of `path` must keep (a mount made in a user namespace cannot
/// drop `nosuid`, `nodev`, `noexec` or the atime flags its source has).
fn locked_flags(path: &CString) -> Result<libc::c_ulong, std::io::Error> {
    // SAFETY: statvfs writes into the struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs.iter().filter(|(st_flag, _)| st.f_flag & st_flag != 0).fold(0, |acc, (_, ms)| acc | ms))
}

impl Prepared {
    /// The box for `policy`, making its own namespaces; `tmp`, a private temporary folder, is
    /// writable too.
    pub fn new(policy: &Policy, tmp: Option<&Path>) -> Result<Prepared, SandboxError> {
        let (spaces, _) = Namespaces::of(policy)?;
        Ok(Prepared { spaces: Spaces::Make(spaces), ruleset: ruleset(policy, tmp)? })
    }

    /// The box for `policy`, joining the namespaces `keeper` holds.
    pub fn joining(
        policy: &Policy,
        tmp: Option<&Path>,
        keeper: std::sync::Arc<Keeper>,
    ) -> Result<Prepared, SandboxError> {
        Ok(Prepared { spaces: Spaces::Join(keeper), ruleset: ruleset(policy, tmp)? })
    }

    /// Confines the calling process. Between fork and exec: system calls only.
    pub fn apply(&self) -> std::io::Result<()> {
        match &self.spaces {
            Spaces::Make(spaces) => spaces.make()?,
            Spaces::Join(keeper) => join(keeper)?,
        }
        // SAFETY: prctl and landlock_restrict_self on a descriptor `self` owns.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        let restricted = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset.as_raw_fd(), 0u32) };
        if restricted != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Joins the keeper's namespaces, keeping the working directory (joining a mount namespace
/// moves it to the root). System calls only: the path is read into a buffer on the stack.
fn join(keeper: &Keeper) -> std::io::Result<()> {
    let mut cwd = [0u8; 4096];
    // SAFETY: getcwd writes at most `len` bytes into the stack buffer we own, NUL-terminated;
    // setns and chdir take descriptors and that buffer.
    unsafe {
        let have_cwd = !libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()).is_null();
        check(libc::setns(keeper.user.as_raw_fd(), libc::CLONE_NEWUSER))?;
        check(libc::setns(keeper.mnt.as_raw_fd(), libc::CLONE_NEWNS))?;
        if let Some(net) = &keeper.net {
            check(libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET))?;
        }
        if have_cwd {
            check(libc::chdir(cwd.as_ptr().cast()))?;
        }
    }
    Ok(())
}

/// The Landlock domain of `policy` (plus `tmp`), as a ruleset descriptor.
fn ruleset(policy: &Policy, tmp: Option<&Path>) -> Result<OwnedFd, SandboxError> {
    let mut writable: Vec<PathBuf> = policy.writable.clone();
    writable.extend(tmp.map(Path::to_owned));
    writable.extend(DEVICES.iter().map(PathBuf::from));
    writable.retain(|p| p.exists());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_WANTED))
        .map_err(|e| SandboxError::Unsupported(e.to_string()))?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_WANTED))
            .map_err(|e| SandboxError::Unsupported(e.to_string()))?;
    }
    let created = ruleset
        .create()
        .map_err(|e| SandboxError::Unsupported(e.to_string()))?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(ABI_WANTED)))
        .map_err(|e| SandboxError::Policy(e.to_string()))?
        .add_rules(path_beneath_rules(&writable, AccessFs::from_all(ABI_WANTED)))
        .map_err(|e| SandboxError::Policy(e.to_string()))?;
    let ruleset: Option<OwnedFd> = created.into();
    ruleset.ok_or_else(|| SandboxError::Unsupported("the kernel has no Landlock".into()))
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes `bytes` to a file of `/proc/self` (open, write, close: no allocation).
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a buffer we own.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

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
    unshare: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    read_only: Vec<ReadOnly>,
    ruleset: OwnedFd,
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
    /// The box for `policy`; `tmp`, a private temporary folder, is writable too.
    pub fn new(policy: &Policy, tmp: Option<&Path>) -> Result<Prepared, SandboxError> {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut unshare = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        if !policy.network {
            unshare |= libc::CLONE_NEWNET;
        }
        let mut read_only = Vec::new();
        for p in &policy.read_only {
            // A path that is not there has nothing to protect; a link is not followed (its
            // target is another path, protected or not on its own).
            match std::fs::symlink_metadata(p) {
                Ok(meta) if !meta.file_type().is_symlink() => {
                    let path = c_path(p)?;
                    let keep = locked_flags(&path).map_err(os(format!("cannot look at {}", p.display())))?;
                    read_only.push(ReadOnly { path, keep });
                }
                _ => {}
            }
        }
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
        let ruleset = ruleset.ok_or_else(|| SandboxError::Unsupported("the kernel has no Landlock".into()))?;
        Ok(Prepared {
            unshare,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            read_only,
            ruleset,
        })
    }

    /// Confines the calling process. Between fork and exec: system calls only.
    pub fn apply(&self) -> std::io::Result<()> {
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
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        let restricted = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset.as_raw_fd(), 0u32) };
        if restricted != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
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

//! Confinement: what gm's shells, jobs and a repository's child servers may touch, enforced by
//! the kernel between fork and exec, so nothing the process starts can leave the box.
//!
//! The policy is one serialisable value ([`Policy`]); how it is enforced is the OS's module:
//! on Linux (`linux.rs`) a user and mount namespace first (and a network namespace for
//! `network: false`), read-only bind mounts of the protected subpaths (`.gm/`, `.git/`, gm's
//! socket folder), then Landlock on top — it grants read everywhere and write only to the
//! writable set, and it forbids changing the mount topology, so the read-only mounts cannot be
//! undone from inside. Landlock alone cannot keep a subfolder of a writable folder read-only,
//! hence the mounts; the mounts alone would not stop writes outside the workspace, hence
//! Landlock. macOS gets a Seatbelt profile (`seatbelt.rs`, written and unit-tested, not run
//! here); elsewhere a mode other than off refuses to start.
//!
//! Two ways in: [`Confinement::confine`] adds the steps to a `Command` about to be spawned
//! (shells and child servers: no extra process), and `gm __sandbox POLICY -- PROGRAM ARGS...`
//! ([`run_helper`]) applies them and execs (a job's wrapper, which must stay outside the box to
//! write the job's exit code, runs its command through it).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[cfg(target_os = "linux")]
mod linux;
pub mod seatbelt;

/// How much a confined process may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No confinement.
    Off,
    /// Read what the user can; write the workspace (less `.gm/` and `.git/`), the temporary
    /// folder, the devices a shell needs and the folders the user named.
    WorkspaceWrite,
    /// Read what the user can; write only a private temporary folder made for the process.
    ReadOnly,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "workspace-write" => Some(Mode::WorkspaceWrite),
            "read-only" => Some(Mode::ReadOnly),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
        }
    }
}

/// The box, as one value: what the kernel is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    pub mode: Mode,
    /// Folders (and files) a confined process may write, every one an absolute path.
    pub writable: Vec<PathBuf>,
    /// Inside those, what stays read-only.
    pub read_only: Vec<PathBuf>,
    /// Whether a confined process has the network (`false`: none at all, loopback included).
    pub network: bool,
}

/// The device files a shell writes whatever the mode.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

impl Policy {
    /// Whether a write to `path` (an absolute path with links resolved) is inside the box.
    pub fn may_write(&self, path: &Path) -> bool {
        match self.mode {
            Mode::Off => true,
            _ => {
                self.writable.iter().any(|w| path.starts_with(w)) && !self.read_only.iter().any(|r| path.starts_with(r))
            }
        }
    }

    /// The policy as the helper's argument.
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a process could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("this system cannot confine processes ({0}); use --sandbox off, or a Linux kernel with Landlock and user namespaces")]
    Unsupported(String),
    #[error("{what}: {source}")]
    Os { what: String, source: std::io::Error },
    #[error("the sandbox policy: {0}")]
    Policy(String),
}

/// A policy made ready for [`Confinement::confine`]: what can be decided before a fork.
#[derive(Debug)]
pub struct Confinement {
    policy: Policy,
    /// The gm binary, for [`Confinement::helper_argv`] and the keeper.
    exe: PathBuf,
    /// The process holding the box's namespaces, which confined processes join (Linux).
    #[cfg(target_os = "linux")]
    keeper: std::sync::Mutex<Option<std::sync::Arc<linux::Keeper>>>,
}

impl Confinement {
    /// Checks that this system can enforce `policy` (a real probe: a process is confined and
    /// run), so a box that cannot be built is said at start, never skipped silently.
    pub fn new(policy: Policy, exe: PathBuf) -> Result<Confinement, SandboxError> {
        if policy.mode == Mode::Off {
            return Err(SandboxError::Policy("mode off confines nothing".into()));
        }
        let me = Confinement {
            policy,
            exe,
            #[cfg(target_os = "linux")]
            keeper: std::sync::Mutex::new(None),
        };
        me.probe()?;
        Ok(me)
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A command that runs `program` with `args` in the box. `tmp`: a private temporary
    /// folder for a read-only box (writable, and the process's `TMPDIR`). On Linux the box is
    /// built between the fork and the exec ([`Confinement::confine`]); on macOS the program runs
    /// under `sandbox-exec` with the Seatbelt profile.
    pub fn command(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
        tmp: Option<&Path>,
    ) -> Result<std::process::Command, SandboxError> {
        #[cfg(target_os = "macos")]
        {
            let mut cmd = std::process::Command::new("/usr/bin/sandbox-exec");
            cmd.arg("-p").arg(seatbelt::profile(&self.policy, tmp)).arg(program).args(args);
            if let Some(tmp) = tmp {
                cmd.env("TMPDIR", tmp);
            }
            Ok(cmd)
        }
        #[cfg(not(target_os = "macos"))]
        {
            let mut cmd = std::process::Command::new(program);
            cmd.args(args);
            self.confine(&mut cmd, tmp)?;
            Ok(cmd)
        }
    }

    /// Adds the confinement to `cmd`, run between its fork and its exec. `tmp`: a private
    /// temporary folder for a read-only box (writable, and the process's `TMPDIR`).
    #[cfg(target_os = "linux")]
    pub fn confine(&self, cmd: &mut std::process::Command, tmp: Option<&Path>) -> Result<(), SandboxError> {
        let prepared = linux::Prepared::joining(&self.policy, tmp, self.keeper()?)?;
        if let Some(tmp) = tmp {
            cmd.env("TMPDIR", tmp);
        }
        // SAFETY: the closure runs in the child between fork and exec; `Prepared::apply` makes
        // only system calls on memory prepared before the fork (no allocation, no lock).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, move || prepared.apply());
        }
        Ok(())
    }

    /// The keeper of the box's namespaces: started at the first use, and again when a
    /// protected path appeared that it could not mount (a `.git` made after the start) or it
    /// died.
    #[cfg(target_os = "linux")]
    fn keeper(&self) -> Result<std::sync::Arc<linux::Keeper>, SandboxError> {
        let mut held = self.keeper.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stale = |k: &linux::Keeper| {
            !k.alive()
                || self.policy.read_only.iter().any(|p| {
                    !k.mounted.contains(p) && std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink())
                })
        };
        if let Some(k) = held.as_ref().filter(|k| !stale(k)) {
            return Ok(k.clone());
        }
        let k = std::sync::Arc::new(linux::Keeper::start(&self.policy, &self.exe)?);
        *held = Some(k.clone());
        Ok(k)
    }

    #[cfg(not(target_os = "linux"))]
    pub fn confine(&self, _cmd: &mut std::process::Command, _tmp: Option<&Path>) -> Result<(), SandboxError> {
        Err(SandboxError::Unsupported(std::env::consts::OS.into()))
    }

    /// `PROGRAM ARGS...` as the argv that runs it confined through the helper (`gm __sandbox`;
    /// on macOS, `sandbox-exec` with the profile).
    pub fn helper_argv(&self, program: impl Into<OsString>, args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
        #[cfg(target_os = "macos")]
        let mut argv: Vec<OsString> = vec![
            "/usr/bin/sandbox-exec".into(),
            "-p".into(),
            seatbelt::profile(&self.policy, None).into(),
            program.into(),
        ];
        #[cfg(not(target_os = "macos"))]
        let mut argv: Vec<OsString> =
            vec![self.exe.clone().into(), HELPER.into(), self.policy.to_arg().into(), "--".into(), program.into()];
        argv.extend(args);
        argv
    }

    fn probe(&self) -> Result<(), SandboxError> {
        #[cfg(target_os = "linux")]
        linux::supported().map_err(SandboxError::Unsupported)?;
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        return Err(SandboxError::Unsupported(std::env::consts::OS.into()));
        #[allow(unreachable_code)]
        {
            let mut cmd = self.command("/bin/sh", ["-c", "exit 0"], None)?;
            cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
            let status = cmd
                .status()
                .map_err(|e| SandboxError::Unsupported(format!("a confined process could not start: {e}")))?;
            if !status.success() {
                return Err(SandboxError::Unsupported(format!("a confined probe ended with {status}")));
            }
            Ok(())
        }
    }
}

/// The helper's first argument: `gm __sandbox POLICY -- PROGRAM ARGS...`.
pub const HELPER: &str = "__sandbox";

/// `gm __sandbox POLICY -- PROGRAM ARGS...`: confines this process and execs the program; only
/// returns (with the exit code to use) when it could not. `args` are the arguments after
/// `__sandbox`.
pub fn run_helper(args: &[OsString]) -> i32 {
    #[cfg(target_os = "linux")]
    if args.first().is_some_and(|a| a == "--keep") {
        return match args.get(1).map(|p| serde_json::from_str::<Policy>(&p.to_string_lossy())) {
            Some(Ok(policy)) => linux::keep(&policy),
            _ => {
                crate::stderr_line!("gm {HELPER}: usage: gm {HELPER} --keep POLICY");
                2
            }
        };
    }
    let (policy, rest) = match args.split_first() {
        Some((policy, rest)) => (policy, rest),
        None => {
            crate::stderr_line!("gm {HELPER}: usage: gm {HELPER} POLICY -- PROGRAM [ARGS...]");
            return 2;
        }
    };
    let argv = match rest.split_first() {
        Some((dashes, argv)) if dashes == "--" && !argv.is_empty() => argv,
        _ => {
            crate::stderr_line!("gm {HELPER}: usage: gm {HELPER} POLICY -- PROGRAM [ARGS...]");
            return 2;
        }
    };
    let policy: Policy = match serde_json::from_str(&policy.to_string_lossy()) {
        Ok(p) => p,
        Err(e) => {
            crate::stderr_line!("gm {HELPER}: the policy: {e}");
            return 2;
        }
    };
    #[cfg(target_os = "linux")]
    {
        // A read-only box writes only a private temporary folder (left for the system's
        // cleaning of the temporary folder: this process becomes the program).
        let tmp = match policy.mode {
            Mode::ReadOnly => {
                let dir = std::env::temp_dir().join(format!("gm-box-{}", std::process::id()));
                let mut builder = std::fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                if let Err(e) = builder.create(&dir) {
                    crate::stderr_line!("gm {HELPER}: cannot make {}: {e}", dir.display());
                    return 126;
                }
                std::env::set_var("TMPDIR", &dir);
                Some(dir)
            }
            _ => None,
        };
        let prepared = match linux::Prepared::new(&policy, tmp.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                crate::stderr_line!("gm {HELPER}: {e}");
                return 126;
            }
        };
        if let Err(e) = prepared.apply() {
            crate::stderr_line!("gm {HELPER}: cannot confine: {e}");
            return 126;
        }
        let e = std::os::unix::process::CommandExt::exec(std::process::Command::new(&argv[0]).args(&argv[1..]));
        crate::stderr_line!("gm {HELPER}: cannot run {}: {e}", argv[0].to_string_lossy());
        127
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (policy, argv);
        crate::stderr_line!("gm {HELPER}: this system cannot confine processes");
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            mode: Mode::WorkspaceWrite,
            writable: vec!["/w".into(), "/tmp".into()],
            read_only: vec!["/w/.gm".into(), "/w/.git".into()],
            network: true,
        }
    }

    #[test]
    fn a_write_is_inside_the_box_only_below_a_writable_folder_and_outside_its_read_only_parts() {
        let p = policy();
        assert!(p.may_write(Path::new("/w/src/a.rs")));
        assert!(p.may_write(Path::new("/tmp/x")));
        assert!(!p.may_write(Path::new("/w/.gm/log.jsonl")));
        assert!(!p.may_write(Path::new("/w/.git/hooks/pre-commit")));
        assert!(!p.may_write(Path::new("/home/u/.bashrc")));
        assert!(!p.may_write(Path::new("/wx/a")), "a sibling with the same prefix is outside");
        assert!(Policy { mode: Mode::Off, ..p }.may_write(Path::new("/home/u/.bashrc")));
    }

    #[test]
    fn the_policy_goes_to_the_helper_and_back_unchanged() {
        let p = policy();
        let back: Policy = serde_json::from_str(&p.to_arg()).expect("parses");
        assert_eq!(back, p);
        assert_eq!(Mode::parse("workspace-write"), Some(Mode::WorkspaceWrite));
        assert_eq!(Mode::parse("danger"), None);
    }
}

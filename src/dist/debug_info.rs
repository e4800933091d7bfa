//! Splitting a binary's debug info off into a file of its own, with each system's tools. The
//! release binary is almost all debug info (107 MB of it) and every update downloads the
//! archive; the info is still wanted to read a crash report, so it is kept beside the archive.
//! Every OS-specific tool `gm dist` runs is called from this file.

use std::path::Path;
#[cfg(not(windows))]
use std::process::Command;

use super::DistError;

/// Strips the debug info from `bin` (a copy of the running binary `original`), in place, and
/// writes it to `debug`. Returns whether a debug file was written (a Windows build without its
/// `.pdb` has none to keep).
pub fn split(bin: &Path, original: &Path, debug: &Path) -> Result<bool, DistError> {
    split_for_os(bin, original, debug)
}

#[cfg(all(unix, not(target_os = "macos")))]
fn split_for_os(bin: &Path, _original: &Path, debug: &Path) -> Result<bool, DistError> {
    run(Command::new("objcopy").arg("--only-keep-debug").arg(bin).arg(debug), "objcopy", BINUTILS)?;
    // The link names the debug file (and its CRC), so gdb finds it when it sits beside the
    // binary or under /usr/lib/debug.
    let mut link = std::ffi::OsString::from("--add-gnu-debuglink=");
    link.push(debug);
    run(Command::new("objcopy").arg("--strip-debug").arg(link).arg(bin), "objcopy", BINUTILS)?;
    Ok(true)
}

#[cfg(all(unix, not(target_os = "macos")))]
const BINUTILS: &str = "install binutils (Debian and Ubuntu: apt-get install binutils)";

// Untested here: only Linux builds are run on this project's machines.
#[cfg(target_os = "macos")]
fn split_for_os(bin: &Path, original: &Path, debug: &Path) -> Result<bool, DistError> {
    const XCODE: &str = "install the Xcode command line tools (xcode-select --install)";
    // The debug info of a macOS binary stays in the object files its debug map names;
    // dsymutil gathers it, here into one flat file rather than a .dSYM bundle.
    run(Command::new("dsymutil").arg("--flat").arg("-o").arg(debug).arg(original), "dsymutil", XCODE)?;
    run(Command::new("strip").arg("-S").arg(bin), "strip", XCODE)?;
    Ok(true)
}

// Untested here. An MSVC binary carries no debug info: it is in the .pdb cargo leaves beside it.
#[cfg(windows)]
fn split_for_os(_bin: &Path, original: &Path, debug: &Path) -> Result<bool, DistError> {
    let pdb = original.with_extension("pdb");
    if !pdb.is_file() {
        return Ok(false);
    }
    std::fs::copy(&pdb, debug).map_err(|source| DistError::Io { path: pdb, source })?;
    Ok(true)
}

#[cfg(not(windows))]
fn run(cmd: &mut Command, tool: &'static str, hint: &'static str) -> Result<(), DistError> {
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => DistError::ToolMissing { tool, hint },
        _ => DistError::Tool { tool, why: e.to_string() },
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(DistError::Tool { tool, why: format!("{}: {}", out.status, stderr.trim()) });
    }
    Ok(())
}

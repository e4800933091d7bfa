//! macOS: the same box as a Seatbelt profile for `sandbox-exec -p PROFILE PROGRAM ARGS...`
//! (written and unit-tested here; not run, since only Linux is built and tested). Seatbelt
//! takes the last matching rule, so the read-only subpaths are denied after the writable ones
//! are allowed.

use super::{Mode, Policy, DEVICES};

/// The SBPL profile for `policy` (`tmp`: a read-only box's private temporary folder).
pub fn profile(policy: &Policy, tmp: Option<&std::path::Path>) -> String {
    let quote = |p: &std::path::Path| {
        let s = p.to_string_lossy();
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    };
    let mut out = String::from("(version 1)\n(deny default)\n(allow process*)\n(allow signal (target same-sandbox))\n");
    out.push_str("(allow sysctl-read)\n(allow mach-lookup)\n(allow ipc-posix-shm)\n(allow file-read*)\n");
    let mut writable: Vec<&std::path::Path> = Vec::new();
    if policy.mode != Mode::ReadOnly {
        writable.extend(policy.writable.iter().map(|p| p.as_path()));
    }
    writable.extend(tmp);
    for w in writable {
        out.push_str(&format!("(allow file-write* (subpath {}))\n", quote(w)));
    }
    for d in DEVICES {
        out.push_str(&format!("(allow file-write* (literal {}))\n", quote(std::path::Path::new(d))));
    }
    for r in &policy.read_only {
        out.push_str(&format!("(deny file-write* (subpath {}))\n", quote(r)));
    }
    if policy.network {
        out.push_str("(allow network*)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_allows_the_writable_set_then_denies_its_read_only_parts_and_the_network_when_off() {
        let policy = Policy {
            mode: Mode::WorkspaceWrite,
            writable: vec!["/Users/u/ws".into()],
            read_only: vec!["/Users/u/ws/.gm".into()],
            network: false,
        };
        let p = profile(&policy, None);
        let allow = p.find("(allow file-write* (subpath \"/Users/u/ws\"))").expect("workspace writable");
        let deny = p.find("(deny file-write* (subpath \"/Users/u/ws/.gm\"))").expect(".gm denied");
        assert!(allow < deny, "the deny comes last, so it wins: {p}");
        assert!(!p.contains("network*"), "{p}");
        assert!(p.starts_with("(version 1)\n(deny default)"));
        let ro = profile(&Policy { mode: Mode::ReadOnly, ..policy }, Some(std::path::Path::new("/tmp/p")));
        assert!(!ro.contains("subpath \"/Users/u/ws\"))") && ro.contains("(subpath \"/tmp/p\")"), "{ro}");
    }
}

//! `gm install`, `gm uninstall` and `gm dist` through the real binary, each run with `HOME` in
//! a temporary folder, so `~/.claude.json` and `~/.gmnew` are the test's own.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use gm_actors::builds::{TARGET, VERSION};
use gm_actors::mcp_client::stdio::{Stderr, StdioClient};
use serde_json::{json, Value};

/// `gm <args>` with `home` as its home folder, in `cwd`.
fn gm_in(home: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(common::gm_bin())
        .args(args)
        .env("HOME", home)
        .env("USERPROFILE", home)
        .env_remove("GM_SKILLS_DIR")
        .env_remove("GM_DEFAULTS_DIR")
        .current_dir(cwd)
        .output()
        .expect("run gm")
}

fn gm(home: &Path, args: &[&str]) -> Output {
    gm_in(home, home, args)
}

/// The JSON report of a run that must succeed.
fn ok(out: Output) -> Value {
    assert!(out.status.success(), "gm failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("report is not JSON ({e}): {out:?}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn this_gm() -> String {
    fs::canonicalize(common::gm_bin()).unwrap().to_str().unwrap().to_owned()
}

fn claude_json(home: &Path) -> PathBuf {
    home.join(".claude.json")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

/// A config as Claude Code writes it: two spaces, members in the order it chose, one member
/// written on one line by hand.
const CONFIG: &str = r#"{
  "numStartups": 12,
  "mcpServers": {
    "zeta": {
      "command": "z",
      "args": []
    },
    "alpha": {"command": "a", "env": {"K": "v"}}
  },
  "projects": {
    "/x": {
      "allowedTools": []
    }
  },
  "userID": "abc"
}"#;

#[test]
fn a_missing_config_is_created_with_only_the_gm_entry() {
    let home = tempfile::tempdir().unwrap();
    let report = ok(gm(home.path(), &["install"]));
    assert_eq!(report["changed"], true);
    assert_eq!(report["file"], claude_json(home.path()).to_str().unwrap());
    assert_eq!(report["command"], this_gm());
    let want = json!({ "mcpServers": { "gm": { "command": this_gm(), "args": ["serve"] } } });
    assert_eq!(read_json(&claude_json(home.path())), want);
}

#[test]
fn other_servers_and_unknown_keys_keep_their_text_and_order() {
    let home = tempfile::tempdir().unwrap();
    fs::write(claude_json(home.path()), CONFIG).unwrap();
    ok(gm(home.path(), &["install"]));
    let gm_entry = format!(
        ",\n    \"gm\": {{\n      \"command\": {},\n      \"args\": [\n        \"serve\"\n      ]\n    }}\n  }},\n  \"projects\"",
        json!(this_gm())
    );
    let want = CONFIG.replacen("\n  },\n  \"projects\"", &gm_entry, 1);
    assert_eq!(fs::read_to_string(claude_json(home.path())).unwrap(), want);
}

#[test]
fn an_earlier_gm_entry_is_replaced_where_it_stands() {
    let home = tempfile::tempdir().unwrap();
    let old = r#"{"mcpServers": {"a": {"command": "a"}, "gm": {"command": "node", "args": ["/old/relay.mjs"]}, "b": {"command": "b"}}}"#;
    fs::write(claude_json(home.path()), old).unwrap();
    let report = ok(gm(home.path(), &["install"]));
    assert_eq!(report["changed"], true);
    let text = fs::read_to_string(claude_json(home.path())).unwrap();
    let servers = ["\"a\"", "\"gm\"", "\"b\""].map(|k| text.find(k).unwrap());
    assert!(servers[0] < servers[1] && servers[1] < servers[2], "order kept: {text}");
    assert_eq!(
        read_json(&claude_json(home.path()))["mcpServers"]["gm"],
        json!({"command": this_gm(), "args": ["serve"]})
    );
}

#[test]
fn the_users_env_type_and_timeout_in_the_gm_entry_are_kept_in_their_text_and_place() {
    let home = tempfile::tempdir().unwrap();
    let old = r#"{
  "mcpServers": {
    "gm": {
      "type": "stdio",
      "command": "/old/gm",
      "args": ["serve", "--old-flag"],
      "env": {"GMNEW_AUTO_UPDATE": "0",   "K": "v"},
      "timeout": 120000
    }
  }
}
"#;
    fs::write(claude_json(home.path()), old).unwrap();
    assert_eq!(ok(gm(home.path(), &["install"]))["changed"], true);
    let want = old
        .replace("\"/old/gm\"", &json!(this_gm()).to_string())
        .replace("[\"serve\", \"--old-flag\"]", "[\n        \"serve\"\n      ]");
    assert_eq!(fs::read_to_string(claude_json(home.path())).unwrap(), want);

    // Installed again: command and args already say so, nothing is written.
    let before = fs::read(claude_json(home.path())).unwrap();
    assert_eq!(ok(gm(home.path(), &["install"]))["changed"], false);
    assert_eq!(fs::read(claude_json(home.path())).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn a_gm_run_from_a_staged_version_registers_current_not_the_version_folder() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join(".gmnew");
    let version_dir = root.join("versions").join(VERSION);
    fs::create_dir_all(&version_dir).unwrap();
    let staged = version_dir.join("gm");
    // A hard link where the file system allows it: the binary is large.
    fs::hard_link(common::gm_bin(), &staged).or_else(|_| fs::copy(common::gm_bin(), &staged).map(drop)).unwrap();
    std::os::unix::fs::symlink(Path::new("versions").join(VERSION), root.join("current")).unwrap();

    // The host starts ~/.gmnew/current/gm; the process runs the resolved versions/<v>/gm.
    let out = Command::new(root.join("current/gm"))
        .arg("install")
        .env("HOME", home.path())
        .env_remove("GM_SKILLS_DIR")
        .env_remove("GM_DEFAULTS_DIR")
        .current_dir(home.path())
        .output()
        .unwrap();
    let report = ok(out);
    let current = root.join("current/gm").to_str().unwrap().to_owned();
    assert_eq!(report["command"], current);
    assert_eq!(read_json(&claude_json(home.path()))["mcpServers"]["gm"]["command"], current);
}

#[test]
fn a_config_that_is_not_a_json_object_is_refused_and_left_as_it_was() {
    for text in ["[1, 2]\n", "{\"mcpServers\": ", "{\"mcpServers\": [\"gm\"]}"] {
        let home = tempfile::tempdir().unwrap();
        fs::write(claude_json(home.path()), text).unwrap();
        let out = gm(home.path(), &["install"]);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(stderr(&out).contains("refused"), "{text:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty());
        assert_eq!(fs::read_to_string(claude_json(home.path())).unwrap(), text);
        assert_eq!(fs::read_dir(home.path()).unwrap().count(), 1, "no temporary file is left");
    }
}

#[test]
fn an_unknown_flag_is_an_error_and_nothing_is_written() {
    let home = tempfile::tempdir().unwrap();
    let out = gm(home.path(), &["install", "--global"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!claude_json(home.path()).exists(), "no config is created");
    fs::write(claude_json(home.path()), CONFIG).unwrap();
    let out = gm(home.path(), &["install", "--config", claude_json(home.path()).to_str().unwrap(), "extra"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read_to_string(claude_json(home.path())).unwrap(), CONFIG);
}

#[test]
fn a_second_identical_install_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("elsewhere.json");
    ok(gm(home.path(), &["install", "--config", config.to_str().unwrap()]));
    // An old time, so that a rewrite in the same clock tick would still show.
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options().write(true).open(&config).unwrap().set_modified(old).unwrap();
    let before = fs::read(&config).unwrap();
    let report = ok(gm(home.path(), &["install", "--config", config.to_str().unwrap()]));
    assert_eq!(report["changed"], false);
    assert_eq!(fs::metadata(&config).unwrap().modified().unwrap(), old);
    assert_eq!(fs::read(&config).unwrap(), before);
    assert!(!claude_json(home.path()).exists(), "--config names the only file written");
}

#[test]
fn mcp_config_is_appended_to_the_args_as_an_absolute_path() {
    let home = tempfile::tempdir().unwrap();
    fs::write(home.path().join("servers.json"), r#"{"mcpServers": {}}"#).unwrap();
    let report = ok(gm(home.path(), &["install", "--mcp-config", "servers.json"]));
    let abs = home.path().join("servers.json").to_str().unwrap().to_owned();
    assert_eq!(report["args"], json!(["serve", "--mcp-config", abs]));
    assert_eq!(read_json(&claude_json(home.path()))["mcpServers"]["gm"]["args"], json!(["serve", "--mcp-config", abs]));
}

#[test]
fn a_missing_mcp_config_is_an_error_and_nothing_is_written() {
    let home = tempfile::tempdir().unwrap();
    let out = gm(home.path(), &["install", "--mcp-config", "nowhere.json"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nowhere.json"), "{}", stderr(&out));
    assert!(!claude_json(home.path()).exists());
}

#[test]
fn uninstall_removes_only_the_gm_entry() {
    let home = tempfile::tempdir().unwrap();
    fs::write(claude_json(home.path()), CONFIG).unwrap();
    ok(gm(home.path(), &["install"]));
    let report = ok(gm(home.path(), &["uninstall"]));
    assert_eq!(report["changed"], true);
    assert_eq!(fs::read_to_string(claude_json(home.path())).unwrap(), CONFIG);

    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options().write(true).open(claude_json(home.path())).unwrap().set_modified(old).unwrap();
    let report = ok(gm(home.path(), &["uninstall"]));
    assert_eq!(report["changed"], false);
    assert_eq!(fs::metadata(claude_json(home.path())).unwrap().modified().unwrap(), old);
}

#[test]
fn uninstall_without_a_config_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(ok(gm(home.path(), &["uninstall"]))["changed"], false);
    assert!(!claude_json(home.path()).exists());
}

/// The sections of an ELF file, from `readelf -S`.
#[cfg(target_os = "linux")]
fn sections(path: &Path) -> String {
    let out = Command::new("readelf").arg("-SW").arg(path).output().expect("readelf (binutils)");
    assert!(out.status.success(), "readelf {}: {}", path.display(), stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn unpack(archive: &Path, into: &Path) {
    let gz = flate2::read::GzDecoder::new(fs::File::open(archive).unwrap());
    tar::Archive::new(gz).unpack(into).unwrap();
}

/// A new minisign key pair: the public key's base64 line and the secret key file.
fn signing_key(dir: &Path) -> (String, PathBuf) {
    let kp = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    let file = dir.join("release.key");
    fs::write(&file, kp.sk.to_box(None).unwrap().to_string()).unwrap();
    (kp.pk.to_base64(), file)
}

#[test]
fn dist_with_a_key_that_cannot_sign_packages_nothing() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("dist");
    fs::write(home.path().join("not-a-key"), "untrusted comment: x\nAAAA\n").unwrap();
    for key in ["not-a-key", "missing.key"] {
        let run = gm(home.path(), &["dist", "--out", out.to_str().unwrap(), "--sign", key]);
        assert!(!run.status.success(), "{key} was taken");
        assert!(stderr(&run).contains("nothing was packaged"), "{}", stderr(&run));
        assert!(!out.exists(), "nothing was written");
    }
}

#[test]
fn a_dist_archive_installs_with_local_and_the_registered_command_serves() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("dist");
    let (public, key) = signing_key(home.path());
    let report = ok(gm(home.path(), &["dist", "--out", out.to_str().unwrap(), "--sign", key.to_str().unwrap()]));
    let stem = format!("gmnew-{VERSION}-{TARGET}");
    let archive = out.join(format!("{stem}.tar.gz"));
    assert_eq!(report["archive"], archive.to_str().unwrap());

    // The manifest names the archive with its checksum, size and signature.
    let manifest = read_json(&out.join("manifest.json"));
    assert_eq!(manifest["version"], VERSION);
    let entry = &manifest["targets"][TARGET];
    assert_eq!(entry["archive"], format!("{stem}.tar.gz"));
    assert_eq!(entry["size"], fs::metadata(&archive).unwrap().len());
    assert_eq!(entry["sha256"], gm_actors::builds::sha256_file(&archive).unwrap());

    // The signature is beside the archive and in its entry, and the updater's check takes it
    // with this key (a test key: not one of the release keys compiled in).
    let minisig = out.join(format!("{stem}.tar.gz.minisig"));
    assert_eq!(report["signature"]["file"], minisig.to_str().unwrap());
    assert_eq!(report["signature"]["releaseKey"], false);
    let signature = fs::read_to_string(&minisig).unwrap();
    assert_eq!(entry["signature"], signature.as_str());
    assert!(signature.contains(&format!("file:{stem}.tar.gz")), "{signature}");
    let keys = gm_actors::updater::TrustedKeys::only(&[&public]).unwrap();
    keys.verify_file(&archive, Some(&signature)).expect("the signature verifies");
    let other = gm_actors::updater::TrustedKeys::release();
    assert!(other.verify_file(&archive, Some(&signature)).is_err(), "the release keys do not take a test key's");

    // One top folder holding the whole build.
    let unpacked = home.path().join("unpacked");
    unpack(&archive, &unpacked);
    let tops: Vec<_> = fs::read_dir(&unpacked).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(tops, [stem.as_str()]);
    let build = unpacked.join(&stem);
    for part in ["gm", "skills/gm/SKILL.md", "defaults/mcp.json", "README.md", "LICENSE"] {
        assert!(build.join(part).is_file(), "{part} is missing from the archive");
    }
    assert_eq!(read_json(&build.join("build.json")), json!({"version": VERSION, "target": TARGET, "release": true}));

    // The binary lost its debug info, which is kept beside the archive.
    let binary = build.join("gm");
    assert!(fs::metadata(&binary).unwrap().len() < fs::metadata(common::gm_bin()).unwrap().len());
    #[cfg(target_os = "linux")]
    {
        assert!(!sections(&binary).contains(".debug_info"), "the archived binary still has .debug_info");
        assert!(sections(&out.join(format!("{stem}.debug"))).contains(".debug_info"));
    }

    // Installed from the unpacked archive: the build is staged and current/gm registered.
    let report = ok(gm(home.path(), &["install", "--local", build.to_str().unwrap()]));
    let current = home.path().join(".gmnew/current/gm");
    assert!(current.is_file());
    assert_eq!(report["command"], current.to_str().unwrap());
    assert_eq!(report["staged"]["version"], VERSION);
    let registered = &read_json(&claude_json(home.path()))["mcpServers"]["gm"];
    assert_eq!(registered["command"], current.to_str().unwrap());

    // The host's start of gm: the registered command and args, speaking MCP on stdio.
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(registered["command"].as_str().unwrap());
    let args: Vec<&str> = registered["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    cmd.args(args)
        .current_dir(workspace.path())
        .env("HOME", home.path())
        .env("GM_DEFAULTS_DIR", common::no_child_servers())
        .env_remove("GM_SKILLS_DIR");
    let mut client = StdioClient::spawn(cmd, Stderr::Inherit).unwrap();
    let init = json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "install-test", "version": "0" } });
    let reply = client.request("initialize", init, Some(common::TIMEOUT)).unwrap();
    assert_eq!(reply["result"]["serverInfo"]["version"], VERSION, "{reply}");
}

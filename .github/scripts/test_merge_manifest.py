"""Tests of merge_manifest.py: python3 -m unittest discover -s .github/scripts"""

import contextlib
import hashlib
import io
import json
import os
import tempfile
import unittest

import merge_manifest as mm

LINUX = "x86_64-unknown-linux-gnu"
MAC = "aarch64-apple-darwin"
WINDOWS = "x86_64-pc-windows-msvc"


def entry(version, target, data=b"", signature="untrusted comment: x\nRUQ=\ntrusted comment: y\nAA==\n"):
    e = {"version": version, "archive": f"gmnew-{version}-{target}.tar.gz",
         "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    if signature:
        e["signature"] = signature
    return e


class Artifacts:
    """A folder laid out as download-artifact leaves it: one folder per target's dist."""

    def __init__(self, test):
        tmp = tempfile.TemporaryDirectory()
        test.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def add(self, version, target, data=b"archive", write_archive=True, manifest_entry=None):
        folder = os.path.join(self.dir, f"dist-{target}")
        os.makedirs(folder)
        e = manifest_entry or entry(version, target, data)
        if write_archive:
            with open(os.path.join(folder, e["archive"]), "wb") as f:
                f.write(data)
        with open(os.path.join(folder, "manifest.json"), "w") as f:
            json.dump({"version": version, "targets": {target: e}}, f)


class Merge(unittest.TestCase):
    def test_a_target_that_built_replaces_its_entry_and_a_failed_one_keeps_its_old_entry(self):
        old = {"version": "0.1.0", "channel": "stable",
               "targets": {LINUX: entry("0.1.0", LINUX), MAC: entry("0.1.0", MAC)}}
        arts = Artifacts(self)
        arts.add("0.2.0", LINUX)
        merged = mm.merge(old, mm.built_entries(arts.dir))
        self.assertEqual(merged["version"], "0.2.0")
        self.assertEqual(merged["targets"][LINUX]["version"], "0.2.0")
        self.assertEqual(merged["targets"][MAC], old["targets"][MAC])
        self.assertEqual(merged["channel"], "stable")

    def test_an_archive_missing_or_not_matching_its_entry_counts_as_failed(self):
        arts = Artifacts(self)
        arts.add("0.2.0", LINUX, write_archive=False)
        arts.add("0.2.0", MAC, manifest_entry=entry("0.2.0", MAC, b"other bytes"))
        self.assertEqual(mm.built_entries(arts.dir), {})

    def test_an_unsigned_archive_counts_as_failed(self):
        arts = Artifacts(self)
        arts.add("0.2.0", LINUX, manifest_entry=entry("0.2.0", LINUX, b"archive", signature=None))
        self.assertEqual(mm.built_entries(arts.dir), {})

    def test_the_top_version_is_the_highest_semver_not_the_highest_text(self):
        old = {"version": "0.9.0", "targets": {MAC: entry("0.9.0", MAC)}}
        merged = mm.merge(old, {LINUX: entry("0.10.0", LINUX)})
        self.assertEqual(merged["version"], "0.10.0")
        self.assertLess(mm.version_key("1.0.0-rc.2"), mm.version_key("1.0.0-rc.10"))
        self.assertLess(mm.version_key("1.0.0-rc.1"), mm.version_key("1.0.0"))

    def test_the_command_writes_the_manifest_the_summary_and_the_count(self):
        arts = Artifacts(self)
        arts.add("0.2.0", LINUX)
        with tempfile.TemporaryDirectory() as tmp:
            old = os.path.join(tmp, "missing.json")
            out, summary, output = (os.path.join(tmp, n) for n in ("m/manifest.json", "summary.md", "output"))
            with contextlib.redirect_stdout(io.StringIO()):
                mm.main(["merge", "--old", old, "--artifacts", arts.dir, "--targets", f"{LINUX} {WINDOWS}",
                         "--out", out, "--summary", summary, "--github-output", output])
            with open(out) as f:
                self.assertEqual(list(json.load(f)["targets"]), [LINUX])
            with open(summary) as f:
                text = f.read()
            self.assertIn(f"{WINDOWS}: **failed**, has no build", text)
            self.assertIn(f"Failed targets: {WINDOWS}", text)
            with open(output) as f:
                self.assertEqual(f.read(), "built=1\n")


class Prune(unittest.TestCase):
    def test_versions_older_than_the_newest_three_go_unless_the_manifest_names_them(self):
        names = ["manifest.json"]
        for v in ["0.1.0", "0.2.0", "0.3.0", "0.10.0", "1.0.0-rc.1"]:
            for t in [LINUX, MAC]:
                names += [f"gmnew-{v}-{t}.tar.gz", f"gmnew-{v}-{t}.tar.gz.minisig", f"gmnew-{v}-{t}.debug"]
        # The Mac build failed since 0.1.0: its archive stays, whatever its age.
        manifest = {"version": "1.0.0-rc.1",
                    "targets": {LINUX: entry("1.0.0-rc.1", LINUX), MAC: entry("0.1.0", MAC)}}
        gone = mm.to_delete(names, manifest, 3)
        self.assertEqual(sorted(gone), sorted([
            f"gmnew-0.1.0-{LINUX}.tar.gz", f"gmnew-0.1.0-{LINUX}.tar.gz.minisig", f"gmnew-0.1.0-{LINUX}.debug",
            f"gmnew-0.2.0-{LINUX}.tar.gz", f"gmnew-0.2.0-{LINUX}.tar.gz.minisig", f"gmnew-0.2.0-{LINUX}.debug",
            f"gmnew-0.2.0-{MAC}.tar.gz", f"gmnew-0.2.0-{MAC}.tar.gz.minisig", f"gmnew-0.2.0-{MAC}.debug",
        ]))

    def test_a_version_with_a_dash_is_read_whole(self):
        m = mm.ASSET.match(f"gmnew-1.0.0-rc.1-{WINDOWS}.tar.gz")
        self.assertEqual((m["version"], m["target"]), ("1.0.0-rc.1", WINDOWS))


if __name__ == "__main__":
    unittest.main()

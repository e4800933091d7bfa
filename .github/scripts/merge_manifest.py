#!/usr/bin/env python3
"""The release's manifest.json, put together from the targets that built.

merge: the manifest on the release (when there is one) updated with the entries of the targets
       whose `gm dist` artifact arrived; a target that failed keeps the entry it had, so its
       users keep the build they have. Writes the failed targets into the run's summary.
prune: reads the release's asset names on stdin and prints those to delete: archives and debug
       files of versions older than the newest KEEP, except any the manifest still names.

Each artifact folder holds what `gm dist --out --sign` wrote: manifest.json (with its one
target, its entry carrying the archive's minisign `signature`), gmnew-<version>-<target>.tar.gz,
its .minisig and gmnew-<version>-<target>.debug. An entry without a signature is never published:
every gm's updater refuses an unsigned archive.
"""

import argparse
import hashlib
import json
import os
import re
import sys

ASSET = re.compile(r"^gmnew-(?P<version>.+?)-(?P<target>(?:x86_64|aarch64|i686|armv7|riscv64gc)-[A-Za-z0-9_-]+)"
                   r"\.(?:tar\.gz(?:\.minisig)?|zip|debug)$")


def version_key(version):
    """Orders versions the way gm does (src/dist/manifest.rs): numeric parts as numbers, a
    pre-release below its release, build metadata ignored."""
    version = version.split("+", 1)[0]
    core, _, pre = version.partition("-")

    def parts(s):
        # Numbers sort before words, as in semver.
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in s.split("."))

    # A release sorts after its pre-releases.
    return (parts(core), (1,) if not pre else (0, parts(pre)))


def newest(versions):
    return max(versions, key=version_key)


def load(path):
    """The manifest at path, or an empty one when there is none or it cannot be read."""
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return {"version": "0.0.0", "targets": {}}
    except (OSError, ValueError) as e:
        print(f"warning: {path} is not a manifest ({e}); starting a new one", file=sys.stderr)
        return {"version": "0.0.0", "targets": {}}
    if not isinstance(manifest, dict) or not isinstance(manifest.get("targets"), dict):
        print(f"warning: {path} is not a manifest; starting a new one", file=sys.stderr)
        return {"version": "0.0.0", "targets": {}}
    return manifest


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def built_entries(artifacts):
    """{target: entry} of every artifact whose archive is there, matches its entry and is signed."""
    built = {}
    if not os.path.isdir(artifacts):
        return built
    for folder in sorted(os.listdir(artifacts)):
        path = os.path.join(artifacts, folder, "manifest.json")
        if not os.path.isfile(path):
            continue
        for target, entry in load(path)["targets"].items():
            archive = os.path.join(artifacts, folder, entry.get("archive", ""))
            if not os.path.isfile(archive):
                print(f"warning: {target}: {archive} is missing; treated as failed", file=sys.stderr)
            elif os.path.getsize(archive) != entry.get("size") or sha256(archive) != entry.get("sha256"):
                print(f"warning: {target}: {archive} does not match its entry; treated as failed", file=sys.stderr)
            elif not entry.get("signature"):
                print(f"warning: {target}: {archive} is not signed; treated as failed", file=sys.stderr)
            else:
                built[target] = entry
    return built


def merge(old, built):
    """The old manifest with the built targets' entries set; the top version is the highest."""
    targets = dict(old.get("targets", {}))
    targets.update(built)
    merged = {k: v for k, v in old.items() if k not in ("version", "targets")}
    versions = [e["version"] for e in targets.values() if "version" in e]
    merged["version"] = newest(versions) if versions else old.get("version", "0.0.0")
    merged["targets"] = dict(sorted(targets.items()))
    return merged


def summary(expected, built, merged):
    lines = ["## Release", ""]
    for target in expected:
        if target in built:
            lines.append(f"- {target}: published {built[target]['version']}")
        else:
            kept = merged["targets"].get(target, {}).get("version")
            lines.append(f"- {target}: **failed**, " + (f"keeps {kept}" if kept else "has no build"))
    failed = [t for t in expected if t not in built]
    lines += ["", f"Failed targets: {', '.join(failed)}" if failed else "Every target built."]
    return "\n".join(lines) + "\n"


def to_delete(names, manifest, keep):
    """The assets of versions older than the newest `keep`, except those the manifest names."""
    named = set()
    for entry in manifest.get("targets", {}).values():
        archive = entry.get("archive", "")
        named.add(archive)
        named.add(f"{archive}.minisig")
        m = ASSET.match(archive)
        if m:
            named.add(f"gmnew-{m['version']}-{m['target']}.debug")
    versions = {m["version"] for m in map(ASSET.match, names) if m}
    kept = set(sorted(versions, key=version_key, reverse=True)[:keep])
    out = []
    for name in names:
        m = ASSET.match(name)
        if m and m["version"] not in kept and name not in named:
            out.append(name)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge")
    m.add_argument("--old", required=True, help="the release's manifest.json (may be missing)")
    m.add_argument("--artifacts", required=True, help="the folder the build artifacts were downloaded into")
    m.add_argument("--targets", required=True, help="every target the release builds, space-separated")
    m.add_argument("--out", required=True, help="where the merged manifest.json goes")
    m.add_argument("--summary", help="a file the summary is appended to ($GITHUB_STEP_SUMMARY)")
    m.add_argument("--github-output", help="a file `built=<n>` is appended to ($GITHUB_OUTPUT)")
    p = sub.add_parser("prune")
    p.add_argument("--manifest", required=True, help="the manifest just published")
    p.add_argument("--keep", type=int, default=3, help="how many of the newest versions stay")
    args = parser.parse_args(argv)

    if args.command == "merge":
        expected = args.targets.split()
        built = built_entries(args.artifacts)
        merged = merge(load(args.old), built)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(merged, f, indent=2)
            f.write("\n")
        text = summary(expected, built, merged)
        print(text, end="")
        if args.summary:
            with open(args.summary, "a") as f:
                f.write(text)
        if args.github_output:
            with open(args.github_output, "a") as f:
                f.write(f"built={len(built)}\n")
    else:
        names = [line.strip() for line in sys.stdin if line.strip()]
        for name in to_delete(names, load(args.manifest), args.keep):
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

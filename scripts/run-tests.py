#!/usr/bin/env python3
"""Runs the test binaries a `cargo test --no-run --message-format=json` build made (its output
on stdin), one after another as `cargo test` would: each in its package's directory, with the
variables cargo sets for it. Unlike `cargo test`, it holds no lock on the build directory, so
scripts/test builds other things (niced) while the tests run; and it runs every binary even
after one failed, then names the failed ones. Arguments after the binaries' own go to each
(`-- --nocapture`). Exit status: 0 if every binary passed.
"""
import json
import os
import subprocess
import sys
import time


def binaries(lines):
    """The test executables in the build's output, in cargo's order, with their packages."""
    seen = set()
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact":
            continue
        executable = message.get("executable")
        if not executable or not message.get("profile", {}).get("test"):
            continue
        if executable in seen:
            continue
        seen.add(executable)
        package_id = message["package_id"]
        manifest = message["manifest_path"]
        target = message["target"]
        yield package_id, manifest, target, executable


def package_name(manifest):
    """The package's name, as its manifest says."""
    with open(manifest, encoding="utf-8") as f:
        in_package = False
        for line in f:
            line = line.strip()
            if line.startswith("["):
                in_package = line == "[package]"
            elif in_package and line.startswith("name"):
                return line.split("=", 1)[1].strip().strip('"')
    return os.path.basename(os.path.dirname(manifest))


def main():
    extra = sys.argv[1:]
    runs = list(binaries(sys.stdin))
    if not runs:
        print("scripts/run-tests.py: no test binaries in the build's output", file=sys.stderr)
        return 1
    failed = []
    started = time.monotonic()
    for _package_id, manifest, target, executable in runs:
        directory = os.path.dirname(manifest)
        name = package_name(manifest)
        kind = target.get("kind", ["?"])[0]
        label = f"{name} {kind} {target.get('name')}"
        print(f"     Running {label} ({os.path.relpath(executable)})", flush=True)
        env = dict(os.environ)
        env.update(
            {
                "CARGO_MANIFEST_DIR": directory,
                "CARGO_PKG_NAME": name,
                "CARGO_CRATE_NAME": target.get("name", name).replace("-", "_"),
            }
        )
        status = subprocess.call([executable, *extra], cwd=directory, env=env)
        if status != 0:
            failed.append(label)
    took = time.monotonic() - started
    if failed:
        print(f"scripts/run-tests.py: {len(failed)} of {len(runs)} test binaries failed "
              f"({took:.0f} s):", file=sys.stderr)
        for label in failed:
            print(f"  {label}", file=sys.stderr)
        return 1
    print(f"scripts/run-tests.py: {len(runs)} test binaries passed ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs the test binaries a `cargo test --no-run --message-format=json` build made (its output
on stdin), as `cargo test` would: each in its package's directory, with the variables cargo sets
for it. Unlike `cargo test`, it holds no lock on the build directory, so scripts/test builds
other things (niced) while the tests run; and it runs every binary even after one failed, then
names the failed ones. Arguments after the binaries' own go to each (`-- --nocapture`). Exit
status: 0 if every binary passed. `--only REGEX` runs only the binaries whose label (package, kind
and name, e.g. `zkfence-cli test tls`) the regular expression finds; `--skip REGEX` all others:
scripts/test runs two lanes of them side by side, the stores' and ZooKeeper's.

The binaries run one after another, but for the lease model's searches (SIDE), which need a
CPU and no clock: they run beside the others, one after another too, at the lowest CPU
priority, so that they take only what the timed tests leave idle (as the builds beside them
do). Each binary's output is printed whole when it ends. Two binaries that time leases never
run at once (tried 2026-11-29: under load a bench's lease lapsed and a test's race showed);
scripts/test runs the stores' binaries, which time none, in a second lane beside them.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# The binaries that need a CPU and no clock: the lease and queue models' searches (about 100 s
# of the 443 s the binaries took one after another, 2026-11-29).
SIDE = ["zkfence-model test check", "zkfence-model test queue"]


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


def label_of(manifest, target):
    """What the run calls a binary: its package, its kind and its name."""
    kind = target.get("kind", ["?"])[0]
    return f"{package_name(manifest)} {kind} {target.get('name')}"


def start(manifest, target, executable, extra, niced):
    """Starts one binary (at the lowest CPU priority if `niced`), its output to a file of its
    own; the process and the file."""
    directory = os.path.dirname(manifest)
    name = package_name(manifest)
    env = dict(os.environ)
    env.update(
        {
            "CARGO_MANIFEST_DIR": directory,
            "CARGO_PKG_NAME": name,
            "CARGO_CRATE_NAME": target.get("name", name).replace("-", "_"),
        }
    )
    out = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [executable, *extra], cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT,
        preexec_fn=(lambda: os.nice(19)) if niced else None,
    )
    return process, out


def chosen(args):
    """`--only REGEX` and `--skip REGEX` taken out of `args`: a test of a label, and the rest."""
    only, skip, rest = None, None, []
    args = iter(args)
    for arg in args:
        if arg in ("--only", "--skip"):
            pattern = re.compile(next(args))
            if arg == "--only":
                only = pattern
            else:
                skip = pattern
        else:
            rest.append(arg)

    def wanted(label):
        return (only is None or only.search(label)) and not (skip and skip.search(label))

    return wanted, rest


def main():
    wanted, extra = chosen(sys.argv[1:])
    runs = [r for r in binaries(sys.stdin) if wanted(label_of(r[1], r[2]))]
    if not runs:
        print("scripts/run-tests.py: no test binaries in the build's output", file=sys.stderr)
        return 1
    lanes = {False: [], True: []}
    for _package_id, manifest, target, executable in runs:
        label = label_of(manifest, target)
        lanes[label in SIDE].append((label, manifest, target, executable))
    failed = []
    started = time.monotonic()
    running = {}
    while any(lanes.values()) or running:
        for side, queue in lanes.items():
            if queue and side not in running:
                label, manifest, target, executable = queue.pop(0)
                process, out = start(manifest, target, executable, extra, side)
                running[side] = (label, executable, process, out, time.monotonic())
        time.sleep(0.05)
        for side, run in [(k, r) for k, r in running.items() if r[2].poll() is not None]:
            del running[side]
            label, executable, process, out, began = run
            out.seek(0)
            print(f"     Running {label} ({os.path.relpath(executable)}), "
                  f"{time.monotonic() - began:.0f} s{', niced' if side else ''}", flush=True)
            sys.stdout.buffer.write(out.read())
            sys.stdout.flush()
            out.close()
            if process.returncode != 0:
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

"""Acquire/release cycles per second from Python: zkfence's FencedLock against the Rust
library (zkfence-bench, the same cycle) and kazoo's Lock, on one ZooKeeper, interleaved in
rounds; per contention level, the per-round ratios' median and range.

Run by scripts/bench-python (which builds what it needs and starts a throwaway ZooKeeper):
    python cycles.py HOSTS ZKFENCE_BENCH [--rounds 5] [--seconds 3] [--contenders 1,4]
Each contender has a session of its own and runs `acquire; release` back to back on one lock
path (fresh per run); Python's contenders are threads of one process, as the Rust bench's are
tasks of one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
import uuid
from typing import Callable, Dict, List

import zkfence


def run_threads(contenders: int, seconds: float, make: Callable[[], Callable[[], None]]) -> float:
    """`contenders` threads each running its cycle (from `make`, set up before the clock
    starts) for `seconds`; cycles per second of them all."""
    cycles = [make() for _ in range(contenders)]
    counts = [0] * contenders
    start = threading.Barrier(contenders + 1)
    stop_at: List[float] = [0.0]

    def loop(i: int) -> None:
        start.wait()
        while time.monotonic() < stop_at[0]:
            cycles[i]()
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    began = time.monotonic()
    stop_at[0] = began + seconds
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - began)


def python_zkfence(hosts: str, contenders: int, seconds: float) -> float:
    path = f"/bench-python/zkfence-{uuid.uuid4().hex[:8]}"

    def make() -> Callable[[], None]:
        lock = zkfence.FencedLock(zkfence.connect(hosts, session_timeout=10.0), path)

        def cycle() -> None:
            with lock.acquire():
                pass

        return cycle

    return run_threads(contenders, seconds, make)


def kazoo_lock(hosts: str, contenders: int, seconds: float) -> float:
    from kazoo.client import KazooClient

    path = f"/bench-python/kazoo-{uuid.uuid4().hex[:8]}"
    clients = []

    def make() -> Callable[[], None]:
        client = KazooClient(hosts=hosts, timeout=10.0)
        client.start(timeout=15)
        clients.append(client)
        lock = client.Lock(path)

        def cycle() -> None:
            with lock:
                pass

        return cycle

    try:
        return run_threads(contenders, seconds, make)
    finally:
        for client in clients:
            client.stop()
            client.close()


def rust(bench: str, hosts: str, contenders: int, seconds: float) -> float:
    mode = "uncontended" if contenders == 1 else "contended"
    out = subprocess.run(
        [bench, "--connect", hosts, "--mode", mode, "--contenders", str(contenders),
         "--seconds", str(seconds), "--lock", f"/bench-python/rust-{uuid.uuid4().hex[:8]}"],
        check=True, capture_output=True, text=True,
    ).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    return float(json.loads(line)["acq_per_s"])


def spread(values: List[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("hosts")
    parser.add_argument("bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--contenders", default="1,4")
    args = parser.parse_args()
    levels = [int(c) for c in args.contenders.split(",")]
    sides: Dict[str, Callable[[int], float]] = {
        "rust": lambda n: rust(args.bench, args.hosts, n, args.seconds),
        "python": lambda n: python_zkfence(args.hosts, n, args.seconds),
        "kazoo": lambda n: kazoo_lock(args.hosts, n, args.seconds),
    }
    results: Dict[int, List[Dict[str, float]]] = {n: [] for n in levels}
    for r in range(args.rounds):
        for n in levels:
            order = list(sides)
            order = order[r % len(order):] + order[: r % len(order)]
            measured = {name: sides[name](n) for name in order}
            results[n].append(measured)
            print(json.dumps({"round": r + 1, "contenders": n, **{k: round(v, 1) for k, v in measured.items()}}), flush=True)
    print(f"\ncycles/s from Python, {args.rounds} rounds of {args.seconds} s (per-round ratios: median (min–max)):")
    for n in levels:
        rounds = results[n]
        med = {k: statistics.median(r[k] for r in rounds) for k in sides}
        print(
            f"{n} contender{'s' if n > 1 else ''}: zkfence (Python) {med['python']:,.0f}/s, Rust {med['rust']:,.0f}/s, "
            f"kazoo {med['kazoo']:,.0f}/s; Python ÷ Rust {spread([r['python'] / r['rust'] for r in rounds])}, "
            f"Python ÷ kazoo {spread([r['python'] / r['kazoo'] for r in rounds])}"
        )


if __name__ == "__main__":
    main()

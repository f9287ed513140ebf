"""Soak run: trains Isaac-Cartpole-Direct for a long time and records, over time, the resident memory of the
main process and of each collector worker, the number of open file descriptors and the iteration time
(a benchmark, not a test).

    python benchmarks/soak.py --minutes 30 [--num_envs 64] [--device cpu] [--json soak.json]

At the end it stops training with SIGINT (the graceful path: the current update finishes and is saved) and
prints, per process, the memory at the start and the end of the measured window and the least-squares slope
in MiB per hour; the first ``--warmup_minutes`` are left out of the slope (allocator and caches settle).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITERATION_LINE = re.compile(r"\[torchrl\] it +(\d+)/\d+ .*\(collect ([\d.]+)s, learn ([\d.]+)s\)")


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per hour."""
    n = len(samples)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in samples)
    return 3600.0 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var_t if var_t else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup_minutes", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=10.0, help="Seconds between samples.")
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="soak_")
    env = dict(os.environ)
    env.setdefault("ISAACSIM_ASSET_ROOT", os.path.join(REPO, "source", "isaaclab_torchrl", "offline_assets"))
    env.pop("ISAACLAB_TORCHRL_OFFLINE_ASSETS", None)
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, os.path.join(REPO, "scripts", "train.py"), "--task", "Isaac-Cartpole-Direct"]
    command += ["--num_envs", str(args.num_envs), "--device", args.device, "--viz", "none"]
    command += ["--max_iterations", "10000000", "physics=newton_mjwarp"]
    train = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    iterations: list[tuple[float, int, float]] = []  # (seconds, iteration, collect + learn seconds)
    log_lines: list[str] = []

    def read_output() -> None:
        for line in train.stdout:
            log_lines.append(line)
            match = ITERATION_LINE.search(line)
            if match:
                seconds = time.monotonic() - start
                iterations.append((seconds, int(match[1]), float(match[2]) + float(match[3])))

    start = time.monotonic()
    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    samples = []  # {"t", "main_rss", "workers_rss": [...], "fds": total}
    main_process = psutil.Process(train.pid)
    while time.monotonic() - start < args.minutes * 60 and train.poll() is None:
        time.sleep(args.interval)
        try:
            children = main_process.children(recursive=True)
            sample = {
                "t": time.monotonic() - start,
                "main_rss_mib": main_process.memory_info().rss / 2**20,
                "children": {child.pid: child.memory_info().rss / 2**20 for child in children},
                "fds": main_process.num_fds() + sum(child.num_fds() for child in children),
                "iteration": iterations[-1][1] if iterations else 0,
            }
        except psutil.Error:
            continue
        samples.append(sample)

    still_running = train.poll() is None
    if still_running:
        train.send_signal(signal.SIGINT)
    try:
        returncode = train.wait(timeout=300)
    except subprocess.TimeoutExpired:
        train.kill()
        returncode = "killed after 300 s"
    reader.join(timeout=10)

    window = [s for s in samples if s["t"] >= args.warmup_minutes * 60]
    report = {"workdir": workdir, "returncode": returncode, "stopped_by_soak": still_running, "processes": {}}
    report["processes"]["main"] = [(s["t"], s["main_rss_mib"]) for s in window]
    for pid in sorted({pid for s in window for pid in s["children"]}):
        report["processes"][f"child {pid}"] = [(s["t"], s["children"][pid]) for s in window if pid in s["children"]]
    print(f"soak: {len(samples)} samples over {samples[-1]['t'] / 60 if samples else 0:.1f} min, exit {returncode}")
    for name, series in report["processes"].items():
        if series:
            print(
                f"  {name:>14}: RSS {series[0][1]:8.1f} -> {series[-1][1]:8.1f} MiB, "
                f"slope {slope_per_hour(series):+7.2f} MiB/h"
            )
    fds = [(s["t"], s["fds"]) for s in window]
    if fds:
        print(f"  open fds: {fds[0][1]} -> {fds[-1][1]} (slope {slope_per_hour(fds):+.2f}/h)")
    measured = [(t, seconds) for t, _, seconds in iterations if t >= args.warmup_minutes * 60]
    if measured:
        first_half = [s for t, s in measured[: len(measured) // 2]]
        second_half = [s for t, s in measured[len(measured) // 2 :]]
        print(
            f"  iteration time: {sum(first_half) / max(len(first_half), 1):.3f} s (first half) -> "
            f"{sum(second_half) / max(len(second_half), 1):.3f} s (second half), {iterations[-1][1]} iterations"
        )
    print("  last lines:\n" + "".join(log_lines[-3:]))
    if args.json:
        report["samples"] = samples
        report["iterations"] = iterations
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the seconds of a training run's start go, phase by phase (a benchmark, not a test).

    python benchmarks/start_timeline.py --task Isaac-Velocity-Flat-AnymalD --num_envs 4096 --device cuda:0 \\
        --runs torchrl_lstm_default,rsl_rl_recurrent --iterations 3 [--repeat 2] [--json start.json]

Each run (the names and commands of ``throughput.py``) is its own process in its own working folder, one after the
other. Every output line is timed from the process start; the phases are the first lines that mark them (configs
resolved, sizes known, an env's build started and finished, the workers ready, the first batch, the first iteration
with its collection and learning seconds). With ``--cold`` every run starts from empty caches of its own, as a task
config's first run on a machine (both libraries compile Warp's kernels; ours also its update). A stack sampler runs
in every Python process of the run (``start_sampler/sitecustomize.py`` on ``PYTHONPATH``): it gives the fork
server's start and a worker's fork, and its files, kept in the run's folder (``--keep``), say what each process was
doing at each moment.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

from throughput import ALL_RUNS, ZERO_ACTION_RUNS, run_environment, run_rounds, training_command

SAMPLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "start_sampler")
LINE_MARKS = {
    # phase: texts of the first output line that marks it
    "configs_s": ("[torchrl] update:",),
    "sizes_s": ("[torchrl] environment:",),
    "env_build_start_s": ("[INFO]: Base environment:",),
    "env_built_s": ("[INFO]: Completed setting up the environment",),
    "workers_ready_s": ("[torchrl] collector workers:",),
    "first_batch_s": ("[torchrl] batch bytes per env step",),
    "first_iteration_s": ("[torchrl] it     1/", "Learning iteration 0/"),  # rsl_rl counts from 0
}
FIRST_ITERATION = re.compile(r"collect ([\d.]+)s, learn ([\d.]+)s")
SAMPLE_HEADER = re.compile(r"# pid (\d+) ppid (\d+) (\w+) (.*) at ([\d.]+)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Isaac-Velocity-Flat-AnymalD")
    parser.add_argument("--num_envs", type=int, default=4096)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--iterations", type=int, default=3, help="Training iterations per run.")
    parser.add_argument("--runs", default="torchrl_lstm_default,rsl_rl_recurrent")
    parser.add_argument("--repeat", type=int, default=1, help="Rounds of all runs, alternating.")
    parser.add_argument("--period", type=float, default=0.2, help="Seconds between two stack samples.")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds one run may take.")
    parser.add_argument("--keep", action="store_true", help="Keep each run's folder, its samples and output.")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="Each run with empty caches of its own (Warp's kernels, inductor's and Triton's, the remembered sizes): "
        "every run is a task config's first run on the machine.",
    )
    parser.add_argument("--json", default=None, help="Write all results to this file.")
    args = parser.parse_args(argv)
    args.num_steps_per_env = args.num_learning_epochs = args.num_mini_batches = None  # each library's own
    unknown = sorted(set(args.runs.split(",")) - (set(ALL_RUNS) - set(ZERO_ACTION_RUNS)))
    if unknown:
        parser.error(f"unknown or non-training runs {unknown}")
    return args


def phases(lines: list[tuple[float, str]], sample_dir: str) -> dict:
    """The phases of one run from its timed output lines and the headers of its stack samples."""
    found = {}
    for when, text in lines:
        for phase, prefixes in LINE_MARKS.items():
            if phase not in found and any(prefix in text for prefix in prefixes):
                found[phase] = round(when, 2)
        match = FIRST_ITERATION.search(text)
        if match and "first_collect_s" not in found:
            found["first_collect_s"], found["first_learn_s"] = float(match.group(1)), float(match.group(2))
    for path in glob.glob(os.path.join(sample_dir, "s.*.txt")):
        with open(path) as samples:
            header = SAMPLE_HEADER.match(samples.readline())
        if header is None:
            continue
        role, argv, at = header.group(3), header.group(4), float(header.group(5))
        if role == "started" and "'-c'" in argv:  # multiprocessing's helpers: the fork server, the resource tracker
            found["server_start_s"] = min(found.get("server_start_s", at), at)
        elif role == "forked":  # the probe or a worker, forked from the server
            found["first_fork_s"] = min(found.get("first_fork_s", at), at)
    return dict(sorted(found.items(), key=lambda item: item[1]))


def run_once(name: str, args: argparse.Namespace, out_dir: str) -> dict:
    workdir = tempfile.mkdtemp(prefix=f"{name}_", dir=out_dir)
    sample_dir = os.path.join(workdir, "samples")
    os.makedirs(sample_dir)
    env = run_environment()
    env["PYTHONPATH"] = os.pathsep.join((SAMPLER, env["PYTHONPATH"]))
    env["SAMPLE_OUT"], env["SAMPLE_PERIOD"] = os.path.join(sample_dir, "s"), str(args.period)
    if args.cold:  # Warp's and this project's caches are in the user's cache folder, Triton's beside it
        env["XDG_CACHE_HOME"] = os.path.join(workdir, "cache")
        env["TRITON_CACHE_DIR"] = os.path.join(workdir, "cache", "triton")
        for variable in ("TORCHINDUCTOR_CACHE_DIR", "WARP_CACHE_PATH"):
            env.pop(variable, None)
    start = time.time()
    env["SAMPLE_T0"] = repr(start)
    lines = []
    with open(os.path.join(workdir, "output.log"), "w") as log:
        process = subprocess.Popen(
            training_command(name, args),
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for line in process.stdout:
            when = time.time() - start
            lines.append((when, line.strip()))
            log.write(f"{when:8.2f} {line}")
        try:
            returncode = process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = "timeout"
    result = {"run": name, "returncode": returncode, "wall_s": round(time.time() - start, 1), "workdir": workdir}
    result.update(phases(lines, sample_dir))
    return result


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out_dir = tempfile.mkdtemp(prefix="start_timeline_")
    run_rounds(args, run_once, out_dir)
    if not args.keep:
        subprocess.run(["rm", "-rf", out_dir], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

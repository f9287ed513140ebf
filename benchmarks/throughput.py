"""Side-by-side training throughput on one Isaac Lab task: raw simulation, our env wrapper, rsl_rl, Isaac Lab's
torchrl backend and this project's runner (a benchmark, not a test).

    python benchmarks/throughput.py --task Isaac-Cartpole-Direct --num_envs 4096 --device cuda:0 \\
        --iterations 50 [--repeat 2] [--runs rsl_rl,torchrl_mlp_sync] [--json results.json]

Every run is its own process in its own working folder (the trainers write their usual logs there), and with
``--repeat`` the runs alternate (A B C A B C), so that slow drifts of the machine hit all of them alike.
Training throughput is the steady state: steps per second between the TensorBoard events of iteration
``--warmup`` and of the last iteration, so start-up (simulation launch, worker spawn, first compilation) is
not counted; collection and learning time are the mean of the per-iteration values after the warm-up. On an
NVIDIA GPU the peak GPU memory of the run (all its processes, and each) is sampled from ``nvidia-smi``.
Zero-action runs step the environment with zero actions, with Isaac Lab's own ``env.step`` ("raw") and
through this project's torchrl wrapper ("wrapper"), and time ``--zero_action_steps`` steps after 20 warm-up
steps. On a GPU machine, unpack ``../shared/gpu-bundle`` first; here, run it with the venv's python.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE_ASSET_ROOT = os.path.join(REPO, "source", "isaaclab_torchrl", "offline_assets")
TRAIN_SCRIPT = os.path.join(REPO, "scripts", "train.py")
ISAACLAB_TRAIN = os.path.join(REPO, "benchmarks", "isaaclab_train_offline.py")  # `isaaclab train`, offline ANYmal
RSL_RL = [ISAACLAB_TRAIN, "--rl_library", "rsl_rl"]
TRAINING_RUNS = {
    # name: arguments after the python interpreter
    "rsl_rl": RSL_RL,
    "rsl_rl_recurrent": [*RSL_RL, "--agent", "rsl_rl_recurrent_cfg_entry_point"],
    "isaaclab_torchrl": [ISAACLAB_TRAIN, "--rl_library", "torchrl"],
}
# rsl_rl's loop and logger with this project's collection policy and PPO update (rsl_rl_with_our_ppo.py), and with
# one of rsl_rl's update rules that the parity test leaves out: its recurrent minibatch split, its time-out bootstrap
OUR_UPDATE = [os.path.join(REPO, "benchmarks", "rsl_rl_with_our_ppo.py"), *RSL_RL[1:], "env.compute_final_obs=true"]
RECURRENT_AGENT = ["--agent", "rsl_rl_recurrent_cfg_entry_point"]
# rsl_rl's PPO with one of this project's parts beside or inside it (rsl_rl_twin.py): its update, acting, initialization
for name, agent, algorithm in (
    ("rsl_rl_our_update", [], "rsl_rl_with_our_ppo:OurPPO"),
    ("rsl_rl_recurrent_our_update", RECURRENT_AGENT, "rsl_rl_with_our_ppo:OurPPO"),
    ("rsl_rl_recurrent_our_update_contiguous_split", RECURRENT_AGENT, "rsl_rl_with_our_ppo:OurPPOContiguousSplit"),
    ("rsl_rl_recurrent_our_update_rsl_rl_time_outs", RECURRENT_AGENT, "rsl_rl_with_our_ppo:OurPPORslRlTimeOuts"),
    ("rsl_rl_recurrent_twin_update", RECURRENT_AGENT, "rsl_rl_twin:TwinPPO"),
    ("rsl_rl_recurrent_twin_update_rsl_rl_time_outs", RECURRENT_AGENT, "rsl_rl_twin:TwinPPORslRlTimeOuts"),
    ("rsl_rl_recurrent_our_acting", RECURRENT_AGENT, "rsl_rl_twin:OurActingPPO"),
    ("rsl_rl_recurrent_our_init", RECURRENT_AGENT, "rsl_rl_twin:OurInitPPO"),
):
    TRAINING_RUNS[name] = [*OUR_UPDATE, *agent, f"agent.algorithm.class_name={algorithm}"]

for network in ("mlp", "lstm"):
    agent = [TRAIN_SCRIPT, "--agent", "torchrl" if network == "mlp" else "torchrl_lstm"]
    # what a user gets (agent.speed=auto: on a GPU, compiled + graphed update, graphed inference, async collection)
    TRAINING_RUNS[f"torchrl_{network}_default"] = agent
    # the learner's precision options (agent.tf32, on by default; rsl_rl's use_mixed_precision)
    TRAINING_RUNS[f"torchrl_{network}_default_fp32"] = [*agent, "agent.tf32=false"]
    TRAINING_RUNS[f"torchrl_{network}_default_bf16"] = [*agent, "agent.algorithm.use_mixed_precision=true"]
    # the update compiled (on a GPU the default; on the CPU off by default)
    TRAINING_RUNS[f"torchrl_{network}_default_compiled"] = [*agent, "agent.compile=true"]
    for mode in ("sync", "async"):
        base = [*agent, "agent.collector.sync=" + ("true" if mode == "sync" else "false")]
        TRAINING_RUNS[f"torchrl_{network}_{mode}"] = base
        # two or four collector subprocesses share the device, each with its share of the environments
        TRAINING_RUNS[f"torchrl_{network}_{mode}_x2"] = [*base, "--num_collectors", "2"]
        TRAINING_RUNS[f"torchrl_{network}_{mode}_x4"] = [*base, "--num_collectors", "4"]
        # without the update's NaN check, to measure what it costs
        TRAINING_RUNS[f"torchrl_{network}_{mode}_nocheck"] = [*base, "agent.check_for_nan=false"]
        # eager update and inference (agent.speed=off), to measure what the GPU's speed settings gain
        TRAINING_RUNS[f"torchrl_{network}_{mode}_plain"] = [*base, "agent.speed=off"]
        # the batches sent through host memory (agent.collector.storing_device; the default keeps them on the GPU)
        TRAINING_RUNS[f"torchrl_{network}_{mode}_host_storage"] = [*base, "agent.collector.storing_device=cpu"]
        # the workers' inference eager (the graphed one waits for the whole device before each replay)
        TRAINING_RUNS[f"torchrl_{network}_{mode}_eager_inference"] = [*base, "agent.collector.cudagraph_policy=false"]
ZERO_ACTION_RUNS = ("zero_action_raw", "zero_action_wrapper")
ALL_RUNS = ZERO_ACTION_RUNS + tuple(TRAINING_RUNS)
DEFAULT_RUNS = (
    *ZERO_ACTION_RUNS,
    "rsl_rl",
    "isaaclab_torchrl",
    "torchrl_mlp_default",
    "torchrl_lstm_default",
)
START_MARKS = {
    # name: the start of the first output line that marks it (seconds from the process start are recorded)
    "configured_s": "[torchrl] update:",  # configs resolved and validated (ours)
    "probed_s": "[torchrl] environment:",  # the probe process has read the network sizes (ours)
    "workers_ready_s": "[torchrl] collector workers:",  # the workers' simulations are built (ours)
    "first_env_ready_s": "[INFO]: Completed setting up the environment",  # the first simulation built (both)
}
MEMORY_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
MEMORY_PERIOD_S = 0.5
LEARNING_TIME_TAG = "Perf/learning_time"
COLLECTION_TIME_TAGS = ("Perf/collection time", "Perf/collection_time")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Isaac-Cartpole-Direct")
    parser.add_argument("--num_envs", type=int, default=4096)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--iterations", type=int, default=50, help="Training iterations per run.")
    parser.add_argument("--warmup", type=int, default=5, help="Iterations left out of the steady state.")
    parser.add_argument("--num_steps_per_env", type=int, default=None, help="Default: each library's config.")
    parser.add_argument("--num_learning_epochs", type=int, default=None, help="Default: each library's config.")
    parser.add_argument("--num_mini_batches", type=int, default=None, help="Default: each library's config.")
    parser.add_argument("--zero_action_steps", type=int, default=500)
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="Comma-separated subset of the runs.")
    parser.add_argument("--repeat", type=int, default=1, help="Rounds of all runs, alternating.")
    parser.add_argument("--timeout", type=float, default=900, help="Seconds one run may take.")
    parser.add_argument("--json", default=None, help="Write all results to this file.")
    parser.add_argument("--zero_action", choices=("raw", "wrapper"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.runs.split(",")) - set(ALL_RUNS))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(ALL_RUNS)}")
    return args


def run_environment() -> dict:
    env = dict(os.environ)
    env.setdefault("ISAACSIM_ASSET_ROOT", OFFLINE_ASSET_ROOT)
    env.pop("ISAACLAB_TORCHRL_OFFLINE_ASSETS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(REPO, "source"), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


"""
Zero-action stepping (runs in a child process of the benchmark).
"""


def zero_action_rate(args: argparse.Namespace) -> dict:
    """Steps ``args.task`` with zero actions, raw or through the torchrl wrapper; returns steps/s."""
    import gymnasium as gym
    import torch
    from isaaclab.app import launch_simulation

    from isaaclab_torchrl.cli import add_task_args, launcher_args, resolve_task
    from isaaclab_torchrl.cli import parse_args as parse_task_args
    from isaaclab_torchrl.envs import IsaacLabEnvFactory

    parser = argparse.ArgumentParser()
    add_task_args(parser)
    task_args, hydra_args = parse_task_args(
        parser, ["--task", args.task, "--device", args.device, "--viz", "none", "physics=newton_mjwarp"]
    )
    env_cfg, _ = resolve_task(task_args, hydra_args)
    env_cfg.scene.num_envs = args.num_envs
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    if args.zero_action == "raw":
        with launch_simulation(env_cfg, launcher_args(task_args)):
            env = gym.make(args.task, cfg=env_cfg)
            env.reset()
            actions = torch.zeros(env.action_space.shape, device=device)
            for _ in range(20):
                env.step(actions)
            sync()
            start = time.perf_counter()
            for _ in range(args.zero_action_steps):
                env.step(actions)
            sync()
            elapsed = time.perf_counter() - start
            env.close()
    else:
        env = IsaacLabEnvFactory(args.task, env_cfg, launcher_args(task_args), args.num_envs, seed=0)()
        td = env.reset()
        td["action"] = env.action_spec.zero()
        for _ in range(20):
            _, td = env.step_and_maybe_reset(td)
            td["action"] = env.action_spec.zero()
        sync()
        start = time.perf_counter()
        for _ in range(args.zero_action_steps):
            _, td = env.step_and_maybe_reset(td)
            td["action"] = env.action_spec.zero()
        sync()
        elapsed = time.perf_counter() - start
        env.close()
    return {"steps_per_s": args.num_envs * args.zero_action_steps / elapsed}


"""
Training runs.
"""


def training_command(name: str, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, *TRAINING_RUNS[name], "--task", args.task, "--num_envs", str(args.num_envs)]
    cmd += ["--max_iterations", str(args.iterations), "--device", args.device, "--viz", "none"]
    cmd += ["physics=newton_mjwarp"]
    if name.startswith("rsl_rl") or name == "isaaclab_torchrl":
        cmd.append(f"agent.device={args.device}")
    flat = name == "isaaclab_torchrl"  # Isaac Lab's torchrl backend keeps the PPO fields on the runner config
    if args.num_steps_per_env is not None:
        cmd.append(f"agent.num_steps_per_env={args.num_steps_per_env}")
    if args.num_learning_epochs is not None:
        cmd.append(f"agent.{'' if flat else 'algorithm.'}num_learning_epochs={args.num_learning_epochs}")
    if args.num_mini_batches is not None:
        cmd.append(f"agent.{'' if flat else 'algorithm.'}num_mini_batches={args.num_mini_batches}")
    return cmd


def run_summary(run_dir: str, warmup: int, started: float) -> dict:
    """Steady-state steps/s, mean collection/learning time, the last mean return of a finished run and the seconds
    from its start (``started``, epoch seconds) to its first logged iteration."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    events = accumulator.Scalars(LEARNING_TIME_TAG)
    if len(events) <= warmup + 1:
        raise RuntimeError(f"{run_dir}: {len(events)} iterations logged, need more than {warmup + 1}")
    collection = next(accumulator.Scalars(tag) for tag in COLLECTION_TIME_TAGS if tag in tags)
    fps = accumulator.Scalars("Perf/total_fps")
    # steps per iteration from the first iteration's rate and times (every library logs these three)
    steps = fps[0].value * (collection[0].value + events[0].value)
    first, last = events[warmup], events[-1]
    summary = {
        "iterations": last.step,
        "steps_per_iteration": round(steps),
        "steps_per_s": steps * (last.step - first.step) / (last.wall_time - first.wall_time),
        "env_steps": round(steps) * last.step,
        "collection_s": statistics.fmean(e.value for e in collection[warmup:]),
        "learning_s": statistics.fmean(e.value for e in events[warmup:]),
        "first_iteration_s": events[0].wall_time - started,
    }
    if "Train/mean_reward" in tags:
        summary["mean_return"] = accumulator.Scalars("Train/mean_reward")[-1].value
    if "Perf/policy_lag" in tags:
        summary["policy_lag"] = statistics.fmean(e.value for e in accumulator.Scalars("Perf/policy_lag")[warmup:])
    return summary


class MemorySampler(threading.Thread):
    """Samples the GPU memory of every process on the GPUs (``nvidia-smi``) until stopped; keeps the peak of the
    sum and of each process. The runs go one after the other, so what is on the GPU is the running one's."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stopped = threading.Event()
        self.peak_total_mib, self.peak_by_pid = 0, {}

    def run(self) -> None:
        while not self.stopped.wait(MEMORY_PERIOD_S):
            try:
                lines = subprocess.run(MEMORY_QUERY, capture_output=True, text=True, timeout=5).stdout.splitlines()
            except (OSError, subprocess.SubprocessError):
                return  # no NVIDIA GPU here
            sample = {}
            for line in lines:
                pid, _, used = line.partition(",")
                if used.strip().isdigit():
                    sample[pid.strip()] = int(used)
            self.peak_total_mib = max(self.peak_total_mib, sum(sample.values()))
            for pid, used in sample.items():
                self.peak_by_pid[pid] = max(self.peak_by_pid.get(pid, 0), used)

    def result(self) -> dict:
        self.stopped.set()
        self.join()
        if not self.peak_by_pid:
            return {}
        return {"peak_gpu_mib": self.peak_total_mib, "peak_process_mib": sorted(self.peak_by_pid.values())[::-1]}


def run_once(name: str, args: argparse.Namespace, out_dir: str) -> dict:
    workdir = tempfile.mkdtemp(prefix=f"{name}_", dir=out_dir)
    if name in ZERO_ACTION_RUNS:
        cmd = [sys.executable, os.path.abspath(__file__), "--zero_action", name.rsplit("_", 1)[1]]
        cmd += ["--task", args.task, "--num_envs", str(args.num_envs), "--device", args.device]
        cmd += ["--zero_action_steps", str(args.zero_action_steps)]
    else:
        cmd = training_command(name, args)
    start, started = time.perf_counter(), time.time()
    marks = {}
    memory = MemorySampler()
    memory.start()
    with open(os.path.join(workdir, "output.log"), "w") as log:
        # a session of its own: on a time-out the run's worker processes are killed with it, and the output pipe,
        # which they hold open too, ends
        process = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=run_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        timer = threading.Timer(args.timeout, os.killpg, (process.pid, signal.SIGKILL))
        timer.start()
        for line in process.stdout:
            log.write(line)
            for mark, prefix in START_MARKS.items():
                if mark not in marks and line.startswith(prefix):
                    marks[mark] = round(time.perf_counter() - start, 1)
        returncode = process.wait()
        timer.cancel()
        if returncode == -signal.SIGKILL and time.perf_counter() - start >= args.timeout:
            returncode = "timeout"
    result = {"run": name, "wall_s": time.perf_counter() - start, "returncode": returncode, "workdir": workdir}
    result.update(marks)
    result.update(memory.result())
    if returncode != 0:
        return result
    try:
        if name in ZERO_ACTION_RUNS:
            with open(os.path.join(workdir, "output.log")) as log:
                line = next(line for line in log if line.startswith("RESULT "))
            result.update(json.loads(line[len("RESULT ") :]))
        else:
            events = glob.glob(os.path.join(workdir, "logs", "**", "events.out.tfevents.*"), recursive=True)
            result.update(run_summary(os.path.dirname(max(events, key=os.path.getmtime)), args.warmup, started))
    except (StopIteration, ValueError, RuntimeError) as exc:
        result["error"] = str(exc)
    return result


def print_table(results: list[dict]) -> None:
    def median(name: str, key: str) -> float | None:
        values = [r[key] for r in results if r["run"] == name and key in r]
        return statistics.median(values) if values else None

    names = list(dict.fromkeys(r["run"] for r in results))
    zero_action = median("zero_action_raw", "steps_per_s")
    # the recurrent runs against rsl_rl's recurrent agent where it ran, the others against its default agent
    references = {"mlp": median("rsl_rl", "steps_per_s")}
    references["lstm"] = median("rsl_rl_recurrent", "steps_per_s") or references["mlp"]
    columns = ["run", "steps/s", "vs rsl_rl", "vs zero-action", "collect s/it", "learn s/it", "mean return"]
    columns += ["after steps", "lag", "first it s", "GPU MiB", "ok"]
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for name in names:
        fps = median(name, "steps_per_s")
        cells = [name, f"{fps:,.0f}" if fps else "failed"]
        reference = references["lstm" if "lstm" in name or name == "rsl_rl_recurrent" else "mlp"]
        cells.append(f"{fps / reference:.2f}" if fps and reference else "")
        cells.append(f"{fps / zero_action:.3f}" if fps and zero_action else "")
        for key, fmt in (
            ("collection_s", "{:.3f}"),
            ("learning_s", "{:.3f}"),
            ("mean_return", "{:.2f}"),
            ("env_steps", "{:,.0f}"),
            ("policy_lag", "{:.1f}"),
            ("first_iteration_s", "{:.0f}"),
            ("peak_gpu_mib", "{:,.0f}"),
        ):
            value = median(name, key)
            cells.append(fmt.format(value) if value is not None else "")
        runs = [r for r in results if r["run"] == name]
        cells.append(f"{sum('steps_per_s' in r for r in runs)}/{len(runs)}")
        print("| " + " | ".join(cells) + " |")


def run_rounds(args: argparse.Namespace, run_once, out_dir: str) -> list[dict]:
    """``run_once(name, args, out_dir)`` for each of ``args.runs``, ``args.repeat`` rounds alternating (A B C A B C),
    each result printed and, with ``args.json``, all saved after every run, so that an interrupted benchmark keeps
    what it measured."""
    results = []
    for round_index in range(args.repeat):
        for name in args.runs.split(","):
            result = run_once(name, args, out_dir)
            result["round"] = round_index
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.json:
                with open(args.json, "w") as file:
                    json.dump({"args": vars(args), "results": results}, file, indent=2)
    return results


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.zero_action is not None:
        print("RESULT " + json.dumps(zero_action_rate(args)), flush=True)
        return 0
    out_dir = tempfile.mkdtemp(prefix="throughput_")  # the runs' working folders (logs, checkpoints)
    results = run_rounds(args, run_once, out_dir)
    print(f"\n{args.task}, {args.num_envs} envs, {args.device}, {args.iterations} iterations, {args.repeat} round(s)")
    print_table(results)
    return 0 if all("error" not in r and r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

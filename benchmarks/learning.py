"""Learning curves of rsl_rl and this project's runner on one task, several seeds each (a benchmark, not a test).

    python benchmarks/learning.py --task Isaac-Cartpole-Direct --num_envs 64 --device cpu --iterations 100 \\
        --runs rsl_rl,torchrl_mlp_sync,torchrl_mlp_async --seeds 1,2,3,4,5 --out benchmarks/results/cartpole_cpu

Every run trains with its library's defaults for the task (the same env count, steps per env and iterations, so the
same env-step budget) in its own process and folder; the runs alternate seed by seed (A B C, A B C, ...), so slow
drifts of the machine hit all trainers alike. The run names are ``benchmarks/throughput.py``'s (``rsl_rl``,
``rsl_rl_recurrent``, ``torchrl_{mlp,lstm}_{sync,async}``, ...). From each run's TensorBoard events it keeps the
mean episode return and length per iteration, against env steps and against wall time since the first iteration,
and the training statistics (losses, noise, lag correction, reward terms: ``DIAGNOSTICS``), and writes
``<out>.json`` (every curve and a summary per trainer) and ``<out>.png`` (mean and min-max band per trainer). The
summary gives, over seeds, the final return (mean, standard deviation, min, max), the area under the curve (the mean
return over the whole budget), the env steps to reach 90% of the final return, and the wall time from the process
start to a good policy: the median over seeds of the seconds until the mean return first reaches the first
trainer's median final return, and 90% of the way there from its median first return.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

from throughput import TRAINING_RUNS, run_environment, training_command

CURVES = {"return": "Train/mean_reward", "length": "Train/mean_episode_length"}
DIAGNOSTICS = ("Loss/", "Policy/", "Perf/policy_lag", "Episode_Reward/", "Episode_Termination/", "Metrics/")
"""Tags (prefixes) of the training statistics kept per logged iteration beside the curves, to tell where two
trainers' learning parts: the losses, KL and learning rate, the noise, the lag correction's weights, the reward
terms and the terminations."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Isaac-Cartpole-Direct")
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iterations", type=int, default=100, help="Training iterations per run.")
    parser.add_argument(
        "--runs",
        default=None,
        help=f"Of: {', '.join(TRAINING_RUNS)} (default: rsl_rl,torchrl_mlp_sync; with --merge, all in the files).",
    )
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--timeout", type=float, default=1800, help="Seconds one run may take.")
    parser.add_argument("--out", default="learning", help="Path of the results without extension.")
    parser.add_argument(
        "--merge",
        default=None,
        help="Comma-separated JSON files of earlier runs (of one task and setting) to summarise and plot together "
        "into --out instead of training; their task, env count, device and iterations are taken from the first.",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="Runs at a time (a GPU with idle capacity; the curves against env steps stay comparable, the wall-time "
        "panel then shows shared hardware).",
    )
    args = parser.parse_args()
    args.num_steps_per_env = args.num_learning_epochs = args.num_mini_batches = None  # each library's config
    if args.runs is None and not args.merge:
        args.runs = "rsl_rl,torchrl_mlp_sync"
    unknown = sorted(set((args.runs or "").split(",")) - set(TRAINING_RUNS) - {""})
    if unknown:
        parser.error(f"unknown runs {unknown}")
    return args


def read_curves(run_dir: str, started: float) -> dict:
    """Env steps, seconds since the first iteration, mean return and episode length per logged iteration, the
    seconds from the process start (``started``, epoch seconds) to the first iteration (none for a run stopped
    before its first iteration was logged), and the :data:`DIAGNOSTICS` as ``[step, value]`` pairs (``diagnostics``)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    if "Perf/total_fps" not in tags:
        return {}
    fps, learning = accumulator.Scalars("Perf/total_fps"), accumulator.Scalars("Perf/learning_time")
    collection = accumulator.Scalars(next(t for t in ("Perf/collection_time", "Perf/collection time") if t in tags))
    # steps per iteration from the first iteration's rate and times (both libraries log these three)
    steps_per_iteration = round(fps[0].value * (collection[0].value + learning[0].value))
    start = accumulator.Scalars(CURVES["return"])[0].wall_time
    events = {name: accumulator.Scalars(tag) for name, tag in CURVES.items()}
    return {
        # the n-th logged iteration has consumed n + 1 batches (rsl_rl logs iteration n at step n, this runner at
        # step n + 1: the event's step is not the x-axis)
        "env_steps": [(index + 1) * steps_per_iteration for index in range(len(events["return"]))],
        "wall_s": [event.wall_time - start for event in events["return"]],
        "start_s": start - started,
        **{name: [event.value for event in series] for name, series in events.items()},
        # [event step, value]: the reward terms come only from iterations where an episode ended (the libraries
        # number their iterations from 0 and 1)
        "diagnostics": {
            tag: [[event.step, float(f"{event.value:.5g}")] for event in accumulator.Scalars(tag)]
            for tag in sorted(tags)
            if tag.startswith(DIAGNOSTICS)
        },
    }


def run_once(name: str, seed: int, args: argparse.Namespace, out_dir: str) -> dict:
    """One training run; a run past ``--timeout`` is stopped and keeps the iterations it logged."""
    workdir = tempfile.mkdtemp(prefix=f"{name}_seed{seed}_", dir=out_dir)
    cmd = [*training_command(name, args), "--seed", str(seed)]
    started = time.time()
    with open(os.path.join(workdir, "output.log"), "w") as log:
        try:
            returncode = subprocess.run(
                cmd, cwd=workdir, env=run_environment(), stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = "timeout"
    result = {"run": name, "seed": seed, "returncode": returncode, "workdir": workdir}
    events = [root for root, _, files in os.walk(workdir) if any("tfevents" in f for f in files)]
    if returncode in (0, "timeout") and events:
        result.update(read_curves(events[0], started))
    return result


def wall_time_to(curve: dict, threshold: float) -> float | None:
    """Seconds from the process start to the first logged iteration whose mean return reaches ``threshold``."""
    if "start_s" not in curve:  # a run recorded before the process start was
        return None
    index = next((i for i, value in enumerate(curve["return"]) if value >= threshold), None)
    return None if index is None else curve["start_s"] + curve["wall_s"][index]


def summarize(runs: list[dict]) -> dict:
    """Per trainer over its seeds: final return, area under the curve, env steps to 90% of the final return, and the
    wall time from the process start to the reference's (the first trainer's) median final return and to 90% of
    the way from its median first return there (medians over seeds; a seed that never gets there counts as
    slowest)."""
    summary = {}
    names = list(dict.fromkeys(run["run"] for run in runs))
    finished = {
        name: [run for run in runs if run["run"] == name and "return" in run and run["returncode"] == 0]
        for name in names
    }
    reference = next((finished[name] for name in names if finished[name]), [])
    thresholds = {}
    if reference:
        first = statistics.median(curve["return"][0] for curve in reference)
        final = statistics.median(curve["return"][-1] for curve in reference)
        thresholds = {"reference_final": final, "reference_90pct": first + 0.9 * (final - first)}
    for name in names:
        curves = finished[name]
        if not curves:
            continue
        finals = [curve["return"][-1] for curve in curves]
        areas = [statistics.fmean(curve["return"]) for curve in curves]
        to_90 = []
        for curve in curves:
            # the first iteration from which the return stays above 90% of the way from its start to its end
            low, high = curve["return"][0], curve["return"][-1]
            if high > low:  # a run that did not improve never gets there
                threshold = low + 0.9 * (high - low)
                returns = curve["return"]
                index = next(i for i in range(len(returns)) if all(r >= threshold for r in returns[i:]))
                to_90.append(curve["env_steps"][index])
        summary[name] = {
            "seeds": len(curves),
            "final_mean": statistics.fmean(finals),
            "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "final_min": min(finals),
            "final_max": max(finals),
            "auc_mean": statistics.fmean(areas),
            "auc_std": statistics.stdev(areas) if len(areas) > 1 else 0.0,
            "steps_to_90pct_mean": statistics.fmean(to_90) if to_90 else None,
        }
        for key, threshold in thresholds.items():
            times = [wall_time_to(curve, threshold) for curve in curves]
            median = statistics.median(math.inf if t is None else t for t in times)
            summary[name][f"wall_s_to_{key}"] = median if math.isfinite(median) else None
            summary[name][f"reached_{key}"] = sum(t is not None for t in times)
            summary[name][f"threshold_{key}"] = threshold
    return summary


def plot(runs: list[dict], args: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in dict.fromkeys(run["run"] for run in runs):
        curves = [run for run in runs if run["run"] == name and "return" in run]
        if not curves:
            continue
        length = min(len(curve["return"]) for curve in curves)
        values = [[curve["return"][i] for curve in curves] for i in range(length)]
        mean = [statistics.fmean(column) for column in values]
        for axis, x_key in zip(axes, ("env_steps", "wall_s"), strict=True):
            x = [statistics.fmean(curve[x_key][i] for curve in curves) for i in range(length)]
            (line,) = axis.plot(x, mean, label=f"{name} ({len(curves)} seeds)")
            axis.fill_between(x, [min(c) for c in values], [max(c) for c in values], alpha=0.2, color=line.get_color())
    axes[0].set_xlabel("environment steps")
    axes[1].set_xlabel("seconds since the first iteration")
    for axis in axes:
        axis.set_ylabel("mean episode return")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(f"{args['task']}, {args['num_envs']} envs, {args['device']}, {args['iterations']} iterations")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def noninferiority(summary: dict) -> dict:
    """Each trainer against the first (the reference), and each asynchronous one against its synchronous twin: the
    bound ``reference mean - max(0.1, half the pooled standard deviation)`` of the final return and of the area
    under the curve, and whether the trainer's mean reaches it (the targets of the learning-parity issue)."""
    reference = next(iter(summary))
    pairs = [(name, reference) for name in summary if name != reference]
    pairs += [(name, name.replace("_async", "_sync")) for name in summary if name.replace("_async", "_sync") in summary]
    verdicts = {}
    for name, against in pairs:
        if name == against:
            continue
        verdict = {}
        for metric in ("final", "auc"):
            ref, row = summary[against], summary[name]
            pooled = math.sqrt((ref[f"{metric}_std"] ** 2 + row[f"{metric}_std"] ** 2) / 2)
            bound = ref[f"{metric}_mean"] - max(0.1, pooled / 2)
            verdict[metric] = {"bound": bound, "mean": row[f"{metric}_mean"], "met": row[f"{metric}_mean"] >= bound}
        verdicts[f"{name} vs {against}"] = verdict
    return verdicts


def train_all(args: argparse.Namespace) -> list[dict]:
    """Every (seed, trainer) run, ``--parallel`` at a time; the JSON is rewritten after each run."""
    out_dir = tempfile.mkdtemp(prefix="learning_")
    runs = []
    jobs = [(name, int(seed)) for seed in args.seeds.split(",") for name in args.runs.split(",")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = [pool.submit(run_once, name, seed, args, out_dir) for name, seed in jobs]
        for (name, seed), future in zip(jobs, futures, strict=True):
            result = future.result()
            runs.append(result)
            final = f"final return {result['return'][-1]:.2f}" if "return" in result else "FAILED"
            print(f"{name} seed {seed}: {final} (exit {result['returncode']}, {result['workdir']})", flush=True)
            write_report(vars(args), runs, args.out)
    return runs


def write_report(settings: dict, runs: list[dict], out: str) -> dict:
    summary = summarize(runs)
    report = {"args": settings, "summary": summary, "runs": runs}
    if summary:
        report["noninferiority"] = noninferiority(summary)
    with open(f"{out}.json", "w") as file:
        json.dump(report, file, indent=1)
    return report


def main() -> None:
    args = parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.merge:
        reports = [json.load(open(path)) for path in args.merge.split(",")]
        settings = {
            **reports[0]["args"],
            "merge": [os.path.basename(path) for path in args.merge.split(",")],
            "out": args.out,
        }
        runs = [run for report in reports for run in report["runs"]]
        if args.runs:  # only these trainers' runs
            runs = [run for run in runs if run["run"] in args.runs.split(",")]
        settings["runs"] = ",".join(dict.fromkeys(run["run"] for run in runs))
        settings["seeds"] = ",".join(str(seed) for seed in sorted({run["seed"] for run in runs}))
    else:
        settings, runs = vars(args), train_all(args)
    report = write_report(settings, runs, args.out)
    plot(runs, settings, f"{args.out}.png")
    for name, row in report["summary"].items():
        print(
            f"{name}: final {row['final_mean']:.2f} ± {row['final_std']:.2f} (min {row['final_min']:.2f}, "
            f"max {row['final_max']:.2f}), area {row['auc_mean']:.2f} ± {row['auc_std']:.2f}, "
            f"90% at {row['steps_to_90pct_mean'] or float('nan'):,.0f} env steps ({row['seeds']} seeds); from the "
            f"process start to the reference's final return {row['threshold_reference_final']:.2f}: "
            f"{row['wall_s_to_reference_final'] or float('nan'):.0f} s ({row['reached_reference_final']} seeds got "
            f"there), to its 90% {row['threshold_reference_90pct']:.2f}: "
            f"{row['wall_s_to_reference_90pct'] or float('nan'):.0f} s",
            flush=True,
        )
    for pair, verdict in report.get("noninferiority", {}).items():
        print(
            f"{pair}: "
            + ", ".join(
                f"{metric} {v['mean']:.2f} {'>=' if v['met'] else '<'} bound {v['bound']:.2f}"
                for metric, v in verdict.items()
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()

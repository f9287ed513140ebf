"""Steady-state training throughput of finished runs, from their TensorBoard event times.

    python benchmarks/steady_state.py logs/torchrl/cartpole_direct/<run> logs/rsl_rl/cartpole_direct/<run>

Works for this project's runs, PPO's and distillation's, and for rsl_rl's (all write params/env.yaml,
params/agent.yaml and a ``Loss/learning_rate`` scalar per iteration). The first ``--warmup`` iterations are left
out, so start-up (simulation launch, collector spawn, first compilation) does not count.
"""

from __future__ import annotations

import argparse
import os

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


class ParamsLoader(yaml.SafeLoader):
    """Reads Isaac Lab's params files, whose Python objects (a manager-based task's ``slice``, say) load as
    ``None``: only plain fields are read here."""


ParamsLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def steps_per_iteration(run_dir: str) -> int:
    with open(os.path.join(run_dir, "params", "env.yaml")) as file:
        env = yaml.load(file, Loader=ParamsLoader)
    with open(os.path.join(run_dir, "params", "agent.yaml")) as file:
        agent = yaml.load(file, Loader=ParamsLoader)
    return int(env["scene"]["num_envs"]) * int(agent["num_steps_per_env"])


def steady_state_fps(run_dir: str, warmup: int) -> tuple[float, int]:
    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    events = accumulator.Scalars("Loss/learning_rate")
    if len(events) <= warmup + 1:
        raise SystemExit(f"{run_dir}: {len(events)} iterations logged, need more than warmup + 1 = {warmup + 1}")
    first, last = events[warmup], events[-1]
    iterations = last.step - first.step
    return steps_per_iteration(run_dir) * iterations / (last.wall_time - first.wall_time), iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="Run folders.")
    parser.add_argument("--warmup", type=int, default=5, help="Iterations left out at the start.")
    args = parser.parse_args()
    for run_dir in args.runs:
        fps, iterations = steady_state_fps(run_dir, args.warmup)
        print(f"{fps:10.0f} steps/s over {iterations} iterations  {run_dir}")


if __name__ == "__main__":
    main()

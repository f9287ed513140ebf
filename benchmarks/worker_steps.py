"""Where a collector worker's time goes, per env step (a benchmark): one process holds what a worker holds.

    python benchmarks/worker_steps.py --task Isaac-Velocity-Flat-AnymalD --agent torchrl_lstm --num_envs 4096 \\
        --device cuda:0 [--steps 200] [--json out.json] [agent.collector.storing_device=cpu ...]

It simulates ``--task`` with the agent's collection policy, resolved as ``scripts/train.py`` resolves it (so on a
GPU with the graphed inference and the batches on the GPU, unless overridden), and reports milliseconds per env
step of:

* ``simulator``: Isaac Lab's own ``env.step`` with Gaussian actions of std 1 (an untrained policy's), no wrapper;
* ``wrapper``: the same through this project's torchrl env (observation groups, final observations, episode logs);
  both timed in alternating blocks from the same simulation state, after a warm-up of each;
* ``inference``: the collection policy alone on one step's observations (a CUDA graph when the config says so);
* ``collector``: the worker's collector (torchrl's, as the runner subclasses it) with the runner's settings
  (``compact_obs``, ``no_cuda_sync`` on a GPU, the storing device, graphed inference), one rollout of
  ``num_steps_per_env`` steps at a time: the worker's loop without the hand-over to the learner; ``bookkeeping`` is
  what it adds to wrapper + inference;
* ``storage``: copying one rollout to the host (what ``storing_device=cpu`` adds per step, in bulk);
* ``final_obs_pass``: Isaac Lab's observation computation alone, which ``compute_final_obs`` (set for the critic's
  true final observations) runs a second time on every step where an episode ends, and ``reset_steps``, the share of
  the wrapped steps where one did: both steps above include the pass, rsl_rl's collection does not.

``--op_counts`` counts the tensor operations each part dispatches per env step (torch's, views left out; Warp's
kernels inside the simulator are not torch's and not counted; the random actions and the observation copies this
benchmark feeds the parts are not counted): on a GPU each is a kernel launch or a host-side op, so the count is what
the host pays per step on any device, but for a graphed policy, whose count is that of its input copies, its replay
and its output copy (``ops``, and with ``--op_sites`` the code that issued them outside Isaac Lab's env,
``op_sites``).

On a GPU ``--sync_sites`` also counts the calls that make the host wait for the device (torch's sync debug mode)
during ``--steps`` wrapped steps and during the collector's rollouts of as many steps, by the code that made them.

On a GPU it adds the process's memory (MiB) after each part (``memory``): the whole use as the driver counts it
(``device_used``: the CUDA context, Warp's simulation and torch's caching allocator), and what torch's allocator
holds (``torch_reserved``) and hands out (``torch_allocated``); run nothing else on the GPU.

It simulates in its own process, which imports Isaac Lab before it could apply ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1``:
offline, set ``ISAACSIM_ASSET_ROOT`` to the vendored root (``source/isaaclab_torchrl/offline_assets``) instead.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import time
import traceback
import warnings

import torch
from tensordict.nn import CudaGraphModule
from torch.utils._python_dispatch import TorchDispatchMode
from torchrl.envs.utils import ExplorationType, set_exploration_type

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab_torchrl import training
from isaaclab_torchrl.cli import make_train_parser, parse_args
from isaaclab_torchrl.interfaces import read_env_interface
from isaaclab_torchrl.models import CollectionPolicyFactory
from isaaclab_torchrl.runners.collection import AsyncCompactCollector, CompactCollector

ALTERNATIONS = 5
"""Blocks of raw and of wrapped steps, alternating."""


def per_step_ms(step, steps: int, synchronize, warmup: int = 20) -> float:
    """Milliseconds per call of ``step`` after ``warmup`` calls, the device's queue drained at both ends."""
    for _ in range(warmup):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def memory_use(device: torch.device) -> dict:
    """MiB the GPU uses in all, torch's caching allocator holds, and its tensors hold; empty on a CPU."""
    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)
    mib = 2**20
    return {
        "device_used": (total - free) / mib,
        "torch_reserved": torch.cuda.memory_reserved(device) / mib,
        "torch_allocated": torch.cuda.memory_allocated(device) / mib,
    }


def sync_sites(run, steps: int) -> dict[str, int]:
    """How often ``run(steps)`` makes the host wait for the device, by the innermost frames of the call site."""
    sites = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" in str(message):
            frames = [f for f in traceback.extract_stack()[:-1] if "warnings" not in f.filename][-4:]
            sites[" < ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(frames))] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run(steps)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return dict(sites.most_common())


class OpCount(TorchDispatchMode):
    """Counts the tensor operations dispatched inside it, views left out, and with ``sites`` by the innermost frames
    outside torch and Isaac Lab's env that issued them."""

    def __init__(self, sites: bool = False):
        super().__init__()
        self.count = 0
        self.sites = collections.Counter() if sites else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
            if self.sites is not None:
                self.sites[f"{func.overloadpacket.__name__} @ {issuer(traceback.extract_stack()[:-1])}"] += 1
        return func(*args, **(kwargs or {}))


def issuer(stack) -> str:
    """The innermost frames of ``stack`` outside torch's own modules, or ``isaaclab env`` inside Isaac Lab's env."""
    if any("/isaaclab/envs/" in frame.filename or "/isaaclab_tasks/" in frame.filename for frame in stack):
        return "isaaclab env"
    frames = [frame for frame in stack if "/torch/" not in frame.filename][-3:]
    return " < ".join(f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}" for frame in reversed(frames))


def ops_per_step(step, calls: int, steps_per_call: int, sites: bool, prepare=tuple) -> tuple[float, dict]:
    """Tensor operations per env step in ``calls`` calls of ``step(*prepare())``, each ``steps_per_call`` env steps,
    counted inside ``step`` only, and per issuing site."""
    counter = OpCount(sites)
    for _ in range(calls):
        inputs = prepare()
        with counter:
            step(*inputs)
    steps = calls * steps_per_call
    by_site = {site: count / steps for site, count in (counter.sites or collections.Counter()).most_common()}
    return counter.count / steps, by_site


def final_obs_pass(gym_env, actions: torch.Tensor, steps: int, synchronize) -> tuple[float, float]:
    """Milliseconds per call of Isaac Lab's observation computation (the pass ``compute_final_obs`` adds on a step
    with a reset; a manager-based env's without advancing its history buffers), and the share of ``steps`` raw steps
    under Gaussian actions in which an episode ended somewhere."""
    env = gym_env.unwrapped
    manager = getattr(env, "observation_manager", None)
    ms = per_step_ms(manager.compute if manager is not None else env._compute_observations, steps, synchronize)
    resets = torch.zeros((), device=actions.device)
    for _ in range(steps):
        _, _, terminated, truncated, _ = gym_env.step(torch.randn_like(actions))
        resets += (terminated | truncated).any()
    return ms, float(resets) / steps


def main(argv: list[str]) -> int:
    parser = make_train_parser()
    parser.add_argument("--steps", type=int, default=200, help="Env steps timed per part.")
    parser.add_argument("--json", default=None)
    parser.add_argument("--sync_sites", action="store_true", help="Count host waits for the device (GPU).")
    parser.add_argument("--op_counts", action="store_true", help="Count tensor operations per step.")
    parser.add_argument("--op_sites", action="store_true", help="With --op_counts, by the code that issued them.")
    args, hydra_args = parse_args(parser, argv)
    run = training.TrainingRun(args, *training.resolve_configs(args, hydra_args))
    env_cfg, agent_cfg = run.env_cfg, run.agent_cfg
    device = torch.device(agent_cfg.device)
    synchronize = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    (factory,) = training.make_workers(run)
    interface, _ = read_env_interface([factory])
    env = factory()
    memory = {"env built": memory_use(device)}
    policy = CollectionPolicyFactory(agent_cfg.policy, interface, agent_cfg.device)()
    results = {"task": args.task, "num_envs": env_cfg.scene.num_envs, "device": str(device), "overrides": hydra_args}
    results["steps"] = args.steps

    gym_env = env.base_env.env  # Isaac Lab's env under the torchrl wrapper
    actions = torch.randn(gym_env.action_space.shape, device=device)
    state = {"td": env.reset()}

    def wrapped_step(action: torch.Tensor):
        state["td"]["action"] = action
        _, state["td"] = env.step_and_maybe_reset(state["td"])

    def wrapper_step():
        wrapped_step(torch.randn(env.action_spec.shape, device=device))

    # the raw and the wrapped step from the same simulation state: blocks of each, alternating, after a warm-up of
    # both (the first steps after a reset cost more than the later ones), the median block of each
    parts = {"simulator": lambda: gym_env.step(torch.randn_like(actions)), "wrapper": wrapper_step}
    blocks = {name: [] for name in parts}
    for step in parts.values():
        per_step_ms(step, 1, synchronize, warmup=args.steps // 4)
    for _ in range(ALTERNATIONS):
        for name, step in parts.items():
            blocks[name].append(per_step_ms(step, max(1, args.steps // ALTERNATIONS), synchronize, warmup=0))
    results.update({name: statistics.median(times) for name, times in blocks.items()})
    results["final_obs_pass"], results["reset_steps"] = final_obs_pass(gym_env, actions, args.steps, synchronize)
    ops, op_sites = {}, {}
    if args.op_counts:
        steps = {"simulator": gym_env.step, "wrapper": wrapped_step}
        for name, step in steps.items():
            ops[name], op_sites[name] = ops_per_step(
                step, args.steps, 1, args.op_sites, prepare=lambda: (torch.randn_like(actions),)
            )
    if args.sync_sites and device.type == "cuda":
        results["sync_sites_wrapper"] = sync_sites(lambda n: [wrapper_step() for _ in range(n)], args.steps)
    memory["stepped"] = memory_use(device)

    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        observation = env.reset()
        # the episode-start flag a recurrent policy reads (the collector's InitTracker writes it)
        observation["is_init"] = torch.zeros((*env.batch_size, 1), dtype=torch.bool, device=device)
        first = policy(observation.clone())
        if "next" in first.keys():  # a recurrent policy's state, as the collector's state primers start it
            observation.update(first["next"].apply(torch.zeros_like))
        graphed = agent_cfg.collector.cudagraph_policy
        run = CudaGraphModule(policy, in_keys=[], out_keys=[], device=device) if graphed else policy
        results["inference"] = per_step_ms(lambda: run(observation.clone()), args.steps, synchronize)
        if args.op_counts:
            ops["inference"], op_sites["inference"] = ops_per_step(
                run, args.steps, 1, args.op_sites, prepare=lambda: (observation.clone(),)
            )
    memory["policy"] = memory_use(device)

    rollout_steps = agent_cfg.num_steps_per_env
    collector_class = CompactCollector if agent_cfg.collector.sync else AsyncCompactCollector
    collector = collector_class(
        env,
        policy,
        frames_per_batch=env_cfg.scene.num_envs * rollout_steps,
        total_frames=-1,
        device=device,
        storing_device=agent_cfg.collector.storing_device or device,
        compact_obs=True,
        cudagraph_policy=agent_cfg.collector.cudagraph_policy,
        no_cuda_sync=device.type == "cuda",
        auto_register_policy_transforms=True,
    )
    rollouts = iter(collector)
    held = {}

    def collect():
        held["rollout"] = next(rollouts)

    per_rollout = per_step_ms(collect, max(1, args.steps // rollout_steps), synchronize, warmup=3)
    if args.sync_sites and device.type == "cuda":
        rollouts_timed = max(1, args.steps // rollout_steps)
        results["sync_sites_collector"] = sync_sites(lambda n: [collect() for _ in range(n)], rollouts_timed)
        results["sync_sites_steps"] = {"wrapper": args.steps, "collector": rollouts_timed * rollout_steps}
    if args.op_counts:
        rollouts_counted = max(1, args.steps // rollout_steps)
        ops["collector"], op_sites["collector"] = ops_per_step(collect, rollouts_counted, rollout_steps, args.op_sites)
        results["ops"] = ops
        if args.op_sites:
            results["op_sites"] = op_sites
    results["collector"] = per_rollout / rollout_steps
    results["bookkeeping"] = results["collector"] - results["wrapper"] - results["inference"]
    rollout = held["rollout"]
    memory["collector"] = memory_use(device)
    results["storage"] = per_step_ms(lambda: rollout.to("cpu"), 5, synchronize, warmup=1) / rollout_steps
    if device.type == "cuda":
        results["memory"] = memory
        for part, use in memory.items():
            print(f"MiB after {part}: " + ", ".join(f"{key} {value:,.0f}" for key, value in use.items()))
    collector.shutdown()
    env.close()
    ms = {k: v for k, v in results.items() if isinstance(v, float) and k != "reset_steps"}
    print("ms per env step: " + ", ".join(f"{k} {v:.3f}" for k, v in ms.items()))
    print(f"steps with a reset (where final_obs_pass runs again): {results['reset_steps']:.0%}")
    if ops:
        print("tensor operations per env step: " + ", ".join(f"{k} {v:.1f}" for k, v in ops.items()))
    for part, sites in op_sites.items():
        for site, count in sites.items():
            print(f"operations per {part} step: {count:.2f} {site}")
    for part, steps in results.get("sync_sites_steps", {}).items():
        for site, count in results[f"sync_sites_{part}"].items():
            print(f"host waits in {steps} {part} steps: {count} at {site}")
    print(f"RESULT {json.dumps(results)}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

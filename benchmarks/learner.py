"""Time of the PPO learner's update alone (GAE, then epochs of minibatches) on synthetic batches (a benchmark).

    python benchmarks/learner.py --task Isaac-Cartpole-Direct --agent torchrl_lstm --num_envs 4096 --device cuda:0 \\
        --variants default,agent.speed=off,agent.policy.recurrent_backend=pad+agent.cudagraphs=false \\
        [--profile] [--memory DIR] [--json out.json]

No simulator: the batch is a rollout of the learner's own collection policy on random observations, with episode
ends at random (``--done_prob`` per step, a quarter of them time-outs), laid out as the collectors deliver it
(``compact_obs``, final observations under ``("next", "final_obs")``). This isolates the learner, which bounds
asynchronous training on a GPU. The agent config is resolved as ``scripts/train.py`` resolves it; each variant is
a comma-free list of its Hydra overrides joined with ``+`` (``default`` for none) and runs in its own process;
``--profile`` prints the operators that take the time; on a GPU ``--memory`` adds the learner's memory to the result
(allocated, peak, reserved by torch's caching allocator; the process's whole use from the driver) and writes a
snapshot of the allocator with the Python stack of each allocation to ``DIR/<variant>.pickle`` (read it with
https://pytorch.org/memory_viz); its update times include the recording's cost. With ``agent.compile`` the result
holds torch's compile timers (``compile_s``: dynamo's tracing, the caches' loads or the compilation). With the lag
correction (asynchronous collection, the default) the result holds the first update's ``truncated_fraction`` and
mean ``importance_weight`` (``lag0``): its batch was collected by the policy it updates, so every step is of lag 0,
and a truncated fraction above zero measures how far the learner's log-probabilities of the collected actions are
from the collection policy's own (beyond ``ppo.TRUNCATED_LOG_RATIO``).
Runs kitless with the project's venv here, and on a GPU machine with ``../shared/gpu-bundle`` unpacked.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import pickle
import statistics
import time

import torch
from tensordict import TensorDict

COMPILE_TIMERS = ("bytecode_tracing", "OutputGraph.call_user_compiler", "AOTAutogradCache.inductor_load")
COMPILE_TIMERS += ("PyCodeCache.load_by_key_path", "create_aot_dispatcher_function", "compile_fx_inner")
"""torch's compile timers the result reports: dynamo's tracing, the compiler's part, the caches' loads and, without
them, AOTAutograd's and inductor's compilation (the backward graph's compiles later, outside the compiler's part)."""

# observation and action sizes of the tasks (read here instead of from a simulation, which this benchmark avoids)
TASK_SIZES = {"Isaac-Cartpole-Direct": (4, 1), "Isaac-Velocity-Flat-AnymalD": (48, 12)}


def make_learner(task: str, agent: str, device: str, overrides: list[str]):
    """The PPO learner of ``scripts/train.py`` for the task and agent, with the ``agent.*`` overrides."""
    from isaaclab_torchrl.agents.validation import validate_agent_cfg
    from isaaclab_torchrl.cli import resolve_task
    from isaaclab_torchrl.models import EnvInterface
    from isaaclab_torchrl.runners import PPO

    args = argparse.Namespace(task=task, agent=agent, device=device, num_envs=None, seed=None)
    env_cfg, cfg = resolve_task(args, overrides)
    validate_agent_cfg(cfg, env_cfg.scene.num_envs)  # agent.speed=auto: on a GPU, the compiled and graphed update
    obs_dim, action_dim = TASK_SIZES[task]
    interface = EnvInterface(("policy",), obs_dim, ("policy",), obs_dim, action_dim)
    torch.manual_seed(cfg.seed)
    return PPO(cfg, interface, device, lag_corrected=not cfg.collector.sync)


@torch.no_grad()
def synthetic_batch(learner, num_envs: int, done_prob: float, generator: torch.Generator) -> TensorDict:
    """A [num_envs, steps] rollout of the collection policy, as a collector with ``compact_obs`` stores it."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import set_recurrent_mode

    from isaaclab_torchrl.recurrent import ROLLOUT_START_KEY, fold_states

    device = learner.device
    obs_dim = learner.interface.actor_obs_dim

    def observation():
        return torch.randn(num_envs, obs_dim, device=device, generator=generator)

    td = TensorDict(
        {"policy": observation(), "is_init": torch.ones(num_envs, 1, dtype=torch.bool, device=device)},
        batch_size=[num_envs],
        device=device,
    )
    rollout = []
    # the actions sampled, as the collectors sample them (the policy's default is its mean, whose log-probability's
    # gradient with respect to the mean is zero at lag 0: the update would then move the noise's scale only)
    with set_recurrent_mode(False), set_exploration_type(ExplorationType.RANDOM):
        # new episodes start from zero recurrent states (what the collectors' state primers write)
        states = learner.collection_policy(td.clone()).get("next", TensorDict(batch_size=[num_envs]))
        td.update(states.apply(torch.zeros_like))
        for _ in range(learner.cfg.num_steps_per_env):
            td = learner.collection_policy(td)
            done = torch.rand(num_envs, 1, device=device, generator=generator) < done_prob
            truncated = done & (torch.rand(num_envs, 1, device=device, generator=generator) < 0.25)
            next_td = td.get("next", TensorDict(batch_size=[num_envs], device=device))
            td["next"] = next_td.update(
                {
                    "reward": torch.randn(num_envs, 1, device=device, generator=generator),
                    "done": done,
                    "terminated": done & ~truncated,
                    "truncated": truncated,
                    "final_obs": {"policy": observation()},
                }
            )
            rollout.append(td.clone())
            td = next_td.select(*states.keys()).apply(
                lambda state, done=done: state.masked_fill(done.unsqueeze(-1), 0.0)
            )
            td.update({"policy": observation(), "is_init": done})
    batch = torch.stack(rollout, dim=1)
    keys = list(learner.state_shapes)
    if keys:  # the recurrent states the rollout started from, folded across its steps; no next states
        first = fold_states(batch[:, 0].select(*keys), batch.shape[1])
        batch = batch.exclude(*keys, *(("next", key) for key in keys)).set(ROLLOUT_START_KEY, first)
    return batch


def run_variant(args, variant: str) -> dict:
    overrides = [] if variant == "default" else variant.split("+")
    if args.memory:
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=200_000)
    learner = make_learner(args.task, args.agent, args.device, overrides)
    generator = torch.Generator(device=args.device).manual_seed(0)
    batches = [synthetic_batch(learner, args.num_envs, args.done_prob, generator) for _ in range(2)]
    times, first = [], None
    for iteration in range(args.iterations):
        start = time.perf_counter()
        stats = learner.update(batches[iteration % 2].clone())  # returns floats: the device has finished
        times.append(time.perf_counter() - start)
        first = first or stats
    result = {
        "variant": variant,
        "first_update_s": times[0],
        "update_s": statistics.median(times[args.warmup :]),
        "steps_per_s": args.num_envs * learner.cfg.num_steps_per_env / statistics.median(times[args.warmup :]),
        "kl": stats["kl"],
    }
    if "truncated_fraction" in first:  # the first update's batch was collected by the policy it updates: no lag
        result["lag0"] = {key: first[key] for key in ("truncated_fraction", "importance_weight")}
    if learner.cfg.compile:  # torch's compile timers, seconds (the first update's compilation, traced or from caches)
        timers = torch._dynamo.utils.compilation_time_metrics
        result["compile_s"] = {key: sum(timers[key]) for key in COMPILE_TIMERS if key in timers}
    if args.memory:
        result |= memory_use(learner.device)
        snapshot = torch.cuda.memory._snapshot()
        with open(os.path.join(args.memory, variant.replace("/", "_") + ".pickle"), "wb") as file:
            pickle.dump(snapshot, file)
        torch.cuda.memory._record_memory_history(enabled=None)
        print(memory_summary(snapshot), flush=True)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        with profile(activities=activities) as prof:
            learner.update(batches[0].clone())
        sort = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=sort, row_limit=25), flush=True)
        events = prof.key_averages()
        result["cuda_kernel_launches"] = sum(e.count for e in events if e.key == "cudaLaunchKernel")
    return result


def memory_use(device: torch.device) -> dict:
    """MiB: what tensors hold, their peak, what the caching allocator holds (CUDA graphs' pools included), and the
    process's whole use as the driver counts it (the CUDA context and libraries' workspaces besides)."""
    free, total = torch.cuda.mem_get_info(device)
    mib = 2**20
    return {
        "allocated_mib": torch.cuda.memory_allocated(device) / mib,
        "peak_allocated_mib": torch.cuda.max_memory_allocated(device) / mib,
        "reserved_mib": torch.cuda.memory_reserved(device) / mib,
        "peak_reserved_mib": torch.cuda.max_memory_reserved(device) / mib,
        "device_used_mib": (total - free) / mib,  # the whole GPU's: run nothing else on it
    }


def origin(frames: list[dict], depth: int = 3) -> str:
    """An allocation's innermost Python frames, this project's and its libraries' first."""
    own = [f for f in frames if any(part in f["filename"] for part in ("isaaclab_torchrl", "torchrl", "tensordict"))]
    names = [f"{f['filename'].split('site-packages/')[-1]}:{f['line']}:{f['name']}" for f in own or frames]
    return " < ".join(names[:depth])


def memory_summary(snapshot: dict, rows: int = 12) -> str:
    """The caching allocator's pools (the CUDA graphs' are their own), and the allocations alive at the peak of
    the recorded history by where they were made."""
    mib = 2**20
    lines = ["pool (id, stream): reserved MiB, allocated MiB"]
    pools = collections.defaultdict(lambda: [0, 0])
    for segment in snapshot["segments"]:
        key = (tuple(segment.get("segment_pool_id", ())), segment.get("stream"))
        pools[key][0] += segment["total_size"]
        pools[key][1] += segment["allocated_size"]
    lines += [f"  {key}: {total / mib:,.0f}, {used / mib:,.0f}" for key, (total, used) in pools.items()]
    for trace in snapshot.get("device_traces", []):
        live, total, peak, peak_live = {}, 0, 0, {}
        for event in trace:
            if event["action"] == "alloc":
                live[event["addr"]] = event
                total += event["size"]
            elif event["action"] == "free_completed" and event["addr"] in live:
                total -= live.pop(event["addr"])["size"]
            if total > peak:
                peak, peak_live = total, dict(live)
        by_origin = collections.Counter()
        for event in peak_live.values():
            by_origin[origin(event.get("frames", []))] += event["size"]
        lines.append(f"peak of the recorded allocations: {peak / mib:,.0f} MiB, by origin:")
        lines += [f"  {size / mib:8,.0f}  {where}" for where, size in by_origin.most_common(rows)]
    return "\n".join(lines)


def run_in_child(args, variant: str, results) -> None:
    results.put(run_variant(args, variant))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASK_SIZES), default="Isaac-Cartpole-Direct")
    parser.add_argument("--agent", default="torchrl_lstm", help="As train.py's --agent: torchrl, torchrl_lstm, ...")
    parser.add_argument("--num_envs", type=int, default=4096)
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--done_prob", type=float, default=0.02)
    parser.add_argument("--variants", default="default")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--memory", metavar="DIR", help="Report the learner's GPU memory; snapshots into DIR.")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds one variant may take.")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.memory:
        if not args.device.startswith("cuda"):
            parser.error("--memory reads the CUDA caching allocator: give a --device cuda:N")
        os.makedirs(args.memory, exist_ok=True)
    context = multiprocessing.get_context("spawn")  # a fresh process per variant: no compiled state carries over
    results = []
    for variant in args.variants.split(","):
        queue = context.Queue()
        process = context.Process(target=run_in_child, args=(args, variant, queue))
        process.start()
        process.join(args.timeout)
        if process.is_alive():  # a variant that compiles or runs for too long is reported, not waited for
            process.kill()
            process.join()
            print(f"{variant}: not finished within {args.timeout:.0f} s", flush=True)
            results.append({"variant": variant, "timed_out_s": args.timeout})
        elif process.exitcode != 0 or queue.empty():
            print(f"{variant}: failed (exit code {process.exitcode}, its traceback above)", flush=True)
            results.append({"variant": variant, "exitcode": process.exitcode})
        else:
            result = queue.get()
            results.append(result)
            print(
                f"{variant}: update {result['update_s'] * 1e3:.1f} ms (first {result['first_update_s']:.2f} s), "
                f"{result['steps_per_s']:,.0f} steps/s learner bound",
                flush=True,
            )
            if args.memory:
                print(", ".join(f"{key} {value:,.0f}" for key, value in result.items() if key.endswith("_mib")))
            if "compile_s" in result:
                print("compile s: " + ", ".join(f"{key} {value:.2f}" for key, value in result["compile_s"].items()))
            if "lag0" in result:
                print("lag 0: " + ", ".join(f"{key} {value:.4f}" for key, value in result["lag0"].items()))
        if args.json:
            with open(args.json, "w") as file:
                json.dump({"args": vars(args), "results": results}, file, indent=1)


if __name__ == "__main__":
    main()

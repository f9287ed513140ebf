"""A training run from the command line to its exit code: the steps ``scripts/train.py`` takes, in order.

:func:`prepare` does everything that can fail on bad input before any simulator starts (configs resolved and
validated once, the checkpoint to continue from, the run folder, the process group under torchrun);
:func:`start` builds the workers' factories, learns the network sizes and builds the runner; :func:`train` runs it
and turns how it ended into the exit code. The benchmarks use the first two steps.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import dataclasses
import gc
import inspect
import os
import sys

import torch
import yaml
from isaaclab.utils.io import dump_yaml
from isaaclab_rl.entrypoints.common import apply_video_recording, pre_launch_video_config

from .agents.torchrl_cfg import TorchRLDistillationRunnerCfg, TorchRLRunnerCfg
from .agents.validation import ConfigError, check_teacher_checkpoint, learner_device, validate_agent_cfg
from .cli import (
    UsageError,
    apply_train_args,
    check_isaaclab_args,
    checkpoint_path,
    launcher_args,
    make_train_parser,
    parse_args,
    resolve_task,
)
from .envs import IsaacLabEnvFactory, env_obs_groups, make_env_factories
from .interfaces import read_env_interface
from .models import EnvInterface
from .runners import TorchRLRunner, load_checkpoint
from .runners.code_state import store_code_state
from .runners.compilation import compile_cache_dir
from .runners.distillation import teacher_only
from .runners.distributed import DistributedContext, init_distributed, parameter_checksum
from .runners.on_policy_runner import TrackerStartError
from .runners.safety import NonFiniteError, WorkerFailure
from .runs import RunFolderError, create_run_dir, experiment_root, later_checkpoints, new_run_dir, resumed_run_dir
from .symmetry import SymmetryError


def speed_summary(agent_cfg: TorchRLRunnerCfg) -> str:
    """One line that says how the resolved config trains (``scripts/train.py`` prints it at start)."""
    collector, policy = agent_cfg.collector, agent_cfg.policy
    update = "compiled + CUDA graph" if agent_cfg.cudagraphs else "compiled" if agent_cfg.compile else "eager"
    if policy.rnn_type is not None:
        update += f" ({policy.rnn_type}, recurrent backend {policy.recurrent_backend})"
    if getattr(agent_cfg.algorithm, "use_mixed_precision", False):
        update += ", bfloat16 losses"
    if agent_cfg.tf32 and learner_device(agent_cfg).startswith("cuda"):
        update += ", TF32 products"
    workers = collector.num_collectors
    storage = collector.storing_device or agent_cfg.device
    return (
        f"update: {update}; inference: {'CUDA graph' if collector.cudagraph_policy else 'eager'}; "
        f"collection: {'sync' if collector.sync else 'async'}, {workers} worker{'s' if workers > 1 else ''}; "
        f"batches stored on {storage}"
    )


@dataclasses.dataclass
class TrainingRun:
    """What :func:`prepare` resolved: the configs as they train, and where the run reads and writes."""

    args: argparse.Namespace
    env_cfg: object
    agent_cfg: object
    checkpoint: str | None = None
    """The checkpoint the run continues from (``--resume`` / ``--checkpoint``), or ``None``."""
    checkpoint_interface: EnvInterface | None = None
    """The sizes the checkpoint was trained on, where it stores them."""
    teacher_only: bool = False
    """Whether the checkpoint gives a distillation run its teacher only (a PPO checkpoint) and the run is new."""
    log_dir: str | None = None
    """The run folder; ``None`` on the ranks other than 0 under torchrun."""
    new_folder: bool = False
    """Whether :func:`prepare` created the run folder (a new run, not a resumed one)."""
    distributed: DistributedContext | None = None
    eval_env_cfg: object = None
    """The evaluation worker's env config (``agent.eval_interval``): the task's play config, as ``play.py`` resolves
    it with the same overrides; ``None`` without evaluation."""


def resolve_configs(args: argparse.Namespace, hydra_args: list[str]):
    """The env and agent configs of the command line, the agent's resolved and validated (one place for both).

    Raises:
        UsageError, ConfigError: bad input, in one line.
    """
    check_isaaclab_args(args, train=True)
    env_cfg, agent_cfg = resolve_task(args, hydra_args)
    apply_train_args(args, agent_cfg)
    validate_agent_cfg(agent_cfg, env_cfg.scene.num_envs)
    return env_cfg, agent_cfg


def prepare(args: argparse.Namespace, hydra_args: list[str]) -> TrainingRun:
    """Resolves the configs, finds the checkpoint to continue from, joins the process group under torchrun and
    creates the run folder, before any simulator starts.

    Raises:
        UsageError, ConfigError: bad input, in one line; nothing has been written.
    """
    if args.distributed:
        if "LOCAL_RANK" not in os.environ:
            raise UsageError("--distributed runs under torchrun: torchrun --nproc_per_node G scripts/train.py ...")
        if (args.device is None or args.device.startswith("cuda")) and torch.cuda.is_available():
            args.device = f"cuda:{os.environ['LOCAL_RANK']}"  # each rank simulates and learns on its own GPU
    env_cfg, agent_cfg = resolve_configs(args, hydra_args)
    run = TrainingRun(args, env_cfg, agent_cfg)
    if args.print_config:
        return run
    if agent_cfg.eval_interval:
        run.eval_env_cfg = resolve_task(args, hydra_args, play_mode=True)[0]
    distillation = isinstance(agent_cfg, TorchRLDistillationRunnerCfg)
    if distillation and not (args.resume or args.checkpoint):
        raise UsageError(
            "A distillation run learns from a teacher: name its checkpoint with --checkpoint (a file, a run folder, "
            "or with --load_run a run of this experiment), a PPO run's to start, a distillation run's to continue."
        )
    if distillation and args.distributed:
        raise UsageError("--distributed does not run distillation: train the student on one GPU.")
    if args.resume or args.checkpoint:
        run.checkpoint = checkpoint_path(experiment_root(agent_cfg.experiment_name), args.checkpoint, args.load_run)
        try:
            state = load_checkpoint(run.checkpoint, rsl_rl_teacher=distillation)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        if distillation:
            check_teacher_checkpoint(agent_cfg, state, run.checkpoint)
            run.teacher_only = teacher_only(state)
        stored = None if run.teacher_only else state.get("interface")
        run.checkpoint_interface = None if stored is None else EnvInterface.from_dict(stored)
    if args.distributed:
        # the group waits as long as the slowest rank's first batch may take
        timeout = agent_cfg.collector.first_batch_timeout_s + 60.0
        run.distributed = init_distributed(use_cuda=args.device.startswith("cuda"), timeout_s=timeout)
        # each rank's environments and exploration differ: distinct seeds per rank and collector
        agent_cfg.seed += run.distributed.rank * agent_cfg.collector.num_collectors
    if run.distributed is None or run.distributed.is_main:  # only rank 0 writes
        # a resumed run goes on in its own folder, with its TensorBoard step axis; a distillation run that takes its
        # teacher from a PPO checkpoint is a new run
        # an earlier checkpoint of a run goes on in a new folder: in its own it would overwrite the later ones
        resumed = run.checkpoint and not run.teacher_only and resumed_run_dir(run.checkpoint, agent_cfg.experiment_name)
        iteration = state.get("iteration") if resumed else None
        later = later_checkpoints(resumed, iteration) if iteration is not None else []
        if later:
            print(
                f"[torchrl] {run.checkpoint} is iteration {iteration} of a run that went on to iteration {later[-1]}: "
                "continuing in a new run folder, which leaves that run's checkpoints as they are",
                flush=True,
            )
            resumed = None
        run.log_dir = resumed or new_run_dir(agent_cfg.experiment_name, agent_cfg.run_name, args.run_timestamp)
        if not resumed and os.path.isdir(run.log_dir) and later_checkpoints(run.log_dir, -1):
            raise UsageError(
                f"The run folder {run.log_dir} holds another run's checkpoints: give the new run its own "
                "(--run_name, --run_timestamp), or continue that one (--resume --load_run)."
            )
        if args.video:
            record_training_video(env_cfg, run.log_dir, args)
            if run.eval_env_cfg is not None:
                record_training_video(run.eval_env_cfg, run.log_dir, args, subdir="eval")
        run.new_folder = not os.path.exists(run.log_dir)
        try:
            create_run_dir(run.log_dir)
        except RunFolderError as exc:
            raise UsageError(str(exc)) from None
    return run


def record_training_video(env_cfg, log_dir: str, args: argparse.Namespace, subdir: str = "train") -> None:
    """``--video``: Isaac Lab's recorder on the env config (``<run>/videos/train``; the evaluation worker's in
    ``<run>/videos/eval``); it records inside the first collector worker's ``env.step()``, from the visualizer named
    with ``--viz``."""
    pre_launch_video_config(env_cfg, args)
    try:
        apply_video_recording(env_cfg, log_dir, args, subdir=subdir)
    except ValueError as exc:
        raise UsageError(
            f"--video needs a renderer or visualizer to record from, and none is available: {exc}"
        ) from exc


def make_workers(run: TrainingRun) -> list[IsaacLabEnvFactory]:
    """One environment factory per collector worker; the first records the video (with ``--video``), the others
    step the same config without a recorder."""
    silent_env_cfg = copy.deepcopy(run.env_cfg)
    silent_env_cfg.video_recorders = []
    env_cfgs = [run.env_cfg] + [silent_env_cfg] * (run.agent_cfg.collector.num_collectors - 1)
    args = run.args
    return make_env_factories(args.task, env_cfgs, run.agent_cfg, launcher_args(args), args.external_callback)


def make_eval_worker(run: TrainingRun) -> IsaacLabEnvFactory | None:
    """The evaluation worker's environments: ``agent.eval_episodes`` of the play config, with the seed ``play.py``
    uses and no random episode starts; on rank 0 only, and none without evaluation."""
    if run.eval_env_cfg is None or (run.distributed is not None and not run.distributed.is_main):
        return None
    agent_cfg, args = run.agent_cfg, run.args
    return IsaacLabEnvFactory(
        args.task,
        run.eval_env_cfg,
        launcher_args(args),
        num_envs=agent_cfg.eval_episodes,
        seed=agent_cfg.seed,
        clip_actions=agent_cfg.clip_actions,
        obs_groups=env_obs_groups(agent_cfg),
        external_callback=args.external_callback,
    )


def start(run: TrainingRun) -> TorchRLRunner:
    """The runner of a prepared run: workers' factories, network sizes, networks, and the checkpoint loaded.

    Sizes remembered from an earlier run are checked against the checkpoint's before it is loaded: when they
    differ, the probe reads the task's sizes again, and a stale entry is named and replaced.

    Raises:
        UsageError: the checkpoint does not fit this task and agent, or the agent's symmetry function cannot be
            applied.
    """
    factories = make_workers(run)
    eval_factory = make_eval_worker(run)
    try:
        interface, cached = read_env_interface(factories)
    except SymmetryError as exc:
        raise UsageError(str(exc)) from None
    source = "remembered from an earlier run" if cached else "read by a probe process"
    print(f"[torchrl] environment: {interface} ({source})", flush=True)
    if run.checkpoint and not run.teacher_only and cached and run.checkpoint_interface != interface:
        probed = read_env_interface(factories, probe=True)[0]
        if probed != interface:
            print(f"[torchrl] Stale sizes remembered for this task ({interface}): replaced by the probe's")
            interface = probed
    runner = TorchRLRunner(
        factories, interface, run.agent_cfg, run.log_dir, distributed=run.distributed, eval_env_factory=eval_factory
    )
    if run.checkpoint:
        try:
            continues = runner.load(run.checkpoint, optimizer=run.args.resume_optimizer_state)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        learning_rate = float(runner.learner.optimizer.param_groups[0]["lr"])
        if continues:
            print(
                f"[torchrl] Resuming from {run.checkpoint} (iteration {runner.iteration}, "
                f"learning rate {learning_rate:.6g})"
            )
        else:
            print(f"[torchrl] Teacher: the actor of {run.checkpoint}")
    if run.log_dir is not None and not os.path.exists(os.path.join(run.log_dir, "params", "agent.yaml")):
        dump_yaml(os.path.join(run.log_dir, "params", "env.yaml"), run.env_cfg)
        dump_yaml(os.path.join(run.log_dir, "params", "agent.yaml"), run.agent_cfg)
        store_code_state(run.log_dir, [__file__, inspect.getfile(type(run.env_cfg))])
    if run.log_dir is not None:
        # Isaac Lab's two lines (its Ray tuner reads them to find the run folder and its TensorBoard events)
        print(f"[INFO] Logging experiment in directory: {os.path.dirname(run.log_dir)}")
        print(f"Exact experiment name requested from command line: {os.path.basename(run.log_dir)}", flush=True)
    return runner


def error(message: str) -> None:
    print(f"[torchrl] error: {message}", file=sys.stderr)


def train(run: TrainingRun) -> int:
    """Starts the runner, trains, and reports how training ended as the exit code."""
    print(f"[torchrl] {speed_summary(run.agent_cfg)}", flush=True)
    try:
        runner = start(run)
    except UsageError as exc:  # the checkpoint does not fit this task and agent
        error(str(exc))
        if run.new_folder:  # the (still empty) run folder made for a checkpoint from elsewhere, and its parents
            with contextlib.suppress(OSError):
                os.removedirs(run.log_dir)
        return 2
    context, log_dir = run.distributed, run.log_dir
    try:
        stopped_by = runner.learn()
    except KeyboardInterrupt:
        print(f"[torchrl] Training aborted. Logs and checkpoints so far: {log_dir}", file=sys.stderr)
        return 130
    except TrackerStartError as exc:
        error(str(exc))
        return 2
    except (WorkerFailure, NonFiniteError) as exc:
        rank = "" if context is None else f"rank {context.rank} stopped: "  # which rank says it, under torchrun
        error(f"{rank}{exc}\n[torchrl] Logs and checkpoints: {log_dir}")
        return 1
    except Exception as exc:
        if context is None:
            raise
        # another rank failed: its collective operations end with an error here
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error(f"rank {context.rank} stopped: {type(exc).__name__}: {message}")
        return 1
    if context is not None:
        checksum = parameter_checksum(runner.learner.actor) + parameter_checksum(runner.learner.critic)
        # one write with its newline: the ranks share the terminal, and print's two writes could interleave
        line = f"[torchrl] rank {context.rank} of {context.world_size}: parameter checksum {checksum:.12e}\n"
        print(line, end="", flush=True)
        torch.distributed.destroy_process_group()
    if stopped_by is not None:
        print(
            f"[torchrl] Stopped by {stopped_by.name} at iteration {runner.iteration}. Logs and checkpoints: {log_dir}"
        )
        return 128 + stopped_by.value
    if log_dir is not None:
        print(f"[torchrl] Logs and checkpoints: {log_dir}")
    return 0


def main(argv: list[str]) -> int:
    """``scripts/train.py``'s command line to its exit code: 0 done, 2 bad input (one line), 1 a failed worker or
    update, 130 interrupted, 128 + N stopped by signal N."""
    # the interpreter's exit then skips collecting what dies with it (2 s after a short CPU run; the run's files are
    # closed before that)
    atexit.register(gc.freeze)
    # the compiled update's graphs and kernels persist in the user's cache folder: a second run compiles faster
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir()
    args, hydra_args = parse_args(make_train_parser(), argv)
    try:
        run = prepare(args, hydra_args)
    except (UsageError, ConfigError) as exc:
        error(str(exc))
        return 2
    if args.print_config:
        print(yaml.safe_dump(run.agent_cfg.to_dict(), sort_keys=False), end="")
        return 0
    return train(run)


__all__ = [
    "ConfigError",
    "TrainingRun",
    "UsageError",
    "main",
    "make_workers",
    "prepare",
    "resolve_configs",
    "start",
    "train",
]

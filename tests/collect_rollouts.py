"""Collects rollouts of Cartpole-Direct on the CPU as a training worker does, with an MLP and then a recurrent
policy from fixed seeds, and saves them: ``python tests/collect_rollouts.py OUT [--plain | --graphed | --every-state]
[--finite-clipped] [--device=cuda:0]`` (``--device`` runs simulation and policy on a GPU: the graphed policy then
replays a CUDA graph).

With ``--plain`` the environment is Isaac Lab's own torchrl wrapper with this package's additions, torchrl's
reset path (a reset call after every step with a finished episode, which Isaac Lab has already reset) and torchrl's
``StepCounter`` and ``RewardSum`` transforms for the episodes' running sums, and the collector keeps trajectory
ids; without it, this package's :class:`~isaaclab_torchrl.envs.IsaacLabEnv` (torchrl's native auto-reset) and an
asynchronous worker's collector. The two must collect the same batches (``tests/test_collection_paths.py``).
With ``--graphed`` the asynchronous worker's collector runs the policy as ``agent.collector.cudagraph_policy`` does
(on the CPU tensordict's ``CudaGraphModule`` calls it eagerly). With ``--every-state`` it stores the recurrent state
of every step, not the one each rollout starts from. With ``--finite-clipped`` the actions are clipped
(``agent.clip_actions``) and the task's time limit is terminal (``is_finite_horizon``).
"""

from __future__ import annotations

import itertools
import sys

import torch
from isaaclab_rl.torchrl import IsaacLabTorchRLWrapper
from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv
from torchrl.modules import set_recurrent_mode

import isaaclab_torchrl  # noqa: F401  (registers the torchrl agents on Isaac Lab's tasks)
from isaaclab_torchrl import envs, training
from isaaclab_torchrl.cli import make_train_parser, parse_args
from isaaclab_torchrl.models import CollectionPolicyFactory
from isaaclab_torchrl.recurrent import ROLLOUT_START_KEY, first_states
from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.collection import AsyncCompactCollector, CompactCollector

NUM_ENVS, STEPS, ROLLOUTS = 16, 16, 4
OVERRIDES = ["env.episode_length_s=0.5", "env.max_cart_pos=0.5"]
"""Episodes of at most 30 steps, ended early when the cart leaves [-0.5, 0.5] m: the rollouts hold time-outs and
terminations."""
AGENTS = ("torchrl", "torchrl_lstm")
FINITE_CLIPPED = ["agent.clip_actions=0.3", "env.is_finite_horizon=true"]
"""Actions clipped well inside the policy's noise, and time-outs that end episodes as terminations."""


class PlainIsaacLabEnv(envs.IsaacLabEnv):
    """Isaac Lab's wrapper's step (the final observations written into the next observations) and torchrl's reset
    path, with the same final observations and episode terms as :class:`~isaaclab_torchrl.envs.IsaacLabEnv` and
    without its running sums (:func:`plain_transformed_env` adds torchrl's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self._torchrl_native_autoreset
        spec = self.observation_spec.clone()
        for key in envs.EPISODE_SUMS:
            del spec[key]
        self.observation_spec = spec

    def _step(self, tensordict):
        out = IsaacLabTorchRLWrapper._step(self, tensordict)
        out[envs.FINAL_OBS_KEY] = out.select(*self.next_obs_keys)
        out[envs.EPISODE_LOG_KEY] = self._episode_log()
        return out

    def _reset(self, tensordict=None, **kwargs):
        return super()._reset(tensordict, **kwargs).exclude(*envs.EPISODE_SUMS)


def plain_transformed_env(env):
    """The env of the plain path: torchrl's transforms keep the episodes' running sums."""
    return TransformedEnv(env, Compose(StepCounter(), RewardSum(in_keys=["reward"])))


def step_by_step(env, steps: int = 16) -> dict:
    """Steps ``env`` as a collector does, with random actions: how many episodes ended, whether the next observations
    of an ended episode's step are marked invalid (torchrl's own native auto-reset step writes NaN there; the
    package's :class:`~isaaclab_torchrl.autoreset.AutoResetEnv` does not), and whether each step's episode-start
    flag is the previous step's ``done``."""
    torch.manual_seed(1)
    state, ended, marked, starts_follow_done = env.reset(), 0, False, True
    for _ in range(steps):
        state["action"] = env.action_spec.rand()
        data, state = env.step_and_maybe_reset(state)
        done = data["next", "done"].squeeze(-1)
        ended += int(done.sum())
        marked |= bool(data["next", "policy"][done].isnan().any())
        starts_follow_done &= torch.equal(state["is_init"], data["next", "done"])
    return {"ended": ended, "marked": marked, "starts_follow_done": starts_follow_done}


def collect(agent: str, plain: bool, graphed: bool, every_state: bool, device: str = "cpu", extra=()) -> dict:
    argv = ["--task", "Isaac-Cartpole-Direct", "--agent", agent, "--num_envs", str(NUM_ENVS), "--device", device]
    argv += ["--viz", "none", "physics=newton_mjwarp", *OVERRIDES, *extra]
    args, hydra_args = parse_args(make_train_parser(), argv)
    run = training.TrainingRun(args, *training.resolve_configs(args, hydra_args))
    run.agent_cfg.num_steps_per_env = STEPS
    (factory,) = training.make_workers(run)
    env = factory()
    torch.manual_seed(0)
    policy = CollectionPolicyFactory(run.agent_cfg.policy, envs.env_interface(env), device)()
    collector_class = CompactCollector if plain else AsyncCompactCollector
    collector = collector_class(
        env,
        policy,
        frames_per_batch=NUM_ENVS * STEPS,
        total_frames=-1,  # the env stays open after the rollouts: step_by_step steps it
        device=device,
        compact_obs=True,
        auto_register_policy_transforms=True,
        cudagraph_policy=graphed,
        every_state=every_state,
    )
    collected = [batch.clone() for batch in itertools.islice(collector, ROLLOUTS)]
    batches = [batch.cpu().to_dict() for batch in collected]
    # torchrl marks a step of inductor's CUDA graph trees before each call of a policy it graphs itself
    graph_trees = "torch._inductor.cudagraph_trees" in sys.modules
    runs = type(collector._wrapped_policy).__name__
    stepped = step_by_step(env)
    collector.shutdown()
    env.close()
    return {
        "batches": batches,
        "policy_out_keys": [str(key) for key in policy.out_keys],
        "inductor_graph_trees": graph_trees,
        "runs": runs,
        "step_by_step": stepped,
        "relogged": relog(run.agent_cfg, envs.env_interface(env), policy, collected, device),
    }


def relog(agent_cfg, interface, policy, batches: list, device: str) -> list[dict]:
    """The log-probabilities of each batch's actions as the learner recomputes them (its actor over whole slices, in
    recurrent mode, from the states the batch holds), from the collecting policy's weights, beside the collected
    ones, and the action means likewise: the update must see what the acting policy saw."""
    learner = PPO(agent_cfg, interface, device)
    learner.collection_policy.load_state_dict(policy.state_dict())
    out = []
    for batch in batches:
        batch = batch.to(device)
        if ROLLOUT_START_KEY in batch.keys():
            batch = first_states(batch, learner.state_shapes)
        recomputed, _ = learner.proximal_log_probs_and_weights(batch)
        with torch.no_grad(), set_recurrent_mode(True):
            loc = learner.actor.get_dist(batch.clone(False)).mean
        out.append(
            {
                "collected": batch["action_log_prob"].cpu(),
                "recomputed": recomputed.cpu(),
                "collected_loc": batch["loc"].cpu(),
                "recomputed_loc": loc.cpu(),
            }
        )
    return out


def main(out: str, flags: list[str]) -> None:
    plain, graphed, every_state = (flag in flags for flag in ("--plain", "--graphed", "--every-state"))
    device = next((flag.split("=", 1)[1] for flag in flags if flag.startswith("--device=")), "cpu")
    extra = FINITE_CLIPPED if "--finite-clipped" in flags else []
    if plain:  # what the factory builds in this process
        envs.IsaacLabEnv, envs.AutoResetEnv = PlainIsaacLabEnv, plain_transformed_env
    torch.save({agent: collect(agent, plain, graphed, every_state, device, extra) for agent in AGENTS}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

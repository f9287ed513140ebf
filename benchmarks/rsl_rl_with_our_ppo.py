"""rsl_rl's training loop with this project's PPO update: which half of a learning difference is whose (a benchmark).

    python benchmarks/learning.py --task Isaac-Velocity-Flat-AnymalD --num_envs 4096 --device cuda:0 \\
        --runs rsl_rl_recurrent,rsl_rl_recurrent_our_update,torchrl_lstm_default --seeds 7,8,9

``rsl_rl_recurrent_our_update`` runs Isaac Lab's rsl_rl workflow unchanged (its env wrapper, rollout loop, logger
and episode statistics) with :class:`OurPPO` as the algorithm (``agent.algorithm.class_name``): the actions come from
this project's collection policy, stepped in rsl_rl's loop, and each rollout, laid out as the collectors deliver it
(``compact_obs``, the states each rollout starts from, the true final observations of ``env.compute_final_obs``),
goes to this project's learner. Against rsl_rl's own run it measures the update (with the networks and the policy's
sampling); against this project's runner, the collection (torchrl's collector, the env wrapper, the workers).
``rsl_rl_twin.py`` holds rsl_rl's PPO with one of this project's parts beside or inside it (the update, the acting,
the initialization). Run as a script this module is ``isaaclab_train_offline.py``, so that rsl_rl finds the
algorithms by their modules' names.
"""

from __future__ import annotations

import functools
import sys

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import set_recurrent_mode

from isaaclab_torchrl.agents import TorchRLRunnerCfg
from isaaclab_torchrl.agents.rsl_rl_port import port_rsl_rl_cfg
from isaaclab_torchrl.agents.validation import validate_agent_cfg
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.recurrent import ROLLOUT_START_KEY, fold_states, slices
from isaaclab_torchrl.runners import PPO


def our_cfg(env, cfg: dict, device: str, settings: dict | None = None) -> TorchRLRunnerCfg:
    """This project's runner config ported from rsl_rl's, as ``--agent torchrl[_lstm]`` ports it: the task's rsl_rl
    agent config from the registry, updated with the dict rsl_rl reads (the run's overrides applied), then with
    ``settings`` (runner fields, e.g. ``{"policy.recurrent_backend": "fused"}``) before it is resolved."""
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    recurrent = cfg["actor"].get("rnn_type") is not None
    entry_point = "rsl_rl_recurrent_cfg_entry_point" if recurrent else "rsl_rl_cfg_entry_point"
    rsl_cfg = load_cfg_from_registry(env.unwrapped.spec.id, entry_point)
    # the runner's own entries (multi_gpu) and this algorithm's class name stay out
    algorithm = {key: value for key, value in cfg["algorithm"].items() if key != "class_name"}
    rsl_cfg.from_dict({key: value for key, value in cfg.items() if hasattr(rsl_cfg, key)} | {"algorithm": algorithm})
    runner = port_rsl_rl_cfg(rsl_cfg)
    runner.device = device
    for key, value in (settings or {}).items():
        *path, name = key.split(".")
        setattr(functools.reduce(getattr, path, runner), name, value)
    validate_agent_cfg(runner, env.num_envs)
    return runner


class ContiguousSplitPPO(PPO):
    """The learner with rsl_rl's recurrent minibatches: contiguous blocks of environments, the same in every epoch
    and update (this project's learner splits at random, once per update)."""

    def _minibatches(self, batch):
        if not self.recurrent:
            return super()._minibatches(batch)
        count = self.cfg.algorithm.num_mini_batches
        per_minibatch = batch.shape[0] // count
        indices = torch.arange(count * per_minibatch, device=batch.device).view(count, per_minibatch)
        return [slices(batch, block, self.state_shapes) for block in indices]


class _Policy:
    """What rsl_rl's logger reads of the policy: its action noise's standard deviation."""

    def __init__(self, learner: PPO):
        self.learner = learner

    @property
    def output_std(self) -> torch.Tensor:
        return torch.tensor([self.learner.noise_std()])


class OurPPO:
    """rsl_rl's algorithm interface (``act``, ``process_env_step``, ``compute_returns``, ``update``) over this
    project's collection policy and PPO learner (one copy of the weights: the learner's)."""

    rnd = None
    intrinsic_rewards = None
    learner_class = PPO
    rsl_rl_time_outs = False
    """rsl_rl's time-out bootstrap: ``gamma * V(s_t)`` added to the time-out step's reward, which then ends the
    episode as a termination (this project's learner bootstraps with V of the true final observation)."""

    def __init__(self, learner: PPO, num_envs: int):
        self.learner = learner
        self.num_envs = num_envs
        self.keys = list(learner.state_shapes)  # the recurrent states' keys
        self.carry: TensorDict | None = None  # the next step's episode-start flags and recurrent states
        self.current: TensorDict | None = None  # the step being taken
        self.rollout: list[TensorDict] = []

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> OurPPO:
        torch.manual_seed(cfg["seed"])
        obs_dim = obs["policy"].shape[-1]
        interface = EnvInterface(("policy",), obs_dim, ("policy",), obs_dim, env.num_actions)
        learner = cls.learner_class(our_cfg(env, cfg, device), interface, device, lag_corrected=False)
        print(f"[rsl_rl_with_our_ppo] algorithm {cls.__name__}, learner {cls.learner_class.__name__}", flush=True)
        return cls(learner, env.num_envs)

    @property
    def learning_rate(self) -> float:
        return self.learner.learning_rate

    def act(self, obs: TensorDict) -> torch.Tensor:
        policy = self.learner.collection_policy
        with set_recurrent_mode(False), set_exploration_type(ExplorationType.RANDOM):
            if self.carry is None:  # the first step of training: every episode starts, from zero states
                device = obs["policy"].device
                first = TensorDict(
                    {"policy": obs["policy"], "is_init": torch.ones(self.num_envs, 1, dtype=torch.bool, device=device)},
                    [self.num_envs],
                )
                self.carry = first.exclude("policy")
                if self.keys:  # their shapes, from the mean (a sample would draw from the random stream)
                    with set_exploration_type(ExplorationType.DETERMINISTIC):
                        states = policy(first.clone()).get("next").select(*self.keys)
                    self.carry.update(states.apply(torch.zeros_like))
            step = self.carry.clone(False).set("policy", obs["policy"])
            self.current = policy(step)
        return self.current["action"]

    def process_env_step(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        # Isaac Lab writes each step's rewards and time-outs into the same buffers (rsl_rl's storage copies them)
        done = dones.bool().unsqueeze(-1)
        time_out = extras.get("time_outs", torch.zeros_like(dones)).to(done.device, torch.bool, copy=True).unsqueeze(-1)
        final = extras.get("final_obs", {}).get("policy", obs["policy"])  # refreshed on steps with resets only
        final = torch.where(done, final, obs["policy"])
        step = self.current
        if "next" not in step.keys():
            step.set("next", TensorDict(batch_size=step.batch_size, device=step.device))
        nxt = step.get("next")
        reward = rewards.to(torch.float32, copy=True).unsqueeze(-1)
        if self.rsl_rl_time_outs:  # V(s_t): the recurrent collection policy runs the critic too
            reward = reward + self.learner.cfg.algorithm.gamma * step["state_value"] * time_out
            time_out = torch.zeros_like(time_out)
        nxt.update(
            {
                "reward": reward,
                "done": done,
                "terminated": done & ~time_out,
                "truncated": done & time_out,
                "final_obs": {"policy": final},
            }
        )
        self.rollout.append(step.exclude(*(("next", key) for key in self.keys)))
        self.advance(done)

    def advance(self, done: torch.Tensor) -> None:
        """The next step's episode-start flags and recurrent states (zero where an episode ended)."""
        states = self.current.get("next").select(*self.keys)
        self.carry = states.apply(lambda state: state.masked_fill(done.unsqueeze(-1), 0.0)).set("is_init", done)

    def compute_returns(self, obs: TensorDict) -> None:
        """GAE is part of the learner's update."""

    def update(self) -> dict[str, float]:
        # stacked outside rsl_rl's inference mode: new tensors, which the update's autograd may read
        batch = torch.stack(self.rollout, dim=1)
        self.rollout = []
        if self.keys:  # the recurrent states the rollouts started from, folded across their steps
            first = fold_states(batch[:, 0].select(*self.keys), batch.shape[1])
            batch = batch.exclude(*self.keys).set(ROLLOUT_START_KEY, first)
        stats = self.learner.update(batch)
        return {key: stats[key] for key in ("value", "surrogate", "entropy")}

    def train_mode(self) -> None:
        pass

    def eval_mode(self) -> None:
        pass

    def get_policy(self) -> _Policy:
        return _Policy(self.learner)

    def save(self) -> dict:
        return {"learner": self.learner.state_dict()}


class OurPPOContiguousSplit(OurPPO):
    """:class:`OurPPO` whose learner splits minibatches as rsl_rl's recurrent generator does."""

    learner_class = ContiguousSplitPPO


class OurPPORslRlTimeOuts(OurPPO):
    """:class:`OurPPO` with rsl_rl's time-out bootstrap."""

    rsl_rl_time_outs = True


if __name__ == "__main__":
    from isaaclab_train_offline import main

    sys.exit(main(sys.argv[1:]))

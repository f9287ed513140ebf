"""rsl_rl's PPO with this project's pieces beside it or inside it, one at a time (a benchmark): which part of a
learning difference is whose, on the task's own rollouts.

    python benchmarks/learning.py --task Isaac-Velocity-Flat-AnymalD --num_envs 4096 --device cuda:0 \\
        --runs rsl_rl_recurrent_twin_update_rsl_rl_time_outs,rsl_rl_recurrent_our_acting,rsl_rl_recurrent_our_init \\
        --seeds 7,8

* :class:`TwinPPO` (``rsl_rl_recurrent_twin_update``): rsl_rl trains; this project's learner updates beside it on
  every rollout from the same weights, Adam moments and learning rate (the update alone).
* :class:`OurActingPPO` (``rsl_rl_recurrent_our_acting``): rsl_rl's PPO acting through this project's collection
  policy (the acting alone).
* :class:`OurInitPPO` (``rsl_rl_recurrent_our_init``): rsl_rl's PPO from this project's initial weights (the
  initialization alone).

They run as ``rsl_rl_with_our_ppo.py`` (Isaac Lab's rsl_rl workflow), which finds them by this module's name.
"""

from __future__ import annotations

import copy
import json

import torch
from rsl_rl.algorithms import PPO as RslRlPPO
from rsl_rl_with_our_ppo import ContiguousSplitPPO, OurPPO, our_cfg
from tensordict import TensorDict
from tensordict.nn import AddStateIndependentNormalScale
from torchrl.modules import MLP

from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO


def _noise(actor: torch.nn.Module) -> torch.Tensor:
    """The learner's actor's noise scale (rsl_rl's ``std_param``)."""
    return next(m for m in actor.modules() if isinstance(m, AddStateIndependentNormalScale)).state_independent_scale


def _with_learners(
    obs: TensorDict, env, cfg: dict, device: str, learner_class: type, variants: dict[str, dict]
) -> tuple[RslRlPPO, dict[str, PPO]]:
    """rsl_rl's algorithm (the class ``cfg`` names) and this project's learners built from the same config, one per
    variant (a name and the runner settings it changes)."""
    alg = RslRlPPO.construct_algorithm(obs, env, cfg, device)
    obs_dim = obs["policy"].shape[-1]
    interface = EnvInterface(("policy",), obs_dim, ("policy",), obs_dim, env.num_actions)
    learners = {}
    for name, settings in variants.items():
        runner_cfg = our_cfg(env, copy.deepcopy(cfg), device, settings)
        learners[name] = learner_class(runner_cfg, interface, device, lag_corrected=False)
    return alg, learners


def _pairs(learner: PPO, rsl_rl: RslRlPPO) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(the learner's parameter, rsl_rl's) in one order: the recurrent layer, the MLP, the actor's noise."""
    pairs = []
    for ours, theirs in ((learner.actor, rsl_rl.actor), (learner.critic, rsl_rl.critic)):
        mine = [m for m in ours.modules() if isinstance(m, torch.nn.LSTM)]
        found = list(mine[0].parameters()) if mine else []
        found += list(next(m for m in ours.modules() if isinstance(m, MLP)).parameters())
        reference = list(theirs.rnn.rnn.parameters()) if theirs.is_recurrent else []
        reference += list(theirs.mlp.parameters())
        if ours is learner.actor:
            found.append(_noise(ours))
            reference.append(theirs.distribution.std_param)
        pairs += list(zip(found, reference, strict=True))
    return pairs


class TwinPPO(RslRlPPO):
    """rsl_rl's PPO, acting and learning as usual, with this project's learner updating beside it on each rollout
    (``rsl_rl_recurrent_twin_update``): before every update the learner takes rsl_rl's weights, Adam moments and
    learning rate, updates on the same rollout in the collectors' layout (time-outs bootstrapped with V of the true
    final observation, its own rule), and the two updates' results are logged side by side (``Loss/twin_*``) and
    printed as one JSON line per update. Training follows rsl_rl's weights; the learner only measures. A recurrent
    learner splits its minibatches as rsl_rl does, so that the two see the same samples (an MLP's are drawn apart)."""

    learners: dict[str, PPO]
    rsl_rl_time_outs = False  # the learners given rsl_rl's time-out bootstrap: TwinPPORslRlTimeOuts
    variants: dict[str, dict] = {"": {}}
    """The learners beside rsl_rl: a name (their logged keys' suffix) and the runner settings it changes."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> TwinPPO:
        alg, alg.learners = _with_learners(obs, env, cfg, device, ContiguousSplitPPO, cls.variants)
        alg.twin_steps, alg.first_is_init, alg.updates = [], None, 0
        return alg

    def process_env_step(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        # what rsl_rl's storage does not keep (copies: Isaac Lab rewrites its reward and time-out buffers every step)
        done = dones.bool()
        time_out = extras.get("time_outs", torch.zeros_like(done)).to(self.device, torch.bool, copy=True)
        final = torch.where(done[:, None], extras.get("final_obs", {}).get("policy", obs["policy"]), obs["policy"])
        self.twin_steps.append((rewards.to(torch.float32, copy=True), done, time_out, final))
        super().process_env_step(obs, rewards, dones, extras)

    def _twin_batch(self) -> TensorDict:
        storage, steps = self.storage, self.twin_steps
        reward, done, time_out, final = (torch.stack(part) for part in zip(*steps, strict=True))
        if self.first_is_init is None:
            self.first_is_init = torch.ones_like(done[0])
        is_init = torch.cat([self.first_is_init[None], done[:-1]])
        if self.rsl_rl_time_outs:  # rsl_rl's stored rewards (gamma * V(s_t) added on time-outs), ended as terminations
            reward, time_out = storage.rewards.squeeze(-1), torch.zeros_like(time_out)
        fields = {
            "policy": storage.observations["policy"],
            "is_init": is_init[..., None],
            "action": storage.actions,
            "action_log_prob": storage.actions_log_prob.squeeze(-1),
            "loc": storage.distribution_params[0],
            "scale": storage.distribution_params[1],
            "next": {
                "reward": reward[..., None],
                "done": done[..., None],
                "terminated": (done & ~time_out)[..., None],
                "truncated": (done & time_out)[..., None],
                "final_obs": {"policy": final},
            },
        }
        for name, states in (("actor", storage.saved_hidden_state_a), ("critic", storage.saved_hidden_state_c)):
            for key, state in zip("hc", states or (), strict=False):  # [T, layers, N, H] -> [T, N, layers, H]
                fields[f"{name}_rnn_{key}"] = state.transpose(1, 2)
        self.first_is_init = done[-1]
        self.twin_steps = []
        return TensorDict(fields, list(done.shape)).transpose(0, 1).contiguous()

    def update(self) -> dict[str, float]:
        batch = self._twin_batch()
        std_before = self.actor.distribution.std_param.detach().clone()
        results = {}
        for name, learner in self.learners.items():
            pairs = _pairs(learner, self)
            with torch.no_grad():  # the learner starts from rsl_rl's weights, moments and learning rate
                for mine, theirs in pairs:
                    mine.copy_(theirs)
                    state, reference = learner.optimizer.state.get(mine), self.optimizer.state.get(theirs)
                    if state and reference:
                        for key in ("exp_avg", "exp_avg_sq", "step"):
                            state[key].copy_(reference[key])
                learner.lr.fill_(self.learning_rate)
            ours = learner.update(batch.clone())
            results[name] = (ours, [mine.detach().clone() for mine, _ in pairs], _noise(learner.actor).detach().clone())
        theirs = super().update()
        twin = {
            "std_change_rsl_rl": float((self.actor.distribution.std_param.detach() - std_before).mean()),
            "learning_rate_rsl_rl": self.learning_rate,
            **{f"{key}_rsl_rl": float(theirs[key]) for key in ("surrogate", "value", "entropy")},
        }
        reference = [theirs for _, theirs in _pairs(next(iter(self.learners.values())), self)]
        for name, (ours, after, noise) in results.items():
            differences = [mine - theirs for mine, theirs in zip(after, reference, strict=True)]
            twin[f"largest_difference{name}"] = max(float(d.abs().max()) for d in differences)
            twin[f"difference_norm{name}"] = float(torch.stack([d.norm() for d in differences]).norm())
            twin[f"std_change_ours{name}"] = float((noise - std_before).mean())
            twin[f"learning_rate_ours{name}"] = self.learners[name].learning_rate
            twin.update({f"{key}_ours{name}": float(ours[key]) for key in ("surrogate", "value", "entropy", "kl")})
        print("[twin] " + json.dumps({"update": self.updates, **twin}), flush=True)
        self.updates += 1
        return {**theirs, **{f"twin_{key}": value for key, value in twin.items()}}


class TwinPPORslRlTimeOuts(TwinPPO):
    """:class:`TwinPPO` whose learners are given rsl_rl's time-out bootstrap: the updates then differ by numerics.
    Four learners, to tell which of the GPU's settings moves the update: the defaults (on a GPU compiled, graphed, the
    ``fused`` recurrence), the same not graphed (``_nograph``), the ``fused`` recurrence eager (``_fused_eager``) and
    the plain eager update (``_eager``: cuDNN over padded trajectories, as rsl_rl's)."""

    rsl_rl_time_outs = True
    variants = {
        "": {},
        "_nograph": {"cudagraphs": False, "compile": True, "policy.recurrent_backend": "fused"},
        "_fused_eager": {"speed": "off", "policy.recurrent_backend": "fused"},
        "_eager": {"speed": "off"},
    }


class OurActingPPO(RslRlPPO):
    """rsl_rl's PPO whose actions come from this project's collection policy, given rsl_rl's weights before every
    rollout (``rsl_rl_recurrent_our_acting``): rsl_rl's storage, returns and update on rollouts this project's policy
    acted (its actions, log-probabilities, distribution, values and the recurrent states entering each step). Against
    rsl_rl's own run it measures the acting policy; against :class:`OurPPO`, the update."""

    @staticmethod
    def construct_algorithm(obs: TensorDict, env, cfg: dict, device: str) -> OurActingPPO:
        alg, learners = _with_learners(obs, env, cfg, device, PPO, {"": {}})
        alg.acting = OurPPO(learners[""], env.num_envs)
        alg.give_weights()
        return alg

    def give_weights(self) -> None:
        """rsl_rl's weights into this project's networks (the acting policy's)."""
        with torch.no_grad():
            for mine, theirs in _pairs(self.acting.learner, self):
                mine.copy_(theirs)

    def _states(self, states: TensorDict, network: str) -> tuple[torch.Tensor, ...] | None:
        """A network's recurrent states as rsl_rl holds them: ``(h, c)`` (an LSTM's) or ``(h,)``, ``[layers, N, H]``."""
        keys = [f"{network}_rnn_{name}" for name in "hc" if f"{network}_rnn_{name}" in self.acting.keys]
        return tuple(states[key].transpose(0, 1).contiguous() for key in keys) or None

    def act(self, obs: TensorDict) -> torch.Tensor:
        actions = self.acting.act(obs)
        step = self.acting.current  # the recurrent states entering the step
        self.transition.hidden_states = (self._states(step, "actor"), self._states(step, "critic"))
        self.transition.actions = actions
        self.transition.values = step["state_value"]
        self.transition.actions_log_prob = step["action_log_prob"]
        self.transition.distribution_params = (step["loc"], step["scale"])
        self.transition.observations = obs
        return actions

    def process_env_step(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        super().process_env_step(obs, rewards, dones, extras)
        self.acting.advance(dones.bool().unsqueeze(-1))

    def compute_returns(self, obs: TensorDict) -> None:
        if self.critic.is_recurrent:  # the last value from the acting critic's state
            state = self._states(self.acting.carry, "critic")
            self.critic.reset(hidden_state=state if len(state) > 1 else state[0])
        super().compute_returns(obs)

    def update(self) -> dict[str, float]:
        stats = super().update()
        self.give_weights()
        return stats


class OurInitPPO(RslRlPPO):
    """rsl_rl's PPO, acting and learning as usual, from this project's initial weights (``rsl_rl_recurrent_our_init``):
    networks built as this project's runner builds them, copied once into rsl_rl's. Against rsl_rl's own run it
    measures the initialization."""

    @staticmethod
    def construct_algorithm(obs: TensorDict, env, cfg: dict, device: str) -> OurInitPPO:
        alg, learners = _with_learners(obs, env, cfg, device, PPO, {"": {}})
        with torch.no_grad():
            for mine, theirs in _pairs(learners[""], alg):
                theirs.copy_(mine)
        return alg

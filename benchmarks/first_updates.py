"""The first updates of each acting policy x learner pair, from many seeds in one simulation (a benchmark): which
half of a learning difference shows where the two libraries part, at the cost of one process start.

    python benchmarks/first_updates.py --task Isaac-Velocity-Flat-AnymalD --num_envs 4096 --device cuda:0 \\
        --seeds 1-12 --updates 3 --out first_updates.json

The task's simulation is built once (Isaac Lab's rsl_rl workflow, ``isaaclab_train_offline.py``); then, for each
seed and each trainer, the environments are reset, a fresh rsl_rl runner is built around the trainer and trains
``--updates`` iterations (the first from random episode lengths, as a run starts). After every update the action
noise's standard deviation, the adaptive learning rate and the running episodes' mean age are recorded. The
trainers of a seed share their random numbers (:func:`trial`), and all but the last two below start from rsl_rl's
initial weights for the seed, so the four cells of the factorial differ only in who acts and who learns:

* ``rsl_rl``: rsl_rl's PPO (its networks act, its update learns);
* ``our_acting``: this project's collection policy acts, rsl_rl's update learns (``rsl_rl_twin.OurActingPPO``);
* ``our_update``: rsl_rl's networks act, this project's learner learns (its weights given to rsl_rl's networks
  before every rollout);
* ``ours``: this project's collection policy acts and its learner learns (``rsl_rl_with_our_ppo.OurPPO``);
* ``acting_check``: rsl_rl's PPO with this project's collection policy beside its networks on every step
  (:class:`ActingCheckPPO`);
* ``ours_own_init``: ``ours`` from this project's own initial weights for the seed (``OurPPO`` as
  ``rsl_rl_recurrent_our_update`` runs it);
* ``rsl_rl_our_init``: rsl_rl's PPO from the same initial weights as ``ours_own_init``: beside ``rsl_rl`` and
  ``ours``, the four cells of initial weights x learner.

This project's learner runs eagerly (``agent.speed=off``, cuDNN's LSTM) unless ``--compiled`` (its GPU defaults);
``--set FIELD=VALUE`` changes a field of its runner config (``--set tf32=false``).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys

import torch
from rsl_rl.algorithms import PPO as RslRlPPO
from rsl_rl.runners import OnPolicyRunner
from rsl_rl_twin import OurActingPPO, TwinPPO, _pairs, _with_learners
from rsl_rl_with_our_ppo import OurPPO, our_cfg
from tensordict import TensorDict
from torch.distributions import Normal
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import set_recurrent_mode

from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO

SETTINGS_VARIABLE = "FIRST_UPDATES_SETTINGS"
"""The benchmark's own settings, for the copy of this module that rsl_rl imports by the algorithm's class name."""


def _settings() -> dict:
    return json.loads(os.environ[SETTINGS_VARIABLE])


def _learner_settings() -> dict:
    """This project's learner eager (``agent.speed=off``) unless ``--compiled``, with the fields ``--set`` gives."""
    return ({} if _settings()["compiled"] else {"speed": "off"}) | _settings()["learner_settings"]


def _rsl_rl_and_learner(obs: TensorDict, env, cfg: dict, device: str) -> tuple[RslRlPPO, PPO]:
    """rsl_rl's PPO, its networks initialised from the seed, and this project's learner from the same config (eager
    unless ``--compiled``)."""
    cfg = copy.deepcopy(cfg)
    cfg["algorithm"]["class_name"] = RslRlPPO
    alg, learners = _with_learners(obs, env, cfg, device, PPO, {"": _learner_settings()})
    return alg, learners[""]


class OurUpdatePPO(TwinPPO):
    """rsl_rl's networks act, this project's learner learns: each rollout, in the collectors' layout (time-outs
    bootstrapped with V of the true final observation), goes to the learner, whose weights rsl_rl's networks take
    before the next rollout."""

    rsl_rl_time_outs = False

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> OurUpdatePPO:
        alg, alg.learner = _rsl_rl_and_learner(obs, env, cfg, device)
        alg.__class__ = cls
        alg.twin_steps, alg.first_is_init, alg.updates = [], None, 0
        with torch.no_grad():  # rsl_rl's initial weights, as every trainer here
            for mine, theirs in _pairs(alg.learner, alg):
                mine.copy_(theirs)
        return alg

    @property
    def learning_rate(self) -> float:
        return self.learner.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:  # rsl_rl's constructor sets it
        pass

    def update(self) -> dict[str, float]:
        stats = self.learner.update(self._twin_batch())
        self.storage.clear()
        with torch.no_grad():
            for mine, theirs in _pairs(self.learner, self):
                theirs.copy_(mine)
        return {"value": stats["value"], "surrogate": stats["surrogate"], "entropy": stats["entropy"]}


class OursFromRslRlInit(OurPPO):
    """:class:`OurPPO` (this project's acting and learner) from rsl_rl's initial weights for the seed."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> OursFromRslRlInit:
        alg, learner = _rsl_rl_and_learner(obs, env, cfg, device)
        with torch.no_grad():
            for mine, theirs in _pairs(learner, alg):
                mine.copy_(theirs)
        return cls(learner, env.num_envs)


def _own_init_learner(obs: TensorDict, env, cfg: dict, device: str) -> PPO:
    """This project's learner with its own initial weights for the seed, drawn as its runner draws them."""
    obs_dim = obs["policy"].shape[-1]
    interface = EnvInterface(("policy",), obs_dim, ("policy",), obs_dim, env.num_actions)
    torch.manual_seed(cfg["seed"])
    return PPO(our_cfg(env, copy.deepcopy(cfg), device, _learner_settings()), interface, device)


class OursOwnInit(OurPPO):
    """:class:`OurPPO` from this project's own initial weights for the seed (drawn as its runner draws them)."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> OursOwnInit:
        return cls(_own_init_learner(obs, env, cfg, device), env.num_envs)


class RslRlFromOurInit(RslRlPPO):
    """rsl_rl's PPO from the initial weights ``ours_own_init`` starts from (this project's own for the seed)."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> RslRlPPO:
        alg, _ = _rsl_rl_and_learner(obs, env, cfg, device)
        learner = _own_init_learner(obs, env, cfg, device)
        with torch.no_grad():
            for mine, theirs in _pairs(learner, alg):
                theirs.copy_(mine)
        return alg


class OurActingFromSettings(OurActingPPO):
    """:class:`OurActingPPO` whose acting policy is built with this benchmark's learner settings."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> OurActingFromSettings:
        alg, learner = _rsl_rl_and_learner(obs, env, cfg, device)
        alg.__class__ = cls
        alg.acting = OurPPO(learner, env.num_envs)
        alg.give_weights()
        return alg


class ActingCheckPPO(OurActingFromSettings):
    """rsl_rl's PPO, acting and learning as usual, with this project's collection policy (given rsl_rl's weights
    before every rollout) run beside rsl_rl's networks on every step, from the same observations and entering
    recurrent states. Per rollout it prints (``[acting_check]``) the largest differences of the action mean, the
    noise std, the value, the leaving recurrent states and the log-probability of rsl_rl's action under each
    distribution, and the moments of this project's sampled noise ``(action - mean) / std``."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> ActingCheckPPO:
        alg = super().construct_algorithm(obs, env, cfg, device)
        alg.check = {}
        return alg

    def _note(self, key: str, value: torch.Tensor) -> None:
        self.check[key] = max(self.check.get(key, 0.0), float(value.abs().max()))

    def act(self, obs: TensorDict) -> torch.Tensor:
        entering = self.actor.get_hidden_state(), self.critic.get_hidden_state()
        actions = RslRlPPO.act(self, obs)
        num_envs = obs["policy"].shape[0]
        first = entering[0] is None
        step = TensorDict({"policy": obs["policy"], "is_init": torch.full((num_envs, 1), first)}, [num_envs])
        step = step.to(obs["policy"].device)
        for network, states in zip(("actor", "critic"), entering, strict=True):
            for name, state in zip("hc", () if first else states, strict=False):
                step[f"{network}_rnn_{name}"] = state.transpose(0, 1)
        if first:
            zeros = self.acting.learner.collection_policy(step.clone()).get("next").select(*self.acting.keys)
            step.update(zeros.apply(torch.zeros_like))
        with set_recurrent_mode(False), set_exploration_type(ExplorationType.RANDOM):
            ours = self.acting.learner.collection_policy(step)
        loc, scale = self.transition.distribution_params
        self._note("loc", ours["loc"] - loc)
        self._note("scale", ours["scale"] - scale)
        self._note("value", ours["state_value"] - self.transition.values)
        theirs_under_ours = Normal(ours["loc"], ours["scale"]).log_prob(actions).sum(-1)
        self._note("log_prob_of_rsl_rl_action", theirs_under_ours - self.transition.actions_log_prob.view(-1))
        own = Normal(ours["loc"], ours["scale"]).log_prob(ours["action"]).sum(-1)
        self._note("own_log_prob", own - ours["action_log_prob"].view(-1))
        leaving = self.actor.get_hidden_state(), self.critic.get_hidden_state()
        for network, states in zip(("actor", "critic"), leaving, strict=True):
            for name, state in zip("hc", states, strict=False):
                self._note(f"{network}_{name}", ours["next", f"{network}_rnn_{name}"] - state.transpose(0, 1))
        noise = (ours["action"] - ours["loc"]) / ours["scale"]
        for key, value in (("noise_sum", noise.sum()), ("noise_square_sum", noise.square().sum())):
            self.check[key] = self.check.get(key, 0.0) + float(value)
        self.check["noise_count"] = self.check.get("noise_count", 0) + noise.numel()
        return actions

    def process_env_step(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        RslRlPPO.process_env_step(self, obs, rewards, dones, extras)

    def compute_returns(self, obs: TensorDict) -> None:
        RslRlPPO.compute_returns(self, obs)

    def update(self) -> dict[str, float]:
        count = self.check.pop("noise_count")
        mean = self.check.pop("noise_sum") / count
        self.check["noise_mean"], self.check["noise_variance"] = (
            mean,
            self.check.pop("noise_square_sum") / count - mean**2,
        )
        print("[acting_check] " + json.dumps(self.check), flush=True)
        self.check = {}
        return super().update()


TRAINERS = {
    "rsl_rl": RslRlPPO,
    "our_acting": OurActingFromSettings,
    "our_update": OurUpdatePPO,
    "ours": OursFromRslRlInit,
    "ours_own_init": OursOwnInit,
    "rsl_rl_our_init": RslRlFromOurInit,
    "acting_check": ActingCheckPPO,
}


def _noise_std(runner: OnPolicyRunner) -> float:
    """The mean of the action noise's standard deviation, read from its parameter."""
    if isinstance(runner.alg, OurPPO):
        return runner.alg.learner.noise_std()
    return float(runner.alg.actor.distribution.std_param.detach().mean())


def trial(env, cfg: dict, device: str, trainer: str, seed: int, updates: int) -> dict:
    """One trainer from a fresh reset and fresh networks: its noise std and learning rate after each update, and the
    mean age in steps of the running episodes after each rollout (it falls as the robots learn to end them early).

    Common random numbers: every trainer of a seed starts from the same reset and draws each iteration's random
    numbers (the episode lengths, the action noise, the env's resets, the minibatch split) from the same stream,
    reseeded before the iteration, so that trainers that act alike collect alike and the pairs differ by what differs.
    """
    torch.manual_seed(seed)
    env.reset()
    torch.manual_seed(seed)
    trial_cfg = copy.deepcopy(cfg)
    trial_cfg["seed"], trial_cfg["max_iterations"] = seed, updates
    trial_cfg["algorithm"]["class_name"] = TRAINERS[trainer]
    runner = OnPolicyRunner(env, trial_cfg, log_dir=None, device=device)
    record = {
        "trainer": trainer,
        "seed": seed,
        "noise_std": [_noise_std(runner)],
        "learning_rate": [],
        "mean_episode_age": [],
    }
    for update in range(updates):
        torch.manual_seed(seed * 1000 + update)
        runner.learn(1, init_at_random_ep_len=update == 0)
        record["noise_std"].append(_noise_std(runner))
        record["learning_rate"].append(float(runner.alg.learning_rate))
        record["mean_episode_age"].append(float(env.unwrapped.episode_length_buf.float().mean()))
    del runner
    gc.collect()
    torch.cuda.empty_cache()
    return record


def _mean_and_error(values: list[float]) -> tuple[float, float]:
    error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return statistics.mean(values), error


def summary(records: list[dict]) -> dict:
    """Per trainer and update: the mean noise std and its standard error, the mean difference to the first trainer's
    on the same seeds (paired: the same initial weights) and its standard error, and the median learning rate."""
    trainers = list(dict.fromkeys(record["trainer"] for record in records))
    by_seed = {(record["trainer"], record["seed"]): record for record in records}
    table = {}
    for trainer in trainers:
        mine = [record for record in records if record["trainer"] == trainer]
        paired = [(record, by_seed.get((trainers[0], record["seed"]))) for record in mine]
        paired = [(record, first) for record, first in paired if first is not None]
        rows = []
        for update in range(1, len(mine[0]["noise_std"])):
            std, error = _mean_and_error([record["noise_std"][update] for record in mine])
            differences = [record["noise_std"][update] - first["noise_std"][update] for record, first in paired]
            difference, difference_error = _mean_and_error(differences) if differences else (float("nan"),) * 2
            rates = [record["learning_rate"][update - 1] for record in mine]
            rows.append(
                {
                    "update": update,
                    "noise_std": std,
                    "standard_error": error,
                    f"minus_{trainers[0]}": difference,
                    f"minus_{trainers[0]}_standard_error": difference_error,
                    "median_learning_rate": statistics.median(rates),
                    "seeds": len(mine),
                }
            )
        table[trainer] = rows
    return table


class Trials:
    """The algorithm rsl_rl's workflow builds (``agent.algorithm.class_name``): it runs every trial on the workflow's
    environment while it is constructed, writes the results, and then trains nothing (``--max_iterations 0``)."""

    @classmethod
    def construct_algorithm(cls, obs: TensorDict, env, cfg: dict, device: str) -> Trials:
        settings = _settings()
        records = []
        for seed in settings["seeds"]:
            for trainer in settings["trainers"]:
                records.append(trial(env, cfg, device, trainer, seed, settings["updates"]))
                print("[first_updates] " + json.dumps(records[-1]), flush=True)
                with open(settings["out"], "w") as file:
                    json.dump({"settings": settings, "summary": summary(records), "trials": records}, file, indent=1)
        first = f"minus_{settings['trainers'][0]}"
        for trainer, rows in summary(records).items():
            cells = "  ".join(
                f"{row['noise_std']:.5f}±{row['standard_error']:.5f} "
                f"({row[first]:+.5f}±{row[f'{first}_standard_error']:.5f})"
                for row in rows
            )
            print(f"[first_updates] {trainer:>13}: noise std after each update (minus the first's) {cells}", flush=True)
        return cls()

    def train_mode(self) -> None:
        pass

    def save(self) -> dict:
        return {}


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += list(range(int(first), int(last or first) + 1))
    return seeds


def _field(text: str, parser: argparse.ArgumentParser) -> tuple[str, object]:
    """``FIELD=VALUE`` of ``--set``: the value read as JSON (``false``, ``3e-4``), else as a string."""
    name, separator, value = text.partition("=")
    if not separator or not name:
        parser.error(f"--set takes FIELD=VALUE, not {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Isaac-Velocity-Flat-AnymalD")
    parser.add_argument("--num_envs", type=int, default=4096)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--seeds", default="1-8", help="Seeds, e.g. 1-12 or 1,3,5.")
    parser.add_argument("--updates", type=int, default=3, help="Updates per trial.")
    parser.add_argument("--trainers", default=",".join(TRAINERS), help=f"Of: {', '.join(TRAINERS)}.")
    parser.add_argument("--compiled", action="store_true", help="This project's learner with its GPU defaults.")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="A field of this project's runner config for its learner, e.g. tf32=false (a JSON value or a string).",
    )
    parser.add_argument("--out", default="first_updates.json")
    args = parser.parse_args(argv)
    trainers = args.trainers.split(",")
    unknown = sorted(set(trainers) - set(TRAINERS))
    if unknown:
        parser.error(f"unknown trainers {unknown}; choose from {', '.join(TRAINERS)}")
    settings = {
        "seeds": parse_seeds(args.seeds),
        "updates": args.updates,
        "trainers": trainers,
        "compiled": args.compiled,
        "learner_settings": dict(_field(text, parser) for text in args.set),
        "out": os.path.abspath(args.out),
        "task": args.task,
        "num_envs": args.num_envs,
    }
    os.environ[SETTINGS_VARIABLE] = json.dumps(settings)
    from isaaclab_train_offline import main as train

    workflow = ["--rl_library", "rsl_rl", "--agent", "rsl_rl_recurrent_cfg_entry_point", "--task", args.task]
    workflow += ["--num_envs", str(args.num_envs), "--device", args.device, "--max_iterations", "0"]
    workflow += ["--viz", "none", "physics=newton_mjwarp", f"agent.device={args.device}", "env.compute_final_obs=true"]
    return train([*workflow, "agent.algorithm.class_name=first_updates:Trials"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

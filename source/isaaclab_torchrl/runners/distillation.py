"""The distillation learner (rsl_rl's ``Distillation``): a student that learns a fixed teacher's actions on the
states the student reached. It knows nothing of environments or collectors: it takes a collected batch, in which
the collector workers recorded the teacher's deterministic action beside each of the student's steps, and updates
the student. The learner never runs the teacher; it keeps its weights for the workers and for checkpoints."""

from __future__ import annotations

import dataclasses
import warnings

import torch
from tensordict import TensorDictBase
from torch.nn import functional
from torchrl.modules import set_recurrent_mode

from ..action_noise import noise_std
from ..agents.torchrl_cfg import TorchRLActorCfg, TorchRLDistillationRunnerCfg
from ..models import CollectionPolicy, EnvInterface, make_actor, observation_normalizers
from .checkpoint import load_optimizer_state
from .compilation import tf32_products
from .rsl_rl_teacher import RSL_RL_ACTOR_KEY, rsl_rl_actor_state
from .safety import NonFiniteError

TEACHER_ACTION_KEY = "teacher_loc"
"""Where the workers record the teacher's deterministic action (the mean of its Gaussian) at every step."""
LOSSES = {"mse": functional.mse_loss, "huber": functional.huber_loss}
OPTIMIZERS = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
}
"""rsl_rl's ``resolve_optimizer``: each with its defaults but the learning rate."""


@dataclasses.dataclass
class Teacher:
    """The teacher's network (:attr:`cfg`) and its weights (:attr:`state`, an actor's ``state_dict``)."""

    cfg: TorchRLActorCfg
    state: dict


class StudentTeacherPolicyFactory:
    """Picklable builder of a distillation run's collection policy inside a collector subprocess: the student, built
    from the learner's config (its weights come with each weight sync), and the teacher beside it, on its own
    observation groups, writing its deterministic action to :data:`TEACHER_ACTION_KEY`.

    The teacher never changes, so its weights travel once, inside this factory, when the worker starts; the weight
    sync sends the learner's collection policy, which holds the student only, and the student sits first in the
    worker's policy, so that the weights land on the same names.
    """

    def __init__(self, cfg: TorchRLActorCfg, interface: EnvInterface, device: str, teacher: Teacher):
        self.cfg, self.interface, self.device, self.teacher = cfg, interface, device, teacher

    def __call__(self) -> CollectionPolicy:
        student = make_actor(self.cfg, self.interface, self.device)
        teacher = make_actor(self.teacher.cfg, self.interface, self.device, role="teacher")
        teacher.load_state_dict(self.teacher.state)
        teacher.requires_grad_(False)
        return CollectionPolicy(student, teacher.deterministic)


def teacher_only(checkpoint: dict) -> bool:
    """Whether a checkpoint gives a distillation run its teacher only (a PPO checkpoint, this runner's or rsl_rl's:
    its actor is the teacher, as rsl_rl loads an RL checkpoint) rather than a distillation run to continue
    (student, teacher, optimizer and iteration)."""
    return "teacher" not in checkpoint


class Distillation:
    """Behaviour cloning of a teacher along the student's own trajectories (rsl_rl's ``Distillation``).

    Each update goes ``num_learning_epochs`` times through the batch's steps in time order; the losses between the
    student's mean action and the teacher's, each a mean over the environments, are summed over
    ``gradient_length`` steps before each optimizer step (the steps of all epochs follow one another). A recurrent
    student runs over those steps in recurrent mode, from the recurrent state the workers stored at the first of
    them (at an episode start, zero), so that the gradient flows back through them and no further (truncated
    backpropagation through time; rsl_rl carries the learner's own detached state instead).

    The teacher's label of a state does not depend on the policy that reached it, so asynchronous collection needs no
    correction here.

    Args:
        cfg: The distillation config.
        interface: The student's and the teacher's observation groups and sizes, and the action size.
        device: The learner's device.
    """

    statistics = ("behavior", "grad_norm")
    reads_every_state = True
    """A recurrent student's windows start at any step, from the state the workers stored there."""

    def __init__(self, cfg: TorchRLDistillationRunnerCfg, interface: EnvInterface, device: torch.device | str):
        self.cfg, self.interface, self.device = cfg, interface, torch.device(device)
        algo = cfg.algorithm
        self.actor = make_actor(cfg.policy, interface, self.device)
        """The student."""
        self.collection_policy = CollectionPolicy(self.actor)
        """What the weight sync sends to the workers: the student, not a copy."""
        self.teacher: Teacher | None = None
        """The teacher, once :meth:`load_state_dict` read it from a checkpoint."""
        self.normalizers = observation_normalizers(self.actor)
        self.optimizer = OPTIMIZERS[algo.optimizer](self.actor.parameters(), lr=algo.learning_rate)
        self.loss_fn = LOSSES[algo.loss_type]
        self.recurrent = cfg.policy.rnn_type is not None
        self.in_keys = [key for key in self.actor.deterministic.in_keys if not isinstance(key, tuple)]
        self.batch_noise_std = torch.tensor(float(cfg.policy.init_noise_std))
        """With state-dependent noise, its mean std over the last batch the update was given."""
        steps = algo.num_learning_epochs * cfg.num_steps_per_env
        if steps % algo.gradient_length:  # rsl_rl's warning
            warnings.warn(
                f"num_learning_epochs x num_steps_per_env ({steps}) is not a multiple of gradient_length "
                f"({algo.gradient_length}): the last {steps % algo.gradient_length} steps of each update are not "
                "learned from.",
                stacklevel=2,
            )

    @property
    def policy_factory(self) -> StudentTeacherPolicyFactory:
        """What builds the workers' policy: the student and the loaded teacher."""
        if self.teacher is None:
            raise ValueError("The distillation learner has no teacher: load one from a checkpoint first.")
        return StudentTeacherPolicyFactory(self.cfg.policy, self.interface, self.cfg.device, self.teacher)

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        """One update on a collected batch ``[..., envs, steps]``.

        Raises:
            NonFiniteError: NaN/Inf in the batch, a loss or a gradient (with ``check_for_nan``).
        """
        with tf32_products(self.cfg.tf32):
            # one trajectory slice per environment, whatever the leading dims (synchronous collection stacks the
            # workers' rollouts: [worker, env, time])
            return self._update(batch.to(self.device).reshape(-1, batch.shape[-1]))

    def _update(self, batch: TensorDictBase) -> dict[str, float]:
        algo = self.cfg.algorithm
        if self.cfg.check_for_nan:
            self._check_finite(batch, [*self.interface.actor_obs_keys, TEACHER_ACTION_KEY])
        observations = torch.cat([batch[key] for key in self.interface.actor_obs_keys], dim=-1)
        if self.cfg.policy.state_dependent_std:
            self.batch_noise_std = batch["scale"].mean()
        batch = batch.select(*self.in_keys, TEACHER_ACTION_KEY)
        order = [step for _ in range(algo.num_learning_epochs) for step in range(batch.shape[-1])]
        length = algo.gradient_length
        sums, num_steps = torch.zeros(2, device=self.device), 0
        for start in range(0, len(order) - length + 1, length):
            loss = sum(self._loss(batch[:, a:b]) * (b - a) for a, b in _runs(order[start : start + length]))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            max_norm = algo.max_grad_norm if algo.max_grad_norm is not None else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), max_norm)
            stats = torch.stack([loss.detach() / length, grad_norm])
            if self.cfg.check_for_nan:
                self._check_step(stats, num_steps)
            self.optimizer.step()
            sums, num_steps = sums + stats, num_steps + 1
        # after the epochs, like rsl_rl: the batch was collected with the statistics from before it
        for normalizer in self.normalizers:
            normalizer.update(observations)
        return dict(zip(self.statistics, (sums / max(num_steps, 1)).tolist(), strict=True))

    def _loss(self, steps: TensorDictBase) -> torch.Tensor:
        """The loss between the student's mean action and the teacher's over consecutive steps ``[envs, time]``."""
        with set_recurrent_mode(self.recurrent):
            loc = self.actor.deterministic(steps.clone(False))["loc"]
        return self.loss_fn(loc, steps[TEACHER_ACTION_KEY])

    def _check_finite(self, batch: TensorDictBase, keys: list) -> None:
        finite = torch.stack([torch.isfinite(batch[key]).all() for key in keys])
        if not bool(finite.all()):
            bad = [key for key, ok in zip(keys, finite.tolist(), strict=True) if not ok]
            raise NonFiniteError(
                f"Non-finite values (NaN/Inf) in {bad} of the batch: no update was made with this batch.",
                parameters_unchanged=True,
            )

    def _check_step(self, stats: torch.Tensor, done_steps: int) -> None:
        """Stops before the optimizer step when the loss or the gradient is not finite."""
        finite = torch.isfinite(stats).tolist()
        if not all(finite):
            bad = [key for key, ok in zip(self.statistics, finite, strict=True) if not ok]
            raise NonFiniteError(
                f"Non-finite {bad} in gradient step {done_steps + 1} of the update; that step was not applied.",
                parameters_unchanged=done_steps == 0,
            )

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def noise_std(self) -> float:
        """Mean standard deviation of the student's action noise (it acts with it; distillation does not learn it);
        when it depends on the observation, its mean over the last batch."""
        std = noise_std(self.actor)
        return float((self.batch_noise_std if std is None else std).mean())

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "teacher": None if self.teacher is None else self.teacher.state,
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
        }

    def load_state_dict(self, state: dict, optimizer: bool = True) -> bool:
        """Loads a distillation checkpoint (student, teacher and, with ``optimizer``, the optimizer), or the teacher
        alone from a PPO checkpoint (:func:`teacher_only`), this runner's or rsl_rl's.

        Returns:
            Whether the checkpoint continues a distillation run (its iteration and RNG state apply).

        Raises:
            ValueError: the checkpoint's networks or sizes are not those of this config and task.
        """
        resumes = not teacher_only(state)
        if RSL_RL_ACTOR_KEY in state:  # an rsl_rl checkpoint's actor, copied into agent.teacher's network
            teacher_state = rsl_rl_actor_state(state[RSL_RL_ACTOR_KEY], self.cfg.teacher, self.interface)
        else:
            teacher_state = state["teacher"] if resumes else state["actor"]
        self._check_teacher_sizes(state.get("interface"), resumes)
        try:
            # the teacher is built here only to check that its weights fit; the workers build their own
            make_actor(self.cfg.teacher, self.interface, "cpu", role="teacher").load_state_dict(teacher_state)
            if resumes:
                self.actor.load_state_dict(state["actor"])
                if optimizer:
                    load_optimizer_state(self.optimizer, state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            # load_state_dict's first line is a heading; the next names the first tensor that does not fit
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise ValueError(f"different observation/action sizes or networks: {' '.join(lines[:2])}") from exc
        self.teacher = Teacher(self.cfg.teacher, {key: value.cpu() for key, value in teacher_state.items()})
        return resumes

    def _check_teacher_sizes(self, stored: dict | None, resumes: bool) -> None:
        """Rejects a checkpoint whose teacher read other observation sizes, or acted with other actions, than the
        teacher's groups and the task have here (where the checkpoint stores its sizes)."""
        if stored is None:
            return
        keys, dim = (
            (stored["teacher_obs_keys"], stored["teacher_obs_dim"])
            if resumes
            else (stored["actor_obs_keys"], stored["actor_obs_dim"])
        )
        here = self.interface
        if (dim, stored["action_dim"]) != (here.teacher_obs_dim, here.action_dim):
            raise ValueError(
                f"its teacher reads {', '.join(keys)} ({dim}) and acts with {stored['action_dim']} actions; here the "
                f"teacher reads {', '.join(here.teacher_obs_keys)} ({here.teacher_obs_dim}) and the task has "
                f"{here.action_dim} actions"
            )


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive steps as ``(start, stop)`` ranges: ``[6, 7, 0, 1]`` is ``[(6, 8), (0, 2)]``."""
    runs = []
    for step in steps:
        if runs and runs[-1][1] == step:
            runs[-1] = (runs[-1][0], step + 1)
        else:
            runs.append((step, step + 1))
    return runs


__all__ = ["Distillation", "StudentTeacherPolicyFactory", "TEACHER_ACTION_KEY", "Teacher", "teacher_only"]

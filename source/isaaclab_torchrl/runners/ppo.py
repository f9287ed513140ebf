"""The PPO learner: actor and critic, GAE, the clipped loss, Adam with rsl_rl's adaptive learning rate, and the
optional compiled / CUDA-graph gradient step. It knows nothing of environments or collectors: it takes a
collected batch and updates its networks (``benchmarks/learner.py`` and the unit tests build it alone)."""

from __future__ import annotations

import contextlib
import math
import time

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.modules import set_recurrent_mode

from ..action_noise import noise_std
from ..agents.torchrl_cfg import TorchRLRunnerCfg
from ..envs import FINAL_OBS_KEY
from ..models import CollectionPolicyFactory, EnvInterface, make_collection_policy, make_models, observation_normalizers
from ..recurrent import ROLLOUT_START_KEY, first_states, slices, state_shapes
from ..symmetry import Mirror
from .checkpoint import load_optimizer_state
from .compilation import GradientStepGraph, compile_losses, tf32_products
from .distributed import DistributedContext, average, average_gradients, broadcast_state, global_moments
from .gae import CollectedBatchGAE
from .loss import make_loss
from .rnd import RandomNetworkDistillation
from .safety import NonFiniteError, SkipNonFiniteSteps

STEP_STATISTICS = ("surrogate", "value", "entropy", "kl", "grad_norm")
"""What each gradient step reports, in this order (with symmetry or RND, ``symmetry`` and ``rnd`` before
``grad_norm``); the update returns their means."""

MAX_IMPORTANCE_WEIGHT = 1.0
"""Truncation of the importance weight between the proximal and the acting policy (lag-corrected PPO)."""

TRUNCATED_LOG_RATIO = math.log(MAX_IMPORTANCE_WEIGHT) + 1e-3
"""The log-ratio past which a sample counts in ``truncated_fraction``, a margin above the cut: without lag the
proximal and acting log-probabilities differ by rounding only: half the samples would count (docs/benchmarks.md)."""


class PPO:
    """Recurrent PPO on whole trajectory slices, each started from the recurrent state stored at its first step.

    With asynchronous collection the workers act with a policy up to a few updates old. The update then corrects
    for the lag (decoupled PPO): the policy at the start of the update (the proximal policy, the same weights) is the
    reference of the ratio, the clip and the KL, and each sample is weighted by the truncated importance ratio
    between the proximal policy and the one that acted.

    Args:
        cfg: The runner configuration (its ``policy`` and ``algorithm`` and the speed options are read; a speed
            option left at ``None`` is off: :func:`~isaaclab_torchrl.agents.validation.resolve_speed_settings`
            gives them their values for the devices).
        interface: Observation groups and sizes of the task, and the action size.
        device: The learner's device.
        distributed: This rank's place in a data-parallel group, or ``None``.
        lag_corrected: Correct for the workers' policy lag (asynchronous collection).
    """

    reads_every_state = False  # the slices start where the rollouts start

    def __init__(
        self,
        cfg: TorchRLRunnerCfg,
        interface: EnvInterface,
        device: torch.device | str,
        distributed: DistributedContext | None = None,
        lag_corrected: bool = False,
    ):
        self.cfg = cfg
        self.interface = interface
        self.device = torch.device(device)
        self.distributed = distributed
        algo = cfg.algorithm

        self.actor, self.critic = make_models(cfg.policy, interface, self.device)
        if distributed is not None:
            # every replica starts from rank 0's parameters; averaged gradients keep them equal
            broadcast_state(self.actor)
            broadcast_state(self.critic)
        self.collection_policy = make_collection_policy(self.actor, self.critic, cfg.policy)
        """What the collector workers run: these networks, not copies (the weight sync sends their weights)."""
        self.normalizers = [(n, interface.flat_keys("actor")) for n in observation_normalizers(self.actor)]
        self.normalizers += [(n, interface.flat_keys("critic")) for n in observation_normalizers(self.critic)]
        self.gae = CollectedBatchGAE(self.critic, algo.gamma, algo.lam, interface.critic_obs_keys)
        symmetry = algo.symmetry_cfg
        self.mirror = None if symmetry is None else Mirror(interface.symmetry, self.device)
        """The task's symmetry (rsl_rl's symmetry extension), or ``None``."""
        self.augmented = symmetry is not None and symmetry.use_data_augmentation
        """Whether every minibatch holds the mirrored copies of its samples."""
        self.rnd = None
        """Random network distillation (rsl_rl's RND extension), or ``None``."""
        if algo.rnd_cfg is not None:
            self.rnd = RandomNetworkDistillation(
                algo.rnd_cfg, interface.rnd_obs_keys, interface.rnd_obs_dim, interface.step_dt, self.device
            )
            if distributed is not None:
                broadcast_state(self.rnd)
        extensions = (("symmetry",) if symmetry else ()) + (("rnd",) if self.rnd else ())
        self.statistics = STEP_STATISTICS[:4] + extensions + STEP_STATISTICS[4:]
        self.loss = make_loss(self.actor, self.critic, algo, self.mirror, self.augmented)
        self.loss_keys = self.loss.minibatch_keys()
        self.loss_keys += [key for key in interface.rnd_obs_keys if key not in self.loss_keys]
        # the learning rate is a tensor on the learner's device, adapted there, so that no minibatch waits for the
        # device to report its KL (Adam reads a tensor learning rate on CUDA with capturable=True)
        self.lr = torch.tensor(float(algo.learning_rate), device=self.device)
        on_cuda = self.device.type == "cuda"
        # what the optimizer and the all-reduce act on, in the networks' order (a checkpoint's optimizer state follows
        # it) whatever the loss holds them as
        self.parameters = list(
            dict.fromkeys([*self.actor.parameters(), *self.critic.parameters(), *self.loss.parameters()])
        )
        # clipped separately, like rsl_rl: a large value-loss gradient does not shrink the policy's step
        self.clipped_groups = [list(self.actor.parameters()), list(self.critic.parameters())]
        self.recurrent = cfg.policy.rnn_type is not None
        self.state_shapes = state_shapes(self.actor, self.critic)  # the recurrent states' keys and shapes per step
        self.optimizer = torch.optim.Adam(self.parameters, lr=self.lr, capturable=on_cuda, fused=True)
        self.synced_parameters = list(self.parameters)
        """What the ranks average the gradients of (with RND, the predictor's too)."""
        if self.rnd is not None:  # the predictor's own Adam, unclipped, as in rsl_rl
            predictor = list(self.rnd.predictor.parameters())
            self.rnd_optimizer = torch.optim.Adam(
                predictor, lr=algo.rnd_cfg.learning_rate, capturable=on_cuda, fused=True
            )
            self.synced_parameters += predictor
        optimizers = [self.optimizer] + ([self.rnd_optimizer] if self.rnd is not None else [])
        self.non_finite = SkipNonFiniteSteps(self.statistics, self.device, optimizers) if cfg.check_for_nan else None
        self._losses = compile_losses(self.losses, cfg) if cfg.compile else self.losses
        self._loss_and_gradients = self.loss_and_gradients
        if cfg.cudagraphs:
            # the gradients of the replays land in the .grad tensors of the capture, which the optimizer reads
            self._loss_and_gradients = GradientStepGraph(
                self._loss_and_gradients, in_keys=[], out_keys=[], device=self.device
            )
        self.communication_time = 0.0
        """Seconds spent in all-reduces since the last :meth:`update` began."""
        self.batch_noise_std = torch.tensor(float(cfg.policy.init_noise_std))
        """With state-dependent noise, its mean std over the last batch the update was given."""
        self.lag_corrected = lag_corrected

    @property
    def policy_factory(self) -> CollectionPolicyFactory:
        """What builds the workers' own copy of :attr:`collection_policy`."""
        return CollectionPolicyFactory(self.cfg.policy, self.interface, self.cfg.device)

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        """One PPO update on a collected batch: GAE, then epochs of minibatches of whole trajectory slices.

        Raises:
            NonFiniteError: NaN/Inf in the batch, the advantages, a loss or a gradient (with ``check_for_nan``).
        """
        with tf32_products(self.cfg.tf32):
            return self._update(batch)

    def _update(self, batch: TensorDictBase) -> dict[str, float]:
        algo, check = self.cfg.algorithm, self.cfg.check_for_nan
        self.communication_time = 0.0
        batch = batch.to(self.device)
        if ROLLOUT_START_KEY in batch.keys():
            batch = first_states(batch, self.state_shapes)
        if self.cfg.policy.state_dependent_std:
            self.batch_noise_std = batch["scale"].mean()
        if check:
            final_obs = [("next", FINAL_OBS_KEY, key) for key in self.interface.critic_obs_keys]
            self._check_finite(batch, [*self.interface.obs_keys, *final_obs, ("next", "reward")], "batch")
        extension_stats = {}
        if self.rnd is not None:  # the intrinsic reward of every step, from the state it reached
            reward = batch["next", "reward"]
            next_obs = batch["next", FINAL_OBS_KEY].reshape(-1, batch.shape[-1])
            intrinsic = self.rnd.intrinsic_rewards(next_obs).view(reward.shape)
            batch["next", "reward"] = reward + intrinsic
            extension_stats = {"rnd_intrinsic_reward": intrinsic.mean(), "rnd_weight": self.rnd.weight}
            rnd_obs = batch.select(*self.interface.rnd_obs_keys)
        batch = self.gae(batch)
        if check:
            self._check_finite(batch, ["advantage", "value_target"], "advantages")
        if algo.normalize_advantage:
            advantage = batch["advantage"]
            batch["advantage"] = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        if self.lag_corrected:
            proximal = self._proximal_distribution(batch)
            proximal_log_prob, weight = self._importance_weights(proximal, batch)
            truncated = proximal_log_prob - batch["action_log_prob"] > TRUNCATED_LOG_RATIO
            # kept on the device and read with the update's other statistics, so the epochs start without a wait
            extension_stats |= {"importance_weight": weight.mean(), "truncated_fraction": truncated.float().mean()}
            # the proximal policy is the reference of the ratio, the clip and the KL
            batch.update({"action_log_prob": proximal_log_prob, "loc": proximal.mean, "scale": proximal.stddev})
            batch["advantage"] = batch["advantage"] * weight.unsqueeze(-1)
        normalizer_samples = self._normalizer_samples(batch)
        # only what the loss reads: indexing a minibatch then copies a few tensors instead of the whole batch
        batch = batch.select(*self.loss_keys)

        if check:
            self.non_finite.reset()
        sums, num_steps = None, 0  # statistics (STEP_STATISTICS) summed on the device, read once per update
        minibatches = self._minibatches(batch)
        for _ in range(algo.num_learning_epochs):
            for minibatch in minibatches:
                losses = self._loss_and_gradients(minibatch)["statistics"]
                stats = torch.cat([losses, self._average_and_clip_gradients()[None]])
                if self.distributed is not None:
                    # one all-reduce: the same KL (so the same learning rate) and NaN verdict on every rank
                    with self._communication():
                        stats = average(stats)
                skipped = self.non_finite.check(stats) if check else None
                if algo.schedule == "adaptive" and algo.desired_kl is not None:
                    self._adapt_learning_rate(stats[self.statistics.index("kl")], skipped)
                self.optimizer.step()
                if self.rnd is not None:
                    self.rnd_optimizer.step()
                sums = stats if sums is None else sums + stats
                num_steps += 1
        if check:
            self.non_finite.raise_if_found(len(minibatches))
        # after the epochs, like rsl_rl: the batch was collected, and the proximal log-probabilities computed, with
        # the statistics from before it; a batch that stopped the update leaves them as they were
        self._update_normalizers(normalizer_samples)
        if self.rnd is not None:
            self.rnd.update_normalization(rnd_obs)
        stats = dict(zip(self.statistics, (sums / num_steps).tolist(), strict=True))
        return {**stats, **{key: float(value) for key, value in extension_stats.items()}}

    def proximal_log_probs_and_weights(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probabilities of the batch's actions under the current policy, and the importance weights
        ``min(exp(proximal - acting), MAX_IMPORTANCE_WEIGHT)`` of each step (``[slice, time]`` each)."""
        return self._importance_weights(self._proximal_distribution(batch), batch)

    @torch.no_grad()
    def _proximal_distribution(self, batch: TensorDictBase) -> torch.distributions.Distribution:
        """The current policy's action distribution at every step of ``batch`` (``[slice, time]``)."""
        with set_recurrent_mode(True):
            return self.actor.get_dist(batch.clone(False))

    @staticmethod
    def _importance_weights(proximal, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        log_prob = proximal.log_prob(batch["action"])
        return log_prob, torch.exp(log_prob - batch["action_log_prob"]).clamp(max=MAX_IMPORTANCE_WEIGHT)

    def _minibatches(self, batch: TensorDictBase) -> list[TensorDictBase]:
        """A random split into ``num_mini_batches`` minibatches of equal size (a CUDA graph replays one shape), which
        every epoch goes through again, like rsl_rl's generators (one permutation per update): of whole trajectory
        slices for a recurrent policy, of single steps for an MLP; the remainder of the division sits out."""
        count = self.cfg.algorithm.num_mini_batches
        if not self.recurrent:
            batch = batch.reshape(-1)
        per_minibatch = batch.shape[0] // count
        permutation = torch.randperm(batch.shape[0], device=batch.device)[: count * per_minibatch]
        minibatches = [slices(batch, indices, self.state_shapes) for indices in permutation.view(count, per_minibatch)]
        if self.augmented:  # rsl_rl's symmetry augmentation, once per update (every epoch reuses the split)
            minibatches = [self.mirror.augment(minibatch) for minibatch in minibatches]
        return minibatches

    def losses(self, minibatch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO's losses on one minibatch: their sum, to differentiate, and the detached statistics, those of
        :attr:`statistics` but ``grad_norm``, in one tensor. This is what ``cfg.compile`` compiles, as one graph."""
        autocast = torch.autocast(self.device.type, torch.bfloat16, enabled=self.cfg.algorithm.use_mixed_precision)
        with set_recurrent_mode(True), autocast:
            losses = self.loss(minibatch)
            loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            symmetry = self.cfg.algorithm.symmetry_cfg
            if symmetry is not None and symmetry.use_mirror_loss:
                loss = loss + symmetry.mirror_loss_coeff * losses["loss_symmetry"]
            if self.rnd is not None:  # the predictor's loss on the original samples; its own parameters
                losses["loss_rnd"] = self.rnd.loss(minibatch[: minibatch.shape[0] // self.loss.copies])
                loss = loss + losses["loss_rnd"]
        # "kl" is rsl_rl's analytic KL (see ClipPPOLossWithKL)
        keys = ("loss_objective", "loss_critic", "entropy", "kl_approx") + (("loss_symmetry",) if self.mirror else ())
        keys += ("loss_rnd",) if self.rnd else ()
        return loss, torch.stack([losses[key].detach().float() for key in keys])

    def loss_and_gradients(self, minibatch: TensorDictBase) -> TensorDictBase:
        """The losses (:meth:`losses`) and their gradients (in ``.grad``); returns the statistics under
        ``"statistics"`` (a CUDA graph of tensordict's returns a tensordict). ``cfg.cudagraphs`` replays it."""
        loss, statistics = self._losses(minibatch)
        self.optimizer.zero_grad(set_to_none=True)
        if self.rnd is not None:
            self.rnd_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return TensorDict(statistics=statistics)

    def _average_and_clip_gradients(self) -> torch.Tensor:
        """Averages the gradients over the ranks (with several), clips the actor's and the critic's gradient norms
        each to ``max_grad_norm`` (rsl_rl's rule); returns the norm of all gradients before the clipping, RND's
        predictor's (unclipped, as in rsl_rl) included, which the NaN guard reads."""
        if self.distributed is not None:
            with self._communication():
                average_gradients(self.synced_parameters)
        max_norm = self.cfg.algorithm.max_grad_norm
        norms = [torch.nn.utils.clip_grad_norm_(group, max_norm) for group in self.clipped_groups]
        if self.rnd is not None:
            norms.append(torch.nn.utils.get_total_norm([p.grad for p in self.rnd.predictor.parameters()]))
        return torch.linalg.vector_norm(torch.stack(norms))

    def _normalizer_samples(self, batch: TensorDictBase) -> list[torch.Tensor]:
        """The inputs of each observation normalizer in ``batch`` (its groups, concatenated)."""
        return [torch.cat([batch[key] for key in keys], dim=-1) for _, keys in self.normalizers]

    def _update_normalizers(self, inputs: list[torch.Tensor]) -> None:
        """Merges the batch's observations into the running statistics of the networks' inputs.

        The workers receive the new statistics with the next weight sync (they are buffers of the policy).
        """
        for (normalizer, _), samples in zip(self.normalizers, inputs, strict=True):
            if self.distributed is None:
                normalizer.update(samples)
            else:  # the statistics of all ranks' batches, so that the replicas' normalizers stay equal
                with self._communication():
                    moments = global_moments(samples)
                normalizer.merge(*moments)

    def _check_finite(self, batch: TensorDictBase, keys: list, what: str) -> None:
        """Stops on NaN/Inf in ``batch[keys]``, naming the keys, before they change the networks (one host sync)."""
        finite = torch.stack([torch.isfinite(batch[key]).all() for key in keys])
        if self.distributed is not None:  # a bad batch on any rank stops all ranks
            finite = average(finite.float()) == 1.0
        if not bool(finite.all()):
            bad = [key for key, ok in zip(keys, finite.tolist(), strict=True) if not ok]
            raise NonFiniteError(
                f"Non-finite values (NaN/Inf) in {bad} of the {what}: no update was made with this batch.",
                parameters_unchanged=True,
            )

    def _adapt_learning_rate(self, kl: torch.Tensor, skipped: torch.Tensor | None) -> None:
        """rsl_rl's adaptive schedule: shrink the learning rate when the policy moved too far, grow it otherwise (not
        on a step the NaN check skips)."""
        desired_kl = self.cfg.algorithm.desired_kl
        shrunk = torch.clamp(self.lr / 1.5, min=1e-5)
        grown = torch.clamp(self.lr * 1.5, max=1e-2)
        lr = torch.where(
            kl > desired_kl * 2.0, shrunk, torch.where((kl > 0.0) & (kl < desired_kl / 2.0), grown, self.lr)
        )
        self.lr.copy_(lr if skipped is None else torch.where(skipped > 0, self.lr, lr))

    @contextlib.contextmanager
    def _communication(self):
        """Times a collective operation (on GPUs, NCCL's launch; the wait shows where the result is used)."""
        start = time.perf_counter()
        yield
        self.communication_time += time.perf_counter() - start

    @property
    def learning_rate(self) -> float:
        """The current learning rate (reading it waits for the learner's device)."""
        return float(self.lr)

    def noise_std(self) -> float:
        """Mean standard deviation of the Gaussian action noise; when it depends on the observation, its mean over
        the last batch the update was given (as the acting policy drew it)."""
        std = noise_std(self.actor)
        return float((self.batch_noise_std if std is None else std).mean())

    def state_dict(self) -> dict:
        state = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
        }
        if self.rnd is not None:
            state.update(rnd=self.rnd.state_dict(), rnd_optimizer=self.rnd_optimizer.state_dict())
        return state

    def load_state_dict(self, state: dict, optimizer: bool = True) -> bool:
        """Restores networks and, with ``optimizer``, the optimizer and the learning rate; returns ``True`` (a PPO
        checkpoint's iteration and RNG state apply: it continues its run).

        Raises:
            ValueError: the state was trained with other networks or sizes.
        """
        try:
            self.actor.load_state_dict(state["actor"])
            self.critic.load_state_dict(state["critic"])
            if optimizer:
                load_optimizer_state(self.optimizer, state["optimizer"])
            if self.rnd is not None and "rnd" in state:
                self.rnd.load_state_dict(state["rnd"])
                if optimizer:
                    load_optimizer_state(self.rnd_optimizer, state["rnd_optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ValueError(f"different observation/action sizes or networks: {str(exc).splitlines()[0]}") from exc
        if optimizer:
            self.lr.fill_(float(state["learning_rate"]))
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        return True

"""The plain PyTorch PPO that the learner tests compare the learner's update with (``tests/test_learner.py``), and
what those tests share: the small synthetic batch in the collectors' ``compact_obs`` layout, the runner configs, and
the comparison of the updated parameters and statistics."""

import copy
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import AddStateIndependentNormalScale
from torch import nn
from torchrl.modules import MLP

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.models import EnvInterface, observation_normalizers
from isaaclab_torchrl.runners import PPO

N, T, OBS, ACT, HIDDEN = 4, 6, 3, 2, 5
CLIP, VALUE_COEF, ENTROPY_COEF, LR, GAMMA, LAM = 0.2, 0.7, 0.01, 3e-3, 0.9, 0.8
# so small that Adam's epsilon (1e-8) sees the clipping: Adam's first step is otherwise blind to a gradient's scale
MAX_GRAD_NORM = 1e-6
TERMINATED = {(0, 2), (3, 5)}
TRUNCATED = {(1, 3), (2, 0), (3, 1)}
# rsl_rl's adaptive schedule
LR_MIN, LR_MAX = 1e-5, 1e-2
SEED = 11  # of the minibatch split (torch.randperm on the global generator, the batch's device: the CPU)
BACKENDS = [(None, "auto"), ("lstm", "pad"), ("lstm", "fused")]
INTERFACE = EnvInterface(("policy",), OBS, ("policy",), OBS, ACT)
ONE_STEP = dict(epochs=1, minibatches=1, schedule="fixed")
# several epochs of two minibatches with the adaptive schedule, at a clip range that the values move past within
# the update (the clipping acts) and a desired KL that the policy's moves reach
SEVERAL_STEPS = dict(epochs=3, minibatches=2, schedule="adaptive", clip_param=0.02, desired_kl=0.003)


def _cfg(rnn_type, epochs, minibatches, schedule, learning_rate=LR, clip_param=CLIP, desired_kl=0.01):
    return TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        tf32=False,  # on a GPU too: the reference computes in float32
        policy=TorchRLPolicyCfg(
            rnn_type=rnn_type, rnn_hidden_size=HIDDEN, actor_hidden_dims=[8], critic_hidden_dims=[8], init_noise_std=0.8
        ),
        algorithm=TorchRLPpoCfg(
            num_learning_epochs=epochs,
            num_mini_batches=minibatches,
            learning_rate=learning_rate,
            schedule=schedule,
            desired_kl=desired_kl,
            clip_param=clip_param,
            value_loss_coef=VALUE_COEF,
            entropy_coef=ENTROPY_COEF,
            max_grad_norm=MAX_GRAD_NORM,
            gamma=GAMMA,
            lam=LAM,
        ),
    )


def episode_ends(envs: int, steps: int, terminated_at: set, truncated_at: set) -> tuple[torch.Tensor, ...]:
    """``terminated``, ``truncated`` and ``done`` ``[envs, steps, 1]`` of a batch whose episodes end at the given
    ``(env, step)`` pairs."""
    terminated = torch.zeros(envs, steps, 1, dtype=torch.bool)
    truncated = torch.zeros(envs, steps, 1, dtype=torch.bool)
    for env, step in terminated_at:
        terminated[env, step] = True
    for env, step in truncated_at:
        truncated[env, step] = True
    return terminated, truncated, terminated | truncated


def _batch(rnn_type) -> TensorDict:
    generator = torch.Generator().manual_seed(3)
    terminated, truncated, done = episode_ends(N, T, TERMINATED, TRUNCATED)
    is_init = torch.zeros(N, T, 1, dtype=torch.bool)
    is_init[:, 1:] = done[:, :-1]
    is_init[0, 0] = True  # env 0 starts an episode with the rollout, the others are in the middle of one
    obs = torch.randn(N, T, OBS, generator=generator)
    final_obs = torch.randn(N, T, OBS, generator=generator)
    final_obs[:, :-1][~done[:, :-1].squeeze(-1)] = obs[:, 1:][~done[:, :-1].squeeze(-1)]
    batch = TensorDict(
        {
            "policy": obs,
            "is_init": is_init,
            "action": torch.randn(N, T, ACT, generator=generator),
            # a behaviour policy a little off the learner's, so that some ratios are clipped
            "action_log_prob": -2.0 + 0.5 * torch.randn(N, T, generator=generator),
            "loc": 0.3 * torch.randn(N, T, ACT, generator=generator),
            "scale": 0.6 + 0.4 * torch.rand(N, T, ACT, generator=generator),
            "next": {
                "reward": torch.randn(N, T, 1, generator=generator),
                "done": done,
                "terminated": terminated,
                "truncated": truncated,
                "final_obs": {"policy": final_obs},
            },
        },
        batch_size=(N, T),
    )
    if rnn_type:
        for key in ("actor_rnn_h", "actor_rnn_c", "critic_rnn_h", "critic_rnn_c"):
            state = torch.randn(N, T, 1, HIDDEN, generator=generator)
            batch[key] = state.masked_fill(is_init.unsqueeze(-1), 0.0)  # the primers zero a new episode's state
    return batch


class PlainNetwork(nn.Module):
    """A network of the learner rebuilt from plain modules with copies of its weights (and of its observation
    normaliser's statistics, frozen), run one step at a time."""

    def __init__(self, torchrl_network: nn.Module, name: str):
        super().__init__()
        self.name = name
        lstms = [m for m in torchrl_network.modules() if isinstance(m, nn.LSTM)]
        self.lstm = copy.deepcopy(lstms[0]) if lstms else None
        self.mlp = copy.deepcopy(next(m for m in torchrl_network.modules() if isinstance(m, MLP)))
        normalizers = observation_normalizers(torchrl_network)
        self.statistics = None
        if normalizers:
            normalizer = normalizers[0]
            self.statistics = (normalizer.mean.clone(), normalizer.var.clone(), normalizer.eps)

    def normalized(self, obs: torch.Tensor) -> torch.Tensor:
        if self.statistics is None:
            return obs
        mean, var, eps = self.statistics
        return (obs - mean) / (var.sqrt() + eps)

    def forward(self, batch: TensorDict, with_next: bool = False, slices=range(N)):
        """Outputs at every step (and, with ``with_next``, on the final observation after it) of ``slices``, as
        ``[len(slices), T, ...]``; a recurrent network runs one step at a time."""
        obs = self.normalized(batch["policy"][list(slices)])
        final_obs = self.normalized(batch["next", "final_obs", "policy"][list(slices)])
        if self.lstm is None:
            return (self.mlp(obs), self.mlp(final_obs)) if with_next else self.mlp(obs)
        outputs, next_outputs = [], []
        for row, env in enumerate(slices):
            state = None
            for step in range(T):
                if batch["is_init"][env, step]:
                    state = None
                if state is None:  # a new segment starts from the state the collector recorded (zero when new)
                    state = tuple(batch[f"{self.name}_{k}"][env, step].view(1, 1, -1).contiguous() for k in "hc")
                features, new_state = self.lstm(obs[row, step].view(1, 1, -1), state)
                outputs.append(self.mlp(features.view(-1)))
                if with_next:
                    next_features, _ = self.lstm(final_obs[row, step].view(1, 1, -1), new_state)
                    next_outputs.append(self.mlp(next_features.view(-1)))
                state = new_state
        out = torch.stack(outputs).view(len(slices), T, -1)
        return (out, torch.stack(next_outputs).view(len(slices), T, -1)) if with_next else out

    def weights(self) -> list[nn.Parameter]:
        return [*(self.lstm.parameters() if self.lstm is not None else []), *self.mlp.parameters()]


def _noise_scale(actor: nn.Module) -> nn.Parameter:
    noise = next(m for m in actor.modules() if isinstance(m, AddStateIndependentNormalScale))
    return noise.state_independent_scale


@dataclass
class Reference:
    """The plain PPO's update: its parameters, statistics and learning rate, and what happened on the way."""

    parameters: list[torch.Tensor]
    stats: dict[str, float]
    learning_rate: float
    kls: list[float]
    """The KL of each minibatch, in order."""
    learning_rates: list[float]
    """The learning rate of each minibatch's step, in order."""
    value_clipped: int
    """Samples (over all minibatches) whose value loss the clipping set: the value moved more than the clip range
    from the stored one, toward the target, so that the clipped (pessimistic) loss is the larger."""
    importance_weights: torch.Tensor | None = None


@torch.no_grad()
def plain_gae(critic: PlainNetwork, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The critic's values, the normalised advantages and the value targets of ``batch`` (``[N, T]`` each): GAE step by
    step, bootstrapped with the value of the true next observation, but after a termination."""
    values, next_values = (v.squeeze(-1) for v in critic(batch, with_next=True))
    reward = batch["next", "reward"].squeeze(-1)
    not_terminated = (~batch["next", "terminated"]).squeeze(-1).float()
    not_done = (~batch["next", "done"]).squeeze(-1).float()
    advantage, running = torch.zeros(N, T), torch.zeros(N)
    for step in reversed(range(T)):
        delta = reward[:, step] + GAMMA * not_terminated[:, step] * next_values[:, step] - values[:, step]
        running = delta + GAMMA * LAM * not_done[:, step] * running
        advantage[:, step] = running
    target = advantage + values
    return values, (advantage - advantage.mean()) / (advantage.std() + 1e-8), target


def _reference_update(learner: PPO, batch: TensorDict, lag_corrected: bool = False) -> Reference:
    """The update ``learner`` must make on ``batch``, in plain PyTorch, from copies of its weights and config.

    The random split into minibatches is drawn once, with ``torch.manual_seed(SEED)``, and every epoch goes through
    it again; with ``lag_corrected``, the learner's policy at the start is the proximal one.
    """
    algo = learner.cfg.algorithm
    clip, desired_kl = algo.clip_param, algo.desired_kl
    actor, critic = PlainNetwork(learner.actor, "actor_rnn"), PlainNetwork(learner.critic, "critic_rnn")
    std_param = nn.Parameter(_noise_scale(learner.actor).detach().clone())

    values, advantage, target = plain_gae(critic, batch)
    with torch.no_grad():
        # the reference policy of the ratio, the clip and the KL: the acting one, or the proximal one (the
        # learner's policy before this update), with the advantages weighted by the truncated importance ratio
        reference_log_prob, reference_loc, reference_scale = batch["action_log_prob"], batch["loc"], batch["scale"]
        weight = None
        if lag_corrected:
            reference_loc = actor(batch)
            reference_scale = std_param.clamp_min(1e-6).expand_as(reference_loc)
            proximal = torch.distributions.Normal(reference_loc, reference_scale)
            reference_log_prob = proximal.log_prob(batch["action"]).sum(-1)
            weight = torch.exp(reference_log_prob - batch["action_log_prob"]).clamp(max=1.0)  # truncated at 1
            advantage = advantage * weight

    # one permutation per update: of whole slices for the LSTM, of single steps for the MLP
    recurrent = actor.lstm is not None
    count = algo.num_mini_batches
    size = N if recurrent else N * T
    torch.manual_seed(SEED)
    split = torch.randperm(size)[: count * (size // count)].view(count, size // count)

    def select(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The minibatch's samples of a ``[N, T, ...]`` tensor, as a flat ``[samples, ...]`` one."""
        chosen = tensor[indices] if recurrent else tensor.reshape(N * T, *tensor.shape[2:])[indices]
        return chosen.reshape(-1, *tensor.shape[2:])

    def run(network: PlainNetwork, indices: torch.Tensor) -> torch.Tensor:
        """The network's outputs on the minibatch's samples (a recurrent one runs only the minibatch's slices)."""
        if recurrent:
            return network(batch, slices=indices.tolist()).flatten(0, 1)
        return select(network(batch), indices)

    parameters = [*actor.weights(), std_param, *critic.weights()]
    learning_rate = algo.learning_rate
    optimizer = torch.optim.Adam(parameters, lr=learning_rate)
    sums = dict.fromkeys(("surrogate", "value", "entropy", "kl"), 0.0)
    kls, learning_rates, value_clipped = [], [], 0
    for _ in range(algo.num_learning_epochs):
        for indices in split:
            loc = run(actor, indices)
            distribution = torch.distributions.Normal(loc, std_param.clamp_min(1e-6))
            log_prob = distribution.log_prob(select(batch["action"], indices)).sum(-1)
            ratio = torch.exp(log_prob - select(reference_log_prob, indices))
            mb_advantage = select(advantage, indices)
            surrogate = -torch.min(ratio * mb_advantage, ratio.clamp(1 - clip, 1 + clip) * mb_advantage).mean()
            value = run(critic, indices).squeeze(-1)
            old_value, mb_target = select(values, indices), select(target, indices)
            clipped = old_value + (value - old_value).clamp(-clip, clip)
            value_loss = VALUE_COEF * torch.max((value - mb_target) ** 2, (clipped - mb_target) ** 2).mean()
            value_clipped += int(((clipped - mb_target) ** 2 > (value - mb_target) ** 2).sum())
            entropy = distribution.entropy().sum(-1).mean()
            reference = torch.distributions.Normal(select(reference_loc, indices), select(reference_scale, indices))
            kl = float(torch.distributions.kl_divergence(reference, distribution).sum(-1).mean().detach())
            loss = surrogate + value_loss - ENTROPY_COEF * entropy

            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([*actor.weights(), std_param], MAX_GRAD_NORM)
            torch.nn.utils.clip_grad_norm_(critic.weights(), MAX_GRAD_NORM)
            if algo.schedule == "adaptive":  # rsl_rl's rule, on this minibatch's KL, before its step
                if kl > 2.0 * desired_kl:
                    learning_rate = max(LR_MIN, learning_rate / 1.5)
                elif 0.0 < kl < desired_kl / 2.0:
                    learning_rate = min(LR_MAX, learning_rate * 1.5)
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate
            optimizer.step()
            kls.append(kl)
            learning_rates.append(learning_rate)
            for key, term in (("surrogate", surrogate), ("value", value_loss), ("entropy", entropy)):
                sums[key] += float(term.detach())
            sums["kl"] += kl
    steps = len(kls)
    stats = {key: value / steps for key, value in sums.items()}
    return Reference(parameters, stats, learning_rate, kls, learning_rates, value_clipped, weight)


def _learner_parameters(learner: PPO) -> list[torch.Tensor]:
    found = []
    for network in (learner.actor, learner.critic):
        lstms = [m for m in network.modules() if isinstance(m, nn.LSTM)]
        if lstms:
            found += list(lstms[0].parameters())
        found += list(next(m for m in network.modules() if isinstance(m, MLP)).parameters())
        if network is learner.actor:
            found.append(_noise_scale(learner.actor))
    return found


def _update(learner: PPO, batch: TensorDict) -> dict[str, float]:
    """The learner's update, its minibatch split drawn as the reference's."""
    torch.manual_seed(SEED)
    return learner.update(batch.clone())


def _assert_update_equals(learner: PPO, initial: list[torch.Tensor], stats: dict, reference: Reference) -> None:
    updated = _learner_parameters(learner)
    assert len(updated) == len(reference.parameters)
    for before, after, expected in zip(initial, updated, reference.parameters, strict=True):
        assert not torch.equal(before, after), "every parameter moved"
        torch.testing.assert_close(after.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
    for key, value in reference.stats.items():
        assert stats[key] == pytest.approx(value, abs=1e-5, rel=1e-5), key
    assert learner.learning_rate == pytest.approx(reference.learning_rate, rel=1e-6)


def _check_margins(reference: Reference, learning_rate: float, desired_kl: float) -> None:
    """No KL sits so close to a threshold of the adaptive schedule that rounding could take the other branch."""
    rates = [learning_rate, *reference.learning_rates]
    for kl, rate in zip(reference.kls, rates, strict=False):
        if kl < 1e-6:  # zero up to rounding: "0 < kl" may go either way, which only the rate's maximum hides
            assert rate == LR_MAX, (kl, rate)
            continue
        for threshold in (2.0 * desired_kl, desired_kl / 2.0):
            assert abs(kl - threshold) > 0.01 * threshold, (kl, threshold)

"""The PPO learner alone, built without any environment: one update on a small synthetic batch in the collectors'
``compact_obs`` layout equals a plain PyTorch PPO (step-by-step networks, GAE bootstrapped with the final
observations, normalised advantages, clipped surrogate and value losses, entropy bonus, the analytic KL of the
adaptive learning rate, the actor's and the critic's gradients clipped separately, one Adam step) on the same data
and initial weights."""

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import AddStateIndependentNormalScale
from torch import nn
from torchrl.modules import MLP

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO

N, T, OBS, ACT, HIDDEN = 4, 6, 3, 2, 5
CLIP, VALUE_COEF, ENTROPY_COEF, LR, GAMMA, LAM = 0.2, 0.7, 0.01, 3e-3, 0.9, 0.8
# so small that Adam's epsilon (1e-8) sees the clipping: Adam's first step is otherwise blind to a gradient's scale
MAX_GRAD_NORM = 1e-6
TERMINATED = {(0, 2), (3, 5)}
TRUNCATED = {(1, 3), (2, 0), (3, 1)}


def _cfg(rnn_type) -> TorchRLRunnerCfg:
    return TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        policy=TorchRLPolicyCfg(
            rnn_type=rnn_type, rnn_hidden_size=HIDDEN, actor_hidden_dims=[8], critic_hidden_dims=[8], init_noise_std=0.8
        ),
        algorithm=TorchRLPpoCfg(
            num_learning_epochs=1,
            num_mini_batches=1,
            learning_rate=LR,
            schedule="fixed",
            clip_param=CLIP,
            value_loss_coef=VALUE_COEF,
            entropy_coef=ENTROPY_COEF,
            max_grad_norm=MAX_GRAD_NORM,
            gamma=GAMMA,
            lam=LAM,
        ),
    )


def _batch(rnn_type) -> TensorDict:
    generator = torch.Generator().manual_seed(3)
    terminated = torch.zeros(N, T, 1, dtype=torch.bool)
    truncated = torch.zeros(N, T, 1, dtype=torch.bool)
    for env, step in TERMINATED:
        terminated[env, step] = True
    for env, step in TRUNCATED:
        truncated[env, step] = True
    done = terminated | truncated
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
    """A network of the learner rebuilt from plain modules with copies of its weights, run one step at a time."""

    def __init__(self, torchrl_network: nn.Module, name: str):
        super().__init__()
        self.name = name
        lstms = [m for m in torchrl_network.modules() if isinstance(m, nn.LSTM)]
        self.lstm = copy.deepcopy(lstms[0]) if lstms else None
        self.mlp = copy.deepcopy(next(m for m in torchrl_network.modules() if isinstance(m, MLP)))

    def forward(self, batch: TensorDict, with_next: bool = False):
        """Outputs at every step (and, with ``with_next``, on the final observation after it), slice by slice."""
        outputs, next_outputs = [], []
        for env in range(N):
            state = None
            for step in range(T):
                obs = batch["policy"][env, step]
                if self.lstm is None:
                    outputs.append(self.mlp(obs))
                    next_outputs.append(self.mlp(batch["next", "final_obs", "policy"][env, step]))
                    continue
                if batch["is_init"][env, step]:
                    state = None
                if state is None:  # a new segment starts from the state the collector recorded (zero when new)
                    state = tuple(batch[f"{self.name}_{k}"][env, step].view(1, 1, -1).contiguous() for k in "hc")
                features, new_state = self.lstm(obs.view(1, 1, -1), state)
                outputs.append(self.mlp(features.view(-1)))
                if with_next:
                    next_features, _ = self.lstm(
                        batch["next", "final_obs", "policy"][env, step].view(1, 1, -1), new_state
                    )
                    next_outputs.append(self.mlp(next_features.view(-1)))
                state = new_state
        out = torch.stack(outputs).view(N, T, -1)
        return (out, torch.stack(next_outputs).view(N, T, -1)) if with_next else out

    def weights(self) -> list[nn.Parameter]:
        return [*(self.lstm.parameters() if self.lstm is not None else []), *self.mlp.parameters()]


def _noise_scale(actor: nn.Module) -> nn.Parameter:
    noise = next(m for m in actor.modules() if isinstance(m, AddStateIndependentNormalScale))
    return noise.state_independent_scale


def _reference_update(learner: PPO, batch: TensorDict) -> tuple[list[torch.Tensor], dict[str, float]]:
    actor, critic = PlainNetwork(learner.actor, "actor_rnn"), PlainNetwork(learner.critic, "critic_rnn")
    std_param = nn.Parameter(_noise_scale(learner.actor).detach().clone())

    with torch.no_grad():
        values, next_values = (v.squeeze(-1) for v in critic(batch, with_next=True))
        reward = batch["next", "reward"].squeeze(-1)
        not_terminated = (~batch["next", "terminated"]).squeeze(-1).float()
        not_done = (~batch["next", "done"]).squeeze(-1).float()
        advantage = torch.zeros(N, T)
        running = torch.zeros(N)
        for step in reversed(range(T)):
            delta = reward[:, step] + GAMMA * not_terminated[:, step] * next_values[:, step] - values[:, step]
            running = delta + GAMMA * LAM * not_done[:, step] * running
            advantage[:, step] = running
        target = advantage + values
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)

    loc = actor(batch)
    distribution = torch.distributions.Normal(loc, std_param.clamp_min(1e-6))
    log_prob = distribution.log_prob(batch["action"]).sum(-1)
    ratio = torch.exp(log_prob - batch["action_log_prob"])
    surrogate = -torch.min(ratio * advantage, ratio.clamp(1 - CLIP, 1 + CLIP) * advantage).mean()
    value = critic(batch).squeeze(-1)
    clipped = values + (value - values).clamp(-CLIP, CLIP)
    value_loss = VALUE_COEF * torch.max((value - target) ** 2, (clipped - target) ** 2).mean()
    entropy = distribution.entropy().sum(-1).mean()
    # the adaptive schedule's KL: analytic, from the acting policy's loc and scale to the current policy's
    acting = torch.distributions.Normal(batch["loc"], batch["scale"])
    kl = torch.distributions.kl_divergence(acting, distribution).sum(-1).mean()
    loss = surrogate + value_loss - ENTROPY_COEF * entropy

    parameters = [*actor.weights(), std_param, *critic.weights()]
    optimizer = torch.optim.Adam(parameters, lr=LR)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([*actor.weights(), std_param], MAX_GRAD_NORM)
    torch.nn.utils.clip_grad_norm_(critic.weights(), MAX_GRAD_NORM)
    optimizer.step()
    stats = {key: float(value.detach()) for key, value in [("surrogate", surrogate), ("value", value_loss)]}
    stats["entropy"] = float(entropy.detach())
    stats["kl"] = float(kl.detach())
    return parameters, stats


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


@pytest.mark.parametrize(
    ("rnn_type", "backend"),
    # the GPU's graphed update runs the fused backend, eager updates pad; on the CPU both must agree
    [(None, "auto"), ("lstm", "pad"), ("lstm", "fused")],
)
def test_one_update_equals_a_plain_pytorch_ppo_step(rnn_type, backend):
    torch.manual_seed(0)
    cfg = _cfg(rnn_type)
    cfg.policy.recurrent_backend = backend
    learner = PPO(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu")
    batch = _batch(rnn_type)
    expected_parameters, expected_stats = _reference_update(learner, batch)
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = learner.update(batch.clone())

    updated = _learner_parameters(learner)
    assert len(updated) == len(expected_parameters)
    for before, after, expected in zip(initial, updated, expected_parameters, strict=True):
        assert not torch.equal(before, after), "every parameter moved"
        torch.testing.assert_close(after.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
    for key, value in expected_stats.items():
        assert stats[key] == pytest.approx(value, abs=1e-5, rel=1e-5), key


@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_minibatches_are_steps_for_an_mlp_and_slices_for_a_recurrent_policy(rnn_type):
    """rsl_rl's two generators: an MLP's minibatches mix single steps of all slices; a recurrent policy's keep
    whole slices (its state runs along them); every epoch covers the batch once."""
    cfg = _cfg(rnn_type)
    cfg.algorithm.num_mini_batches = 2
    learner = PPO(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, ACT), "cpu")
    batch = TensorDict({"index": torch.arange(N * T).view(N, T)}, batch_size=(N, T))
    torch.manual_seed(0)
    minibatches = list(learner._minibatches(batch))
    assert len(minibatches) == 2
    seen = torch.cat([minibatch["index"].reshape(-1) for minibatch in minibatches])
    assert sorted(seen.tolist()) == list(range(N * T))
    if rnn_type is None:
        assert all(minibatch.batch_size == (N * T // 2,) for minibatch in minibatches)
        slices_per_minibatch = [len(set((minibatch["index"] // T).tolist())) for minibatch in minibatches]
        assert max(slices_per_minibatch) > N // 2, "steps of more slices than a split of whole slices would hold"
    else:
        assert all(minibatch.batch_size == (N // 2, T) for minibatch in minibatches)
        for minibatch in minibatches:
            assert torch.equal(minibatch["index"] % T, torch.arange(T).expand(N // 2, T)), "whole slices, in order"

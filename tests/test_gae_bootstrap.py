"""GAE on a recorded batch with time-outs, terminations and a rollout boundary matches a plain reference.

The batch has the layout the collectors deliver with ``compact_obs=True``: root observations, no
``("next", "policy")``, and the true next observation under ``("next", "final_obs", "policy")``. The
reference walks each environment's row backwards with values computed step by step, bootstrapping with
V(final observation) on time-outs and at the rollout's end, and with nothing on terminations.
"""

import pytest
import torch
from tensordict import TensorDict

from isaaclab_torchrl.agents import TorchRLPolicyCfg
from isaaclab_torchrl.models import EnvInterface, make_models
from isaaclab_torchrl.runners.gae import CollectedBatchGAE
from ppo_reference import episode_ends

pytestmark = pytest.mark.fast

GAMMA, LAM = 0.9, 0.8
N, T, OBS = 3, 8, 4
# (env, step) -> kind of episode end
# env 0 times out on its first episode's first step; env 1 starts an episode on the rollout's last step, so that the
# bootstrap at the rollout's end follows one step of a new episode
TERMINATED = {(0, 2), (1, 6), (2, 7)}
TRUNCATED = {(0, 0), (0, 5), (1, 3), (1, 5), (2, 1)}


def _batch(rnn_state_keys: dict[str, int]) -> TensorDict:
    torch.manual_seed(0)
    obs = torch.randn(N, T, OBS)
    final_obs = torch.randn(N, T, OBS)  # the observation after each step, before any reset
    terminated, truncated, done = episode_ends(N, T, TERMINATED, TRUNCATED)
    # without an episode end the next observation is the next root observation
    continuing = ~done[:, :-1].squeeze(-1)
    final_obs[:, :-1][continuing] = obs[:, 1:][continuing]
    is_init = torch.zeros(N, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[:, 1:] = done[:, :-1]
    is_init[1, 0] = False  # env 1 starts the rollout in the middle of an episode
    batch = TensorDict(
        {
            "policy": obs,
            "is_init": is_init,
            "next": {
                "reward": torch.randn(N, T, 1),
                "done": done,
                "terminated": terminated,
                "truncated": truncated,
                "final_obs": {"policy": final_obs},
            },
        },
        batch_size=(N, T),
    )
    for key, size in rnn_state_keys.items():
        # the recurrent-state primer zeroes the state of a new episode
        batch[key] = torch.randn(N, T, 1, size).masked_fill(is_init.unsqueeze(-1), 0.0)
    return batch


def _reference_values(critic, batch, recurrent: bool):
    """V(s_t) and V(s'_t) (the true next observation) by stepping the critic one step at a time."""
    values = torch.zeros(N, T)
    next_values = torch.zeros(N, T)
    for env in range(N):
        state = None
        for step in range(T):
            if batch["is_init"][env, step]:
                state = None
            if recurrent:
                module = critic.module[0]
                rnn = module.lstm if hasattr(module, "lstm") else module.gru
                keys = ["critic_rnn_h", "critic_rnn_c"] if hasattr(module, "lstm") else ["critic_rnn_h"]
                mlp = critic.module[1].module
                if state is None:
                    fresh = step or batch["is_init"][env, 0]
                    state = tuple(
                        torch.zeros(1, 1, rnn.hidden_size) if fresh else batch[key][env, 0].view(1, 1, -1)
                        for key in keys
                    )
                    state = state if len(state) == 2 else state[0]
                out, new_state = rnn(batch["policy"][env, step].view(1, 1, -1), state)
                values[env, step] = mlp(out.view(1, -1)).squeeze()
                out_next, _ = rnn(batch["next", "final_obs", "policy"][env, step].view(1, 1, -1), new_state)
                next_values[env, step] = mlp(out_next.view(1, -1)).squeeze()
                state = new_state
            else:
                mlp = critic.module[0].module
                values[env, step] = mlp(batch["policy"][env, step]).squeeze()
                next_values[env, step] = mlp(batch["next", "final_obs", "policy"][env, step]).squeeze()
    return values, next_values


def _reference_gae(batch, values, next_values):
    reward = batch["next", "reward"].squeeze(-1)
    terminated = batch["next", "terminated"].squeeze(-1).float()
    done = batch["next", "done"].squeeze(-1).float()
    advantage = torch.zeros(N, T)
    for env in range(N):
        running = 0.0
        for step in reversed(range(T)):
            delta = reward[env, step] + GAMMA * (1 - terminated[env, step]) * next_values[env, step] - values[env, step]
            running = delta + GAMMA * LAM * (1 - done[env, step]) * running
            advantage[env, step] = running
    return advantage, advantage + values


# the update's GAE runs the critic with the policy's recurrent backend: the GPU's graphed update uses fused
@pytest.mark.parametrize(
    ("rnn_type", "backend"), [(None, "auto"), ("lstm", "pad"), ("lstm", "fused"), ("gru", "pad"), ("gru", "fused")]
)
def test_gae_matches_reference(rnn_type, backend):
    cfg = TorchRLPolicyCfg(
        rnn_type=rnn_type, rnn_hidden_size=5, actor_hidden_dims=[6], critic_hidden_dims=[6], recurrent_backend=backend
    )
    interface = EnvInterface(("policy",), OBS, ("policy",), OBS, 2)
    torch.manual_seed(1)
    _, critic = make_models(cfg, interface, "cpu")
    batch = _batch(
        {"critic_rnn_h": 5, "critic_rnn_c": 5} if rnn_type == "lstm" else {"critic_rnn_h": 5} if rnn_type else {}
    )
    gae = CollectedBatchGAE(critic, GAMMA, LAM, ("policy",))

    out = gae(batch.clone())

    with torch.no_grad():
        values, next_values = _reference_values(critic, batch, recurrent=rnn_type is not None)
    advantage, value_target = _reference_gae(batch, values, next_values)
    assert bool(out["shifted_valid"].all()), "no sample may be displaced by the inserted final observations"
    torch.testing.assert_close(out["advantage"].squeeze(-1), advantage, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["value_target"].squeeze(-1), value_target, atol=1e-5, rtol=1e-5)


def test_time_out_bootstrap_uses_the_final_observation():
    """Replacing a time-out's final observation changes its advantage; replacing a termination's does not."""
    cfg = TorchRLPolicyCfg(actor_hidden_dims=[6], critic_hidden_dims=[6])
    _, critic = make_models(cfg, EnvInterface(("policy",), OBS, ("policy",), OBS, 2), "cpu")
    gae = CollectedBatchGAE(critic, GAMMA, LAM, ("policy",))
    batch = _batch({})
    base = gae(batch.clone())["advantage"]
    for (env, step), should_change in (((0, 5), True), ((0, 2), False), ((2, 7), False), ((1, 7), True)):
        changed = batch.clone()
        changed["next", "final_obs", "policy"][env, step] += 10.0
        advantage = gae(changed)["advantage"]
        assert bool((advantage[env, step] != base[env, step]).any()) == should_change, (env, step)

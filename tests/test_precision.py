"""The learner's precision switches: ``agent.algorithm.use_mixed_precision`` (bfloat16 autocast over the losses, as
rsl_rl's option) and ``agent.tf32`` (TF32 CUDA products in the update). Each applies where the config says and
nowhere else, and an update under bfloat16 stays near the float32 one (at bfloat16's own tolerance)."""

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from isaaclab_torchrl.agents import TorchRLPolicyCfg, TorchRLPpoCfg, TorchRLRunnerCfg
from isaaclab_torchrl.models import EnvInterface
from isaaclab_torchrl.runners import PPO

pytestmark = pytest.mark.fast

N, T, OBS, ACT = 8, 6, 3, 2
INTERFACE = EnvInterface(("policy",), OBS, ("policy",), OBS, ACT)


def _cpu_has_bfloat16_lstm() -> bool:
    """Whether this CPU's oneDNN builds an LSTM in bfloat16 (``nn.LSTM`` under CPU autocast, the ``pad`` backend's
    layer): on a CPU without AVX-512 (AVX2 alone) it has none, and the layer raises there, in rsl_rl's update as in
    ours."""
    layer = torch.nn.LSTM(4, 4, batch_first=True)
    try:
        with torch.autocast("cpu", torch.bfloat16):
            layer(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


LSTM_PAD = pytest.param(
    "lstm",
    "pad",
    marks=pytest.mark.skipif(not _cpu_has_bfloat16_lstm(), reason="this CPU's oneDNN has no bfloat16 LSTM"),
)


def _learner(rnn_type, backend="pad", mixed=False, tf32=False, epochs=2, minibatches=2) -> PPO:
    cfg = TorchRLRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        tf32=tf32,
        policy=TorchRLPolicyCfg(
            rnn_type=rnn_type,
            rnn_hidden_size=16,
            recurrent_backend=backend,
            actor_hidden_dims=[32, 32],
            critic_hidden_dims=[32, 32],
        ),
        algorithm=TorchRLPpoCfg(
            num_learning_epochs=epochs, num_mini_batches=minibatches, learning_rate=1e-3, use_mixed_precision=mixed
        ),
    )
    torch.manual_seed(0)
    return PPO(cfg, INTERFACE, "cpu")


def _batch(learner: PPO) -> TensorDict:
    """A rollout of the learner's collection policy on random observations, in the collectors' layout."""
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(N, T, OBS, generator=generator)
    done = torch.rand(N, T, 1, generator=generator) < 0.15
    is_init = torch.zeros(N, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[:, 1:] = done[:, :-1]
    td = TensorDict({"policy": obs[:, 0], "is_init": is_init[:, 0]}, [N])
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):  # sampled actions, as the workers act
        states = learner.collection_policy(td.clone()).get("next", TensorDict(batch_size=[N])).apply(torch.zeros_like)
        steps = []
        for t in range(T):
            td = TensorDict({"policy": obs[:, t], "is_init": is_init[:, t]}, [N])
            td.update(states.apply(lambda state, t=t: state.masked_fill(is_init[:, t, :, None], 0.0)))
            out = learner.collection_policy(td)
            steps.append(out.exclude("next"))
            states = out.get("next", TensorDict(batch_size=[N]))
    batch = torch.stack(steps, 1)
    batch["next"] = TensorDict(
        {
            "reward": torch.randn(N, T, 1, generator=generator),
            "done": done,
            "terminated": done,
            "truncated": torch.zeros_like(done),
            "final_obs": {"policy": torch.randn(N, T, OBS, generator=generator)},
        },
        [N, T],
    )
    return batch


def _dtype_recorder(module: torch.nn.Module, seen: list):
    return module.register_forward_hook(lambda _, __, output: seen.append(output.dtype))


@pytest.mark.parametrize(("rnn_type", "backend"), [(None, "pad"), LSTM_PAD, ("lstm", "fused"), ("gru", "fused")])
def test_mixed_precision_is_bfloat16_in_the_losses_only_and_near_float32(rnn_type, backend):
    exact, mixed = _learner(rnn_type, backend), _learner(rnn_type, backend, mixed=True)
    batch = _batch(exact)
    actor_outputs, critic_outputs = [], []
    _dtype_recorder(mixed.actor.parts.mean, actor_outputs)
    _dtype_recorder(mixed.critic[-1].module, critic_outputs)

    exact.update(batch.clone())
    mixed.update(batch.clone())

    # GAE runs the critic before the epochs, outside the losses: float32; the losses then run in bfloat16
    assert critic_outputs[0] == torch.float32 and set(critic_outputs[1:]) == {torch.bfloat16}
    assert set(actor_outputs) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in mixed.parameters)
    # the workers' inference is unaffected
    actor_outputs.clear()
    with torch.no_grad():
        mixed.collection_policy(batch[:, 0].exclude("next").clone())
    assert set(actor_outputs) == {torch.float32}


@pytest.mark.parametrize(("rnn_type", "backend"), [(None, "pad"), LSTM_PAD, ("lstm", "fused")])
def test_bfloat16_losses_and_gradients_are_near_float32s(rnn_type, backend):
    """One epoch of one minibatch: losses and gradients at the same parameters, to bfloat16's precision."""
    exact = _learner(rnn_type, backend, epochs=1, minibatches=1)
    mixed = _learner(rnn_type, backend, mixed=True, epochs=1, minibatches=1)
    batch = _batch(exact)
    exact_stats, mixed_stats = exact.update(batch.clone()), mixed.update(batch.clone())
    for key in ("surrogate", "value", "entropy"):
        assert mixed_stats[key] == pytest.approx(exact_stats[key], rel=3e-2, abs=3e-3), key
    for p_exact, p_mixed in zip(exact.parameters, mixed.parameters, strict=True):
        scale = float(p_exact.grad.abs().max())
        torch.testing.assert_close(p_mixed.grad, p_exact.grad, atol=0.05 * scale + 1e-5, rtol=0.05)


def test_tf32_is_on_inside_the_update_only():
    seen = []

    def learner(tf32: bool) -> PPO:
        built = _learner(None, tf32=tf32)
        built.actor.parts.mean.register_forward_hook(lambda *_: seen.append(torch.backends.cuda.matmul.allow_tf32))
        return built

    with_tf32, without = learner(True), learner(False)
    before = torch.backends.cuda.matmul.allow_tf32
    batch = _batch(with_tf32)  # the collection policy: outside the update
    assert seen and not any(seen)
    seen.clear()
    with_tf32.update(batch.clone())
    assert seen and all(seen)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    seen.clear()
    without.update(batch.clone())
    assert seen and not any(seen)

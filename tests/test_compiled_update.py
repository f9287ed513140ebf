"""The compiled update traces PPO's losses, the recurrent pass included, as one graph (the only graph break of
``torch.compile`` in :meth:`~isaaclab_torchrl.runners.PPO.loss_and_gradients` is the optimizer's ``zero_grad``
between the losses and their ``backward``; a break inside the losses would run them eagerly, kernel by kernel,
inside the CUDA graph, and a custom backward pass would not be compiled at all), and updates as the plain PyTorch
PPO does."""

import pytest
import torch
from test_learner import (
    INTERFACE,
    ONE_STEP,
    _assert_update_equals,
    _batch,
    _cfg,
    _learner_parameters,
    _reference_update,
    _update,
)
from test_symmetry import _learner as symmetric_learner

from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.compilation import COMPILE_SETTINGS

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("rnn_type", [None, "lstm", "gru"])
def test_the_compiled_losses_are_one_graph(rnn_type):
    cfg = _cfg(rnn_type, **ONE_STEP)
    cfg.compile = True
    cfg.algorithm.use_clipped_value_loss = True
    cfg.policy.recurrent_backend = "fused" if rnn_type else "auto"
    learner = PPO(cfg, INTERFACE, "cpu")
    minibatch = learner.gae(_batch(rnn_type)).select(*learner.loss_keys)
    if rnn_type is None:
        minibatch = minibatch.reshape(-1)
    with torch._dynamo.config.patch(**COMPILE_SETTINGS):
        explanation = torch._dynamo.explain(learner.loss_and_gradients)(minibatch)
    reasons = [reason.reason for reason in explanation.break_reasons]
    assert len(reasons) == 1 and "Optimizer.zero_grad" in reasons[0], reasons


def test_the_compiled_losses_with_symmetry_are_one_graph():
    learner = symmetric_learner(use_data_augmentation=True, use_mirror_loss=True)
    minibatch = learner.mirror.augment(learner.gae(_batch(None)).select(*learner.loss_keys).reshape(-1))
    with torch._dynamo.config.patch(**COMPILE_SETTINGS):
        explanation = torch._dynamo.explain(learner.loss_and_gradients)(minibatch)
    reasons = [reason.reason for reason in explanation.break_reasons]
    assert len(reasons) == 1 and "Optimizer.zero_grad" in reasons[0], reasons


def test_the_compiled_recurrent_update_equals_the_plain_pytorch_one():
    """The losses and the recurrent pass's written-out backward, as inductor compiles them, update the networks as
    the plain PyTorch PPO does (the GPU's graphed update runs this compiled code)."""
    rnn_type = "lstm"
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, **ONE_STEP)
    cfg.compile = True
    cfg.policy.recurrent_backend = "fused" if rnn_type else "auto"
    learner = PPO(cfg, INTERFACE, "cpu")
    batch = _batch(rnn_type)
    reference = _reference_update(learner, batch)
    initial = [p.detach().clone() for p in _learner_parameters(learner)]

    stats = _update(learner, batch)

    _assert_update_equals(learner, initial, stats, reference)


def test_the_compiled_updates_inputs_come_in_the_same_order_in_every_process():
    """The order of the minibatch's entries is the order of the compiled graph's inputs, part of the key of
    inductor's cache of the compiled update: an order that changes from process to process (a set of keys, string
    hashing) makes every new process compile the update again."""
    import os
    import subprocess
    import sys

    code = (
        "from test_learner import INTERFACE, ONE_STEP, _cfg\n"
        "from isaaclab_torchrl.runners import PPO\n"
        "print(PPO(_cfg('lstm', **ONE_STEP), INTERFACE, 'cpu').loss_keys)\n"
    )
    tests = os.path.dirname(os.path.abspath(__file__))
    orders = set()
    for seed in range(4):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, env.get("PYTHONPATH")]))
        process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert process.returncode == 0, process.stderr[-2000:]
        orders.add(process.stdout.strip().splitlines()[-1])
    assert len(orders) == 1, orders

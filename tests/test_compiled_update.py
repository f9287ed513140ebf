"""The compiled update traces PPO's losses, the recurrent pass included, as one graph: the only graph breaks of
``torch.compile`` in :meth:`~isaaclab_torchrl.runners.PPO.loss_and_gradients` is the optimizer's ``zero_grad``
between the losses and their ``backward``. A break inside the losses would run them eagerly, kernel by kernel, inside the CUDA graph (a custom
backward pass is then not compiled at all)."""

import pytest
import torch
from test_learner import INTERFACE, ONE_STEP, _batch, _cfg
from test_symmetry import _learner as symmetric_learner

from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.ppo import COMPILE_SETTINGS

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

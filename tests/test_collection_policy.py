"""The collection policy returns a new tensordict: the property that makes torchrl's graphed inference
(``agent.collector.cudagraph_policy``) replay a recurrent policy into a fresh clone instead of merging the graph's
locked output into the collector's carrier (which fails with ``Cannot modify locked TensorDict``). The replay
itself needs a GPU (``benchmarks/storage_proof.py`` runs it there); this checks the CPU side of that path."""

import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import set_recurrent_mode

from isaaclab_torchrl.agents import TorchRLPolicyCfg
from isaaclab_torchrl.models import EnvInterface, make_collection_policy, make_models

pytestmark = pytest.mark.fast

INTERFACE = EnvInterface(("policy",), 4, ("policy",), 4, 2)


@pytest.mark.parametrize("rnn_type", [None, "lstm", "gru"])
def test_the_collection_policy_writes_into_a_copy_of_its_input(rnn_type):
    cfg = TorchRLPolicyCfg(rnn_type=rnn_type, rnn_hidden_size=8, actor_hidden_dims=[16], critic_hidden_dims=[16])
    actor, critic = make_models(cfg, INTERFACE, "cpu")
    policy = make_collection_policy(actor, critic, cfg)
    carrier = TensorDict({"policy": torch.randn(5, 4), "is_init": torch.ones(5, 1, dtype=torch.bool)}, [5])
    before = carrier.clone()
    with torch.no_grad(), set_recurrent_mode(False):
        out = policy(carrier)
    assert out is not carrier
    assert set(carrier.keys(True, True)) == set(before.keys(True, True))  # nothing written into the input
    assert (carrier == before).all()
    assert {"action", "action_log_prob", "loc", "scale", "policy", "is_init"} <= set(out.keys())
    if rnn_type is not None:
        assert ("next", "actor_rnn_h") in out.keys(True, True) and ("next", "critic_rnn_h") in out.keys(True, True)
    # a locked output (what a replayed graph returns) merges into the carrier as torchrl's collector merges it,
    # and the carrier stays writable for the next step
    out.lock_()
    keys = [key for key in out.keys(True, True) if key not in before.keys(True, True)]
    carrier.update(out.select(*keys).clone(), keys_to_update=keys)
    carrier.set("action", torch.zeros(5, 2))
    if rnn_type is not None:
        carrier.set(("next", "actor_rnn_h"), torch.zeros_like(carrier["next", "actor_rnn_h"]))
    # the workers' copy holds the learner's networks themselves: the weight sync sends these parameters
    assert {id(p) for p in policy.parameters()} >= {id(p) for p in actor.parameters()}

"""The compiled update traces PPO's losses, the recurrent pass included, as one graph without a break
(:meth:`~isaaclab_torchrl.runners.PPO.losses`: a break inside the losses would run them eagerly, kernel by kernel,
inside the CUDA graph, a custom backward pass would not be compiled at all, and any break makes dynamo trace the
losses twice in every new process), and updates as the plain PyTorch PPO does."""

import pytest
import torch
from test_symmetry import _learner as symmetric_learner

from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.compilation import COMPILE_SETTINGS
from ppo_reference import (
    INTERFACE,
    ONE_STEP,
    _assert_update_equals,
    _batch,
    _cfg,
    _learner_parameters,
    _reference_update,
    _update,
)

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
        explanation = torch._dynamo.explain(learner.losses)(minibatch)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


def test_the_compiled_losses_with_symmetry_are_one_graph():
    learner = symmetric_learner(use_data_augmentation=True, use_mirror_loss=True)
    minibatch = learner.mirror.augment(learner.gae(_batch(None)).select(*learner.loss_keys).reshape(-1))
    with torch._dynamo.config.patch(**COMPILE_SETTINGS):
        explanation = torch._dynamo.explain(learner.losses)(minibatch)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


def test_the_compiled_losses_read_the_minibatch_and_the_networks_only():
    """The loss's coefficients are constants of the graph, not inputs: as tensors they were buffers of the loss on the
    CPU (a CUDA graph replays no host-side branch on a GPU tensor), so the GPU's compiled update computed the clip
    bounds on the CPU, work that inductor compiles to C++ after checking the CPU's vector instructions."""
    cfg = _cfg(None, **ONE_STEP)
    cfg.compile = True
    cfg.algorithm.use_clipped_value_loss = True
    learner = PPO(cfg, INTERFACE, "cpu")
    minibatch = learner.gae(_batch(None)).select(*learner.loss_keys).reshape(-1)
    with torch._dynamo.config.patch(**COMPILE_SETTINGS):
        (graph,) = torch._dynamo.explain(learner.losses)(minibatch).graphs
    inputs = [node.target for node in graph.graph.nodes if node.op == "placeholder"]
    assert any("_minibatch_" in name for name in inputs)
    assert [name for name in inputs if "_self_loss_buffers_" in name] == []


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


def test_a_new_process_takes_the_compiled_recurrent_update_from_the_caches(tmp_path):
    """A second process loads the first one's trace of the update (:class:`SavedTrace`) and updates as the plain
    PyTorch PPO does; without the saved trace it finds the forward and backward graphs in AOTAutograd's cache instead
    of tracing the joint graph again; neither checks each of the CPU's vector instruction sets again. Two rules make
    the cache hit: the graphs contain the fused pass's custom ``autograd.Function``, which that cache leaves out by
    default; and the order of the minibatch's entries, the order of the graph's inputs and part of both keys, must not
    change with the process's string hashing (torchrl lists the loss's keys from a set: the processes hash
    differently)."""
    import os
    import platform
    import shutil
    import subprocess
    import sys

    code = (
        "import subprocess, sys\n"
        "import torch\n"
        "from torch._dynamo.utils import counters\n"
        "probes, check_call = [], subprocess.check_call\n"  # inductor's loads of its instruction-set test programs
        "def counted(args, **kwargs):\n"
        "    probes.append(args[:2] == [sys.executable, '-c'])\n"
        "    return check_call(args, **kwargs)\n"
        "subprocess.check_call = counted\n"
        "from ppo_reference import INTERFACE, ONE_STEP, _assert_update_equals, _batch, _cfg, _learner_parameters\n"
        "from ppo_reference import _reference_update, _update\n"
        "from isaaclab_torchrl.runners import PPO\n"
        "torch.manual_seed(0)\n"
        "cfg = _cfg('lstm', **ONE_STEP)\n"
        "cfg.compile, cfg.policy.recurrent_backend = True, 'fused'\n"
        "learner = PPO(cfg, INTERFACE, 'cpu')\n"
        "reference = _reference_update(learner, _batch('lstm'))\n"
        "initial = [p.detach().clone() for p in _learner_parameters(learner)]\n"
        "_assert_update_equals(learner, initial, _update(learner, _batch('lstm')), reference)\n"
        "print((learner._losses.origin, dict(counters['aot_autograd']), sum(probes)))\n"
    )
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, env.get("PYTHONPATH")]))
    runs = []
    for hash_seed, keep_trace in (("0", True), ("1", True), ("1", False)):
        if not keep_trace:
            shutil.rmtree(tmp_path / "isaaclab_torchrl_traces")
        env["PYTHONHASHSEED"] = hash_seed
        process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert process.returncode == 0, process.stderr[-2000:]
        runs.append(eval(process.stdout.strip().splitlines()[-1]))
    (first, saved, probed), (second, _, _), (third, cached, _) = runs
    assert (first, second, third) == ("traced", "loaded", "traced"), runs
    if platform.machine() in ("x86_64", "AMD64"):
        # the first process checks the CPU's vector instruction sets and keeps the result (an x86 test machine passes
        # them all), the later ones take them as checked; the AVX-512 sets' bf16 and VNNI checks run in each
        assert list((tmp_path / "isaaclab_torchrl_cpu").glob("vec_isa_ok-*")), "the check's result was not kept"
        assert all(probes < probed for *_, probes in runs[1:]), runs
    assert saved.get("autograd_cache_saved", 0) >= 1, runs
    assert cached.get("autograd_cache_hit", 0) >= 1 and not cached.get("autograd_cache_bypass"), runs


def test_a_saved_trace_is_used_only_for_its_config_sizes_and_sources():
    """The saved trace keeps the tensor guards only, so its file is named by what the other guards checked (a loss
    coefficient is a constant of the graph; the minibatch's sizes) and a loaded trace is used only if every function
    it traced still has its source."""
    import dataclasses

    from torch._dynamo.package import SourceInfo

    from isaaclab_torchrl.runners.compilation import sources_unchanged

    def learner_and_minibatch(entropy_coef):
        cfg = _cfg(None, **ONE_STEP)
        cfg.compile = True
        cfg.algorithm.entropy_coef = entropy_coef
        learner = PPO(cfg, INTERFACE, "cpu")
        return learner, learner.gae(_batch(None)).select(*learner.loss_keys).reshape(-1)

    learner, minibatch = learner_and_minibatch(0.01)
    path = learner._losses.path((minibatch,))
    assert learner_and_minibatch(0.01)[0]._losses.path((minibatch,)) == path
    assert learner_and_minibatch(0.02)[0]._losses.path((minibatch,)) != path
    assert learner._losses.path((minibatch[:-1],)) != path

    traced = SourceInfo(inlined_sources=set())
    traced.add_code(PPO.losses.__code__)
    assert sources_unchanged(traced)
    (source,) = traced.inlined_sources
    edited = SourceInfo(inlined_sources={dataclasses.replace(source, checksum="0" * 64)})
    assert not sources_unchanged(edited)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphed_gradient_step_leaves_each_calls_gradients():
    """The call that captures the graph leaves its own gradients in ``.grad`` too (tensordict's ``CudaGraphModule``
    leaves them in buffers that only a replay fills, which the optimizer step after it would read)."""
    from tensordict import TensorDict

    from isaaclab_torchrl.runners.compilation import GradientStepGraph

    torch.manual_seed(0)
    network = torch.nn.Linear(8, 1, device="cuda")

    def gradient_step(batch):
        network.zero_grad(set_to_none=True)
        loss = network(batch["x"]).square().mean()
        loss.backward()
        return TensorDict(loss=loss.detach())

    graphed = GradientStepGraph(gradient_step, in_keys=[], out_keys=[], device="cuda")
    for call in range(4):
        x = torch.randn(16, 8, device="cuda")
        graphed(TensorDict(x=x))
        expected = torch.autograd.grad(network(x).square().mean(), list(network.parameters()))
        for parameter, gradient in zip(network.parameters(), expected, strict=True):
            torch.testing.assert_close(parameter.grad, gradient, msg=f"call {call + 1}")


def test_the_graphed_modules_leave_the_callers_tensordict_its_tensors():
    """The workers' graphed policy and the graphed gradient step take a tensordict whose tensors others hold too (the
    collector's step data until the rollout's end, the minibatches the epochs go through again). tensordict's
    ``CudaGraphModule`` replaces them with clones in the caller's tensordict on its warm-up and capturing calls, and
    the graph's replays then overwrite the capturing call's clones with their own inputs. On the CPU the module
    runs every call as a warm-up."""
    from tensordict import TensorDict

    from isaaclab_torchrl.runners.compilation import CallerSafeCudaGraph, GradientStepGraph

    for graph_class in (CallerSafeCudaGraph, GradientStepGraph):
        graphed = graph_class(lambda data: TensorDict(y=data["x"] * 2), in_keys=[], out_keys=[], device="cpu")
        x = torch.randn(4, 3)
        data = TensorDict(x=x)
        out = graphed(data)
        assert data["x"] is x, graph_class.__name__
        torch.testing.assert_close(out["y"], 2 * x)

"""The automatic speed settings (``agent.speed``): what the defaults resolve to on a CUDA device and on the CPU, the
values a user sets are kept, and the start line says what was chosen. Config level only: CPU tests cannot time a
GPU (the GPU measurements are in ``docs/benchmarks.md``)."""

import pytest

from helpers import set_fields
from isaaclab_torchrl.agents.rsl_rl_port import ported_agent
from isaaclab_torchrl.agents.validation import resolve_speed_settings
from isaaclab_torchrl.training import speed_summary

pytestmark = pytest.mark.fast


def _resolved(recurrent=False, **fields):
    """The ANYmal agent with ``fields`` set (``collector__sync`` for ``collector.sync``), speed settings resolved."""
    cfg = ported_agent("Isaac-Velocity-Flat-AnymalD", recurrent)
    set_fields(cfg, {path.replace("__", "."): value for path, value in fields.items()})
    return resolve_speed_settings(cfg)


@pytest.mark.parametrize("recurrent", [False, True])
def test_defaults_are_the_fast_settings_on_a_gpu(recurrent):
    cfg = _resolved(recurrent, device="cuda:0")
    assert cfg.compile is True and cfg.cudagraphs is True
    assert cfg.collector.cudagraph_policy is True and cfg.collector.sync is False
    # a time loop with the episode starts as a mask, which the CUDA graph can replay (pad splits into new shapes),
    # with its backward pass written out (the fused backend)
    assert cfg.policy.recurrent_backend == "fused"
    line = speed_summary(cfg)
    assert line.startswith("update: compiled + CUDA graph")
    assert line.split(";")[0].endswith(", TF32 products")  # as rsl_rl's learner computes under Isaac Lab
    assert "inference: CUDA graph; collection: async, 1 worker; batches stored on cuda:0" in line
    assert ("(lstm, recurrent backend fused)" in line) == recurrent


def test_defaults_on_the_cpu_are_the_plain_settings_with_asynchronous_collection():
    cfg = _resolved(True, device="cpu")
    assert cfg.compile is False and cfg.cudagraphs is False
    # asynchronous collection was faster on a 2-core CPU too (docs/benchmarks.md)
    assert cfg.collector.cudagraph_policy is False and cfg.collector.sync is False
    assert cfg.policy.recurrent_backend == "pad"
    assert speed_summary(cfg) == (
        "update: eager (lstm, recurrent backend pad); inference: eager; collection: async, 1 worker; "
        "batches stored on cpu"
    )


def test_a_cpu_learner_next_to_a_gpu_simulation_gets_an_eager_update():
    cfg = _resolved(device="cuda:0", train_device="cpu")
    assert cfg.compile is False and cfg.cudagraphs is False
    assert "TF32" not in speed_summary(cfg)
    assert cfg.collector.cudagraph_policy is True and cfg.collector.sync is False


def test_speed_off_and_the_users_own_values_are_kept():
    cfg = _resolved(device="cuda:0", speed="off")
    assert (cfg.compile, cfg.cudagraphs, cfg.collector.cudagraph_policy, cfg.collector.sync) == (
        False,
        False,
        False,
        True,
    )
    # one field set by the user; the others follow the automatic rule
    cfg = _resolved(device="cuda:0", cudagraphs=False, collector__sync=True)
    assert cfg.cudagraphs is False and cfg.compile is False  # compile alone is not worth its compilation time
    assert cfg.collector.sync is True and cfg.collector.cudagraph_policy is True
    cfg = _resolved(True, device="cuda:0", compile=False)
    assert cfg.cudagraphs is False and cfg.policy.recurrent_backend == "pad"
    cfg = _resolved(True, device="cuda:0", speed="off", policy__recurrent_backend="fused")
    assert cfg.cudagraphs is False and cfg.policy.recurrent_backend == "fused"
    # resolving twice changes nothing
    again = resolve_speed_settings(cfg.copy())
    assert again.to_dict() == cfg.to_dict()

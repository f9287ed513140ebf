"""Which checkpoint ``--checkpoint`` / ``--resume`` pick: ``best`` picks ``model_best.pt`` (else the last checkpoint,
as Isaac Lab's selector falls back), and nothing else ever picks it."""

from __future__ import annotations

import os

import pytest

from isaaclab_torchrl.cli import UsageError, checkpoint_path
from isaaclab_torchrl.runners.checkpoint import BEST_CHECKPOINT, resolve_checkpoint

pytestmark = pytest.mark.fast


def make_runs(root, runs: dict[str, list[str]]) -> str:
    """Run folders under ``root`` holding (empty) files of the given names; returns ``root``."""
    for run, names in runs.items():
        os.makedirs(os.path.join(root, run))
        for name in names:
            open(os.path.join(root, run, name), "w").close()
    return str(root)


@pytest.mark.parametrize("checkpoint", ["latest", "model_.*.pt", r"model_.*\.pt", ".*"])
def test_latest_and_patterns_never_pick_the_best(tmp_path, checkpoint):
    root = make_runs(tmp_path, {"2026-01-01_00-00-00": ["model_2.pt", "model_10.pt", BEST_CHECKPOINT]})
    assert os.path.basename(resolve_checkpoint(root, checkpoint)) == "model_10.pt"


def test_a_run_folder_is_its_last_model_not_its_best(tmp_path):
    root = make_runs(tmp_path, {"run": ["model_3.pt", BEST_CHECKPOINT]})
    assert os.path.basename(resolve_checkpoint(root, os.path.join(root, "run"))) == "model_3.pt"


def test_best_picks_the_best_of_the_newest_run(tmp_path):
    root = make_runs(
        tmp_path,
        {
            "2026-01-01_00-00-00": ["model_5.pt", BEST_CHECKPOINT],
            "2026-01-02_00-00-00": ["model_7.pt", BEST_CHECKPOINT],
        },
    )
    assert resolve_checkpoint(root, "best") == os.path.join(root, "2026-01-02_00-00-00", BEST_CHECKPOINT)
    assert resolve_checkpoint(root, "best", load_run="2026-01-01.*") == os.path.join(
        root, "2026-01-01_00-00-00", BEST_CHECKPOINT
    )
    # its name as a pattern, or its path, picks it as well
    assert os.path.basename(resolve_checkpoint(root, BEST_CHECKPOINT)) == BEST_CHECKPOINT


def test_best_falls_back_to_the_last_checkpoint_of_a_run_without_evaluation(tmp_path):
    root = make_runs(
        tmp_path, {"2026-01-01_00-00-00": ["model_5.pt", BEST_CHECKPOINT], "2026-01-02_00-00-00": ["model_7.pt"]}
    )
    assert resolve_checkpoint(root, "best") == os.path.join(root, "2026-01-02_00-00-00", "model_7.pt")


def test_a_run_with_only_a_best_checkpoint(tmp_path):
    """A run that was stopped before its first save_interval: ``latest`` goes on to the run before, ``best`` takes
    it."""
    root = make_runs(tmp_path, {"2026-01-01_00-00-00": ["model_5.pt"], "2026-01-02_00-00-00": [BEST_CHECKPOINT]})
    assert resolve_checkpoint(root, "latest") == os.path.join(root, "2026-01-01_00-00-00", "model_5.pt")
    assert resolve_checkpoint(root, "best") == os.path.join(root, "2026-01-02_00-00-00", BEST_CHECKPOINT)


def test_pretrained_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="--checkpoint pretrained is not supported"):
        checkpoint_path(str(tmp_path), "pretrained", ".*")


def test_run_patterns_match_the_start_of_a_name_as_isaac_labs(tmp_path):
    """Isaac Lab's ``get_checkpoint_path`` matches ``--load_run`` and file patterns with ``re.match``."""
    root = make_runs(tmp_path, {"2026-01-01_00-00-00_try1": ["model_5.pt"], "2026-01-02_00-00-00": ["model_7.pt"]})
    expected = os.path.join(root, "2026-01-01_00-00-00_try1", "model_5.pt")
    assert resolve_checkpoint(root, "latest", load_run="2026-01-01_00-00-00") == expected
    assert resolve_checkpoint(root, "model_5", load_run="2026-01-01") == expected


@pytest.mark.parametrize(("checkpoint", "load_run"), [(None, "["), ("model_[0-9.pt", ".*")])
def test_a_pattern_that_is_not_a_regular_expression_is_refused_in_one_line(tmp_path, checkpoint, load_run):
    root = make_runs(tmp_path, {"run": ["model_1.pt"]})
    with pytest.raises(UsageError, match=r"is not a regular expression"):
        checkpoint_path(root, checkpoint, load_run)

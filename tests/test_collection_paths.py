"""The worker's collection path (Isaac Lab's reset inside its step, taken over by torchrl's native auto-reset, no
trajectory ids) collects the same batches as the plain path (Isaac Lab's torchrl wrapper and torchrl's reset call
after each step with a finished episode), from the same seeds, for an MLP and a recurrent policy, on the CPU; and so
does it with the policy graphed as ``agent.collector.cudagraph_policy`` graphs it (eager on the CPU), without
importing inductor's CUDA graph trees. A batch holds the recurrent state each rollout starts from, which is the state
of the rollout's first step when every step's is stored."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from helpers import REPO, script_env
from isaaclab_torchrl.recurrent import ROLLOUT_START_KEY, first_states

COLLECT = os.path.join(REPO, "tests", "collect_rollouts.py")


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("rollouts")
    paths = {}
    kinds = {
        "ours": [],
        "plain": ["--plain"],
        "graphed": ["--graphed"],
        "every": ["--every-state"],
        "ours_finite_clipped": ["--finite-clipped"],
        "plain_finite_clipped": ["--plain", "--finite-clipped"],
    }
    processes = {}
    for path, flags in kinds.items():  # side by side (the suite's time: docs/benchmarks.md, "The test suite")
        paths[path] = str(folder / f"{path}.pt")
        with open(folder / f"{path}.log", "w") as log:
            command = [sys.executable, COLLECT, paths[path], *flags]
            processes[path] = subprocess.Popen(command, cwd=folder, env=script_env(), stdout=log, stderr=log)
    try:
        for path, process in processes.items():
            assert process.wait(timeout=900) == 0, (folder / f"{path}.log").read_text()[-6000:]
    finally:
        for process in processes.values():
            process.kill()
    return {path: torch.load(file, weights_only=False) for path, file in paths.items()}


def _leaves(batch: dict) -> dict:
    td = TensorDict(batch)
    return {key: td.get(key) for key in td.keys(include_nested=True, leaves_only=True)}


@pytest.mark.parametrize("agent", ["torchrl", "torchrl_lstm"])
def test_the_collection_path_collects_the_plain_paths_batches(rollouts, agent):
    ours, plain = rollouts["ours"][agent]["batches"], rollouts["plain"][agent]["batches"]
    assert len(ours) == len(plain) == 4
    ended = {"terminated": 0, "truncated": 0}
    for index, (our_batch, plain_batch) in enumerate(zip(ours, plain, strict=True)):
        our_leaves, plain_leaves = _leaves(our_batch), _leaves(plain_batch)
        assert plain_leaves.pop(("collector", "traj_ids")) is not None
        assert our_leaves.keys() == plain_leaves.keys()
        for key, value in our_leaves.items():
            torch.testing.assert_close(value, plain_leaves[key], rtol=0, atol=0, equal_nan=True, msg=f"{index} {key}")
        for kind in ended:
            ended[kind] += int(our_leaves["next", kind].sum())
        # a new episode starts where the last one ended
        assert torch.equal(our_leaves["is_init"][:, 1:], our_leaves["next", "done"][:, :-1])
    # the rollouts hold both kinds of episode ends
    assert ended["terminated"] > 0 and ended["truncated"] > 0, ended
    assert ((ROLLOUT_START_KEY, "actor_rnn_h") in our_leaves) == (agent == "torchrl_lstm")


def test_clipped_actions_and_a_terminal_time_limit_as_isaac_labs_wrapper_steps_them(rollouts):
    """The worker's env steps as Isaac Lab's own torchrl wrapper does, with its action clipping and its finite-horizon
    rule (a time-out is a termination): the plain path, with that wrapper's step, collects the same batches."""
    ours, plain = rollouts["ours_finite_clipped"]["torchrl"], rollouts["plain_finite_clipped"]["torchrl"]
    terminated = 0
    for our_batch, plain_batch in zip(ours["batches"], plain["batches"], strict=True):
        our_leaves, plain_leaves = _leaves(our_batch), _leaves(plain_batch)
        plain_leaves.pop(("collector", "traj_ids"))
        for key, value in our_leaves.items():
            torch.testing.assert_close(value, plain_leaves[key], rtol=0, atol=0, equal_nan=True, msg=str(key))
        assert not our_leaves["next", "truncated"].any()
        assert (our_leaves["action"].abs() > 0.3).any()  # the clipping acts
        terminated += int(our_leaves["next", "terminated"].sum())
    unclipped = _leaves(rollouts["ours"]["torchrl"]["batches"][0])
    assert not torch.equal(unclipped["next", "reward"], _leaves(ours["batches"][0])["next", "reward"])
    assert terminated > 0


@pytest.mark.parametrize("agent", ["torchrl", "torchrl_lstm"])
def test_the_workers_step_writes_the_masks_only(rollouts, agent):
    """The worker's env steps with :class:`~isaaclab_torchrl.autoreset.AutoResetEnv`'s own step, not torchrl's (which
    marks the next observations of ended episodes with NaN), and starts each episode where the last one's done is."""
    stepped = rollouts["ours"][agent]["step_by_step"]
    assert stepped["ended"] > 0, stepped
    assert not stepped["marked"] and stepped["starts_follow_done"], stepped


def test_a_batch_holds_the_recurrent_state_its_rollout_starts_from(rollouts):
    ours, every = rollouts["ours"]["torchrl_lstm"]["batches"], rollouts["every"]["torchrl_lstm"]["batches"]
    keys = ["actor_rnn_h", "actor_rnn_c", "critic_rnn_h", "critic_rnn_c"]
    for index, (our_batch, every_batch) in enumerate(zip(ours, every, strict=True)):
        our_leaves, every_leaves = _leaves(our_batch), _leaves(every_batch)
        states = {key: every_leaves.pop(key) for key in keys}
        folded = {key: our_leaves.pop((ROLLOUT_START_KEY, key)) for key in keys}
        assert our_leaves.keys() == every_leaves.keys()
        for key, value in our_leaves.items():
            torch.testing.assert_close(value, every_leaves[key], rtol=0, atol=0, equal_nan=True, msg=f"{index} {key}")
        # 4 states of 1 x 32 in 16 steps: 2 values per step
        assert all(value.shape == (16, 16, 2) for value in folded.values())
        batch = TensorDict({ROLLOUT_START_KEY: folded}, [16, 16])
        first = first_states(batch, dict.fromkeys(keys, torch.Size([1, 32])))
        for key in keys:
            assert torch.equal(first[key], states[key][:, :1].expand_as(states[key])), f"{index} {key}"
            assert states[key].abs().sum() > 0
        # a new episode's stored state is zero
        is_init = every_leaves["is_init"].squeeze(-1)
        assert is_init[:, 1:].any() and not any(states[key][is_init].any() for key in keys)


@pytest.mark.parametrize("kind", ["ours", "ours_finite_clipped"])
@pytest.mark.parametrize("agent", ["torchrl", "torchrl_lstm"])
def test_the_learner_recomputes_the_acting_policys_log_probabilities(rollouts, agent, kind):
    """From the collecting policy's weights, the learner's actor over whole slices (recurrent mode, from the states
    the batch holds, reset where episodes start) gives back the log-probabilities and action means the worker's
    policy acted with: the update sees what the acting policy saw, and with no lag every importance weight is one."""
    relogged = rollouts[kind][agent]["relogged"]
    assert len(relogged) == len(rollouts[kind][agent]["batches"])
    for index, pair in enumerate(relogged):
        torch.testing.assert_close(pair["recomputed"], pair["collected"], atol=1e-4, rtol=1e-5, msg=f"batch {index}")
        torch.testing.assert_close(pair["recomputed_loc"], pair["collected_loc"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("agent", ["torchrl", "torchrl_lstm"])
def test_the_graphed_policy_collects_the_same_batches_without_inductors_graph_trees(rollouts, agent):
    graphed, ours = rollouts["graphed"][agent], rollouts["ours"][agent]
    assert graphed["runs"] == "CallerSafeCudaGraph" and ours["runs"] != "CallerSafeCudaGraph"
    assert not graphed["inductor_graph_trees"]
    for our_batch, graphed_batch in zip(ours["batches"], graphed["batches"], strict=True):
        our_leaves, graphed_leaves = _leaves(our_batch), _leaves(graphed_batch)
        assert our_leaves.keys() == graphed_leaves.keys()
        for key, value in our_leaves.items():
            torch.testing.assert_close(value, graphed_leaves[key], rtol=0, atol=0, equal_nan=True, msg=str(key))


@pytest.mark.fast
def test_an_episode_term_is_averaged_over_the_steps_where_episodes_ended():
    # a term's value is repeated for every environment at each step, fresh only where an episode ended
    from isaaclab_torchrl.runners.logger import Logger

    done = torch.tensor([[False, True, False], [False, False, True]]).unsqueeze(-1)
    values = torch.tensor([5.0, 7.0, 9.0]).expand(2, 3).unsqueeze(-1)
    batch = TensorDict(
        {
            "episode_reward": torch.zeros(2, 3, 1),
            "step_count": torch.zeros(2, 3, 1, dtype=torch.int64),
            "next": {
                "done": done,
                "reward": torch.ones(2, 3, 1),
                "episode_log": {"Episode_Reward/alive": values, "untracked": torch.full((2, 3, 1), torch.nan)},
            },
        },
        batch_size=(2, 3),
    )
    assert Logger(None).add_batch(batch) == {"Episode_Reward/alive": 8.0}

"""Student-teacher distillation (rsl_rl's ``DistillationRunner``): the update equals rsl_rl's own ``Distillation``
on the same steps and weights (losses summed over ``gradient_length`` steps, epochs in a row, clipping, optimizers,
a recurrent student through a whole update); the teacher acts beside the student in real collector workers while the
weight sync moves the student only; a teacher checkpoint that does not fit is refused; and on Cartpole a student
reaches the return of the teacher kept in ``tests/data/cartpole_teacher`` within 20 iterations, plays and exports,
and a recurrent student's run continues from its checkpoint."""

import functools
import os
import re

import numpy as np
import onnxruntime
import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import MultiSyncCollector
from torchrl.envs import GymEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import set_recurrent_mode
from torchrl.weight_update import MultiProcessWeightSyncScheme

from helpers import CPU_ARGS, REPO, assert_ok, run_dirs, run_script, scalars, tasks_env
from isaaclab_torchrl.agents import TorchRLActorCfg, TorchRLDistillationCfg, TorchRLDistillationRunnerCfg
from isaaclab_torchrl.agents.validation import ConfigError, check_teacher_checkpoint
from isaaclab_torchrl.models import EnvInterface, make_actor
from isaaclab_torchrl.runners import Distillation, load_checkpoint

N, T, OBS, ACT = 5, 6, 3, 2
DONES = {(1, 2), (3, 4)}  # (env, step): the episode ends with that step
TEACHER = os.path.join(REPO, "tests", "data", "cartpole_teacher", "model_100.pt")
TEACHER_RETURN = 4.948
"""The teacher's mean return when played as the test plays the student (tests/data/cartpole_teacher/README.md)."""
TASK = ["--task", "distillation_agent:Isaac-Cartpole-Distillation-Test"]


def _interface(obs_key: str = "policy", obs_dim: int = OBS, teacher_dim: int = OBS) -> EnvInterface:
    return EnvInterface((obs_key,), obs_dim, (), 0, ACT, teacher_obs_keys=(obs_key,), teacher_obs_dim=teacher_dim)


def _cfg(rnn_type=None, epochs=1, gradient_length=T, loss_type="mse", optimizer="adam", max_grad_norm=None):
    return TorchRLDistillationRunnerCfg(
        device="cpu",
        num_steps_per_env=T,
        max_iterations=1,
        experiment_name="test",
        policy=TorchRLActorCfg(rnn_type=rnn_type, rnn_hidden_size=4, actor_hidden_dims=[8]),
        teacher=TorchRLActorCfg(actor_hidden_dims=[8]),
        algorithm=TorchRLDistillationCfg(
            num_learning_epochs=epochs,
            learning_rate=1e-2,
            gradient_length=gradient_length,
            loss_type=loss_type,
            optimizer=optimizer,
            max_grad_norm=max_grad_norm,
        ),
    )


def _rsl_rl_twin(learner: Distillation, cfg: TorchRLDistillationRunnerCfg, obs: torch.Tensor, teacher: torch.Tensor):
    """rsl_rl's Distillation with the learner's student weights, its storage filled with the same steps."""
    from rsl_rl.algorithms import Distillation as RslRlDistillation
    from rsl_rl.models import MLPModel, RNNModel
    from rsl_rl.storage import RolloutStorage

    first = TensorDict(policy=obs[0], batch_size=[N])
    groups = {"student": ["policy"], "teacher": ["policy"]}
    gaussian = {"class_name": "GaussianDistribution", "init_std": 1.0}
    rnn = {"rnn_type": cfg.policy.rnn_type, "rnn_hidden_dim": 4} if cfg.policy.rnn_type else {}
    student = (RNNModel if rnn else MLPModel)(first, groups, "student", ACT, [8], distribution_cfg=gaussian, **rnn)
    ours = [m for m in learner.actor.modules() if isinstance(m, torch.nn.Linear)]
    theirs = [m for m in student.mlp.modules() if isinstance(m, torch.nn.Linear)]
    for mine, their in zip(ours, theirs, strict=True):
        their.load_state_dict(mine.state_dict())
    if rnn:
        student.rnn.rnn.load_state_dict(learner.actor.parts.rnn.state_dict())
    storage = RolloutStorage("distillation", N, T, first, [ACT], "cpu")
    algo = cfg.algorithm
    twin = RslRlDistillation(
        student,
        MLPModel(first, groups, "teacher", ACT, [8]),
        storage,
        num_learning_epochs=algo.num_learning_epochs,
        gradient_length=algo.gradient_length,
        learning_rate=algo.learning_rate,
        max_grad_norm=algo.max_grad_norm,
        loss_type=algo.loss_type,
        optimizer=algo.optimizer,
    )
    for t in range(T):
        transition = RolloutStorage.Transition()
        transition.observations = TensorDict(policy=obs[t], batch_size=[N])
        transition.actions = torch.zeros(N, ACT)
        transition.privileged_actions = teacher[t]
        transition.rewards = torch.zeros(N)
        transition.dones = torch.tensor([float((env, t) in DONES) for env in range(N)])
        storage.add_transition(transition)
    return twin


def _batch(rnn_type, obs: torch.Tensor, teacher: torch.Tensor) -> TensorDict:
    """The synchronous collector's layout ``[worker, env, time]`` (one worker): episode starts (``is_init``) after
    the done steps, and the recurrent state each step started from (zero: the state of a fresh episode, as rsl_rl's
    first update starts)."""
    is_init = torch.zeros(N, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    for env, step in DONES:
        is_init[env, step + 1] = True
    batch = TensorDict(
        policy=obs.transpose(0, 1), teacher_loc=teacher.transpose(0, 1), is_init=is_init, batch_size=[N, T]
    )
    if rnn_type is not None:
        batch["actor_rnn_h"] = torch.zeros(N, T, 1, 4)
    return batch.unsqueeze(0)


CASES = {
    # (recurrent layer, epochs, gradient length, loss, optimizer, max_grad_norm)
    "one step per update": (None, 1, T, "mse", "adam", None),
    # groups of 4 steps over 2 epochs of 6: [0-3], [4, 5, 0, 1], [2-5]; clipped gradients; SGD
    "groups across epochs": (None, 2, 4, "huber", "sgd", 0.05),
    # 2 groups of 5 steps over 2 epochs x 6, the last 2 steps left over (not learned from), AdamW
    "a step left over": (None, 2, 5, "mse", "adamw", None),
    # rsl_rl carries its own detached state from group to group, this learner starts each group from the stored
    # state: they agree over a whole update in one group (with episode starts inside it)
    "recurrent student": ("gru", 1, T, "mse", "rmsprop", 1.0),
}


@pytest.mark.fast
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_update_equals_rsl_rls_distillation(case):
    rnn_type, epochs, gradient_length, loss_type, optimizer, max_grad_norm = CASES[case]
    torch.manual_seed(0)
    cfg = _cfg(rnn_type, epochs, gradient_length, loss_type, optimizer, max_grad_norm)
    if case == "a step left over":
        pytest.warns(UserWarning, Distillation, cfg, _interface(), "cpu")
    learner = Distillation(cfg, _interface(), "cpu")
    obs, teacher = torch.randn(T, N, OBS), 2.0 * torch.randn(T, N, ACT)
    twin = _rsl_rl_twin(learner, cfg, obs, teacher)

    batch = _batch(rnn_type, obs, teacher)
    stats = learner.update(batch.clone())
    expected = twin.update()

    # the updated students act alike over the whole rollout (a recurrent one with its state reset after done steps)
    with torch.no_grad(), set_recurrent_mode(True):
        ours = learner.actor.deterministic(batch[0].clone())["loc"]
    twin.student.reset()
    theirs = []
    with torch.no_grad():
        for t in range(T):
            theirs.append(twin.student(TensorDict(policy=obs[t], batch_size=[N])))
            twin.student.reset(torch.tensor([float((env, t) in DONES) for env in range(N)]))
    torch.testing.assert_close(ours, torch.stack(theirs, 1), rtol=1e-5, atol=1e-6)
    if epochs * T % gradient_length == 0:  # rsl_rl's mean includes the steps left over, which are not learned from
        assert stats["behavior"] == pytest.approx(expected["behavior"], rel=1e-5)
    assert stats["grad_norm"] > (max_grad_norm or 0.0), "the clipping acted"


@pytest.mark.parametrize("teacher_rnn", [None, "gru"])
def test_the_teacher_acts_beside_the_student_in_the_workers_and_the_sync_moves_the_student_only(teacher_rnn):
    torch.manual_seed(0)
    interface = EnvInterface(("observation",), 3, (), 0, 1, teacher_obs_keys=("observation",), teacher_obs_dim=3)
    cfg = _cfg()
    cfg.teacher = TorchRLActorCfg(rnn_type=teacher_rnn, rnn_hidden_size=4, actor_hidden_dims=[8])
    learner = Distillation(cfg, interface, "cpu")
    teacher = make_actor(cfg.teacher, interface, "cpu", role="teacher")
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # not the student's initial weights
    assert learner.load_state_dict({"actor": teacher.state_dict()}) is False, "a PPO checkpoint gives the teacher only"
    sent = TensorDict.from_module(learner.collection_policy).keys(True, True)
    assert len(list(sent)) == len(list(learner.actor.parameters()))
    collector = MultiSyncCollector(
        create_env_fn=[functools.partial(GymEnv, "Pendulum-v1")],
        policy=learner.collection_policy,
        policy_factory=learner.policy_factory,
        weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        frames_per_batch=32,
        total_frames=-1,
        device="cpu",
        cat_results="stack",
        auto_register_policy_transforms=True,  # the recurrent teacher's state and is_init, as the runner's workers
    )
    try:
        collector.update_policy_weights_()
        batches = iter(collector)
        for _ in range(2):
            batch = next(batches)
            with torch.no_grad():
                student = learner.actor.deterministic(batch.select("observation").clone())["loc"]
                # a recurrent teacher carried its state from step to step: over the rollout, from the state stored
                # at its first step, it acts as in the worker
                with set_recurrent_mode(teacher_rnn is not None):
                    expected = teacher.deterministic(batch.exclude("teacher_loc").clone())["teacher_loc"]
            torch.testing.assert_close(batch["loc"], student)
            torch.testing.assert_close(batch["teacher_loc"], expected)
            assert not torch.allclose(batch["loc"], batch["teacher_loc"], atol=1e-2)
            with torch.no_grad():  # the learner's student changes; the sync must bring it, the teacher stays
                for parameter in learner.actor.parameters():
                    parameter.add_(0.3)
            collector.update_policy_weights_()
    finally:
        collector.shutdown()


@pytest.mark.fast
def test_a_teacher_that_does_not_fit_is_refused():
    learner = Distillation(_cfg(), _interface(teacher_dim=OBS), "cpu")
    teacher = make_actor(learner.cfg.teacher, _interface(teacher_dim=OBS + 1), "cpu", role="teacher")
    stored = {"actor_obs_keys": ["policy"], "actor_obs_dim": OBS + 1, "action_dim": ACT}
    with pytest.raises(ValueError, match=r"its teacher reads policy \(4\) and acts with 2 actions; here the teacher"):
        learner.load_state_dict({"actor": teacher.state_dict(), "interface": stored})
    with pytest.raises(ValueError, match="size mismatch"):  # a checkpoint that does not store its sizes
        learner.load_state_dict({"actor": teacher.state_dict()})
    checkpoint = load_checkpoint(TEACHER)
    cfg = _cfg()
    with pytest.raises(ConfigError, match=r"has actor_hidden_dims=\[32, 32\], which agent.teacher does not"):
        check_teacher_checkpoint(cfg, checkpoint, TEACHER)
    cfg.teacher.actor_hidden_dims = [32, 32]
    check_teacher_checkpoint(cfg, checkpoint, TEACHER)


@pytest.mark.fast
@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_an_rsl_rl_checkpoints_actor_teaches_as_rsl_rl_runs_it(tmp_path, rnn_type):
    from rsl_rl.models import MLPModel, RNNModel

    torch.manual_seed(0)
    first = TensorDict(policy=torch.randn(N, OBS), batch_size=[N])
    gaussian = {"class_name": "GaussianDistribution", "init_std": 1.0}
    rnn = {"rnn_type": rnn_type, "rnn_hidden_dim": 4} if rnn_type else {}
    model = (RNNModel if rnn else MLPModel)(
        first, {"actor": ["policy"]}, "actor", ACT, [8, 8], obs_normalization=True, distribution_cfg=gaussian, **rnn
    )
    model.update_normalization(TensorDict(policy=3.0 + 2.0 * torch.randn(100, OBS), batch_size=[100]))
    path = str(tmp_path / "model_10.pt")  # as rsl_rl's OnPolicyRunner.save writes it
    torch.save({"actor_state_dict": model.state_dict(), "critic_state_dict": {}, "iter": 10, "infos": None}, path)
    cfg = _cfg()
    cfg.teacher = TorchRLActorCfg(rnn_type=rnn_type, rnn_hidden_size=4, actor_hidden_dims=[8, 8])
    cfg.teacher.actor_obs_normalization = True
    learner = Distillation(cfg, _interface(), "cpu")
    assert learner.load_state_dict(load_checkpoint(path, rsl_rl_teacher=True)) is False, "a new run"
    teacher = make_actor(cfg.teacher, _interface(), "cpu", role="teacher")
    teacher.load_state_dict(learner.teacher.state)

    obs = 3.0 + 2.0 * torch.randn(T, N, OBS)
    model.eval()
    with torch.no_grad():
        theirs = torch.stack([model(TensorDict(policy=obs[t], batch_size=[N])) for t in range(T)], 1)
        steps = TensorDict(
            policy=obs.transpose(0, 1), is_init=torch.zeros(N, T, 1, dtype=torch.bool), batch_size=[N, T]
        )
        steps["is_init"][:, 0] = True
        for key in ("teacher_rnn_h", "teacher_rnn_c") if rnn_type else ():
            steps[key] = torch.zeros(N, T, 1, 4)
        with set_recurrent_mode(rnn_type is not None):
            ours = teacher.deterministic(steps)["teacher_loc"]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)

    cfg.teacher.actor_hidden_dims = [8, 16]
    with pytest.raises(ValueError, match=r"mlp.2.weight has the shape \[8, 8\], agent.teacher's \[16, 8\]"):
        Distillation(cfg, _interface(), "cpu").load_state_dict(load_checkpoint(path, rsl_rl_teacher=True))
    with pytest.raises(ValueError, match="is not a checkpoint of the isaaclab_torchrl runner"):
        load_checkpoint(path)  # anything but a distillation run's teacher


def _play(workdir, agent: str, checkpoint: str) -> float:
    process = run_script(
        "play.py",
        [*TASK, "--agent", agent, "--num_envs", "16", "--num_episodes", "16", "--checkpoint", checkpoint, *CPU_ARGS],
        cwd=workdir,
        extra_env=tasks_env(),
    )
    assert_ok(process)
    return float(re.search(r"mean return (-?[\d.]+)", process.stdout).group(1))


def _train(workdir, agent: str, checkpoint: str, iterations: int):
    args = [*TASK, "--agent", agent, "--num_envs", "32", "--max_iterations", str(iterations), "--seed", "1"]
    process = run_script("train.py", [*args, "--checkpoint", checkpoint, *CPU_ARGS], cwd=workdir, extra_env=tasks_env())
    assert_ok(process)
    return process


def test_a_student_reaches_the_teachers_return_then_plays_and_exports(workdir):
    process = _train(workdir, "torchrl_distillation", TEACHER, 20)
    assert f"Teacher: the actor of {TEACHER}" in process.stdout
    assert "environment: actor observes policy (4), teacher policy (4); 1 actions" in process.stdout
    (run_dir,) = run_dirs(workdir, "cartpole_distillation")
    checkpoint = os.path.join(run_dir, "model_20.pt")
    state = load_checkpoint(checkpoint)
    assert {"actor", "teacher", "optimizer"} <= set(state) and "critic" not in state
    teacher = load_checkpoint(TEACHER)["actor"]
    assert all(torch.equal(state["teacher"][key], value) for key, value in teacher.items())
    behavior = scalars(run_dir)["Loss/behavior"]
    assert behavior[-1][1] < 0.05 * behavior[0][1], behavior

    played = _play(workdir, "torchrl_distillation", checkpoint)
    assert played >= TEACHER_RETURN - 0.1, (played, TEACHER_RETURN)

    # the exported student acts as the checkpoint's student, deterministically
    from isaaclab_torchrl.policy import load_policy

    actor = load_policy(checkpoint).actor
    obs = torch.randn(8, 4)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        expected = actor(TensorDict(policy=obs, batch_size=[8]))["action"]
    exported = os.path.join(run_dir, "exported")
    torch.testing.assert_close(torch.jit.load(os.path.join(exported, "policy.pt"))(obs), expected, atol=1e-5, rtol=1e-5)
    session = onnxruntime.InferenceSession(os.path.join(exported, "policy.onnx"))
    for row in range(8):  # exported for one environment
        (action,) = session.run(None, {"obs": obs[row : row + 1].numpy()})
        np.testing.assert_allclose(action[0], expected[row].numpy(), atol=1e-5, rtol=1e-5)


def test_a_recurrent_students_run_continues_from_its_checkpoint(workdir):
    _train(workdir, "torchrl_distillation_lstm", TEACHER, 20)
    (run_dir,) = run_dirs(workdir, "cartpole_distillation_gru")
    behavior = scalars(run_dir)["Loss/behavior"]
    assert behavior[-1][1] < 0.05 * behavior[0][1], behavior
    checkpoint = os.path.join(run_dir, "model_20.pt")
    resumed = _train(workdir, "torchrl_distillation_lstm", checkpoint, 1)
    assert f"Resuming from {checkpoint} (iteration 20" in resumed.stdout
    assert run_dirs(workdir, "cartpole_distillation_gru") == [run_dir], "the run goes on in its own folder"
    state, before = load_checkpoint(os.path.join(run_dir, "model_21.pt")), load_checkpoint(checkpoint)
    assert state["iteration"] == 21
    assert all(torch.equal(state["teacher"][key], value) for key, value in before["teacher"].items())
    assert scalars(run_dir)["Loss/behavior"][-1][1] < 0.05 * behavior[0][1], "the student went on from its weights"

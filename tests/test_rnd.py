"""Random network distillation (rsl_rl's RND extension): the intrinsic rewards the learner adds to a batch equal
rsl_rl's own ``RandomNetworkDistillation`` stepping through the same states one env step at a time (weight times
the step duration, the weight schedule, the reward and state normalisations), and the predictor learns from every
minibatch with its own Adam."""

import copy
import os

import pytest
import torch
from tensordict import TensorDict

from isaaclab_torchrl.agents.torchrl_cfg import TorchRLRndCfg, TorchRLRndWeightScheduleCfg
from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.runners.rnd import RandomNetworkDistillation
from isaaclab_torchrl.runners.safety import NonFiniteError
from ppo_reference import INTERFACE, ONE_STEP, SEED, _batch, _cfg, _update

ENVS, STEPS, SIZE, STEP_DT = 5, 7, 3, 0.02
SCHEDULES = {
    "constant": None,
    "step": TorchRLRndWeightScheduleCfg(mode="step", final_step=9, final_value=0.3),
    "linear": TorchRLRndWeightScheduleCfg(mode="linear", initial_step=3, final_step=11, final_value=0.05),
}


def _rsl_rl_twin(ours: RandomNetworkDistillation, cfg: TorchRLRndCfg):
    """rsl_rl's RND with the same weights."""
    from rsl_rl.extensions import RandomNetworkDistillation as RslRlRnd

    schedule = None if cfg.weight_schedule is None else cfg.weight_schedule.to_dict()
    theirs = RslRlRnd(
        num_states=SIZE,
        obs_groups={"rnd_state": ["policy"]},
        num_outputs=cfg.num_outputs,
        predictor_hidden_dims=cfg.predictor_hidden_dims,
        target_hidden_dims=cfg.target_hidden_dims,
        state_normalization=cfg.state_normalization,
        reward_normalization=cfg.reward_normalization,
        weight=cfg.weight * STEP_DT,  # rsl_rl's runner multiplies the weight by the step duration
        weight_schedule=schedule,
    )
    for mine, their in ((ours.predictor, theirs.predictor), (ours.target, theirs.target)):
        their_linears = [m for m in their.modules() if isinstance(m, torch.nn.Linear)]
        for a, b in zip([m for m in mine.modules() if isinstance(m, torch.nn.Linear)], their_linears, strict=True):
            b.weight.data.copy_(a.weight.data)
            b.bias.data.copy_(a.bias.data)
    return theirs.train()


@pytest.mark.fast
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("normalization", [False, True])
def test_intrinsic_rewards_equal_rsl_rls_step_by_step(schedule, normalization):
    torch.manual_seed(0)
    cfg = TorchRLRndCfg(
        weight=2.0,
        weight_schedule=SCHEDULES[schedule],
        reward_normalization=normalization,
        state_normalization=normalization,
        num_outputs=4,
        predictor_hidden_dims=[-1, 8],
        target_hidden_dims=[6],
    )
    ours = RandomNetworkDistillation(cfg, ("policy",), SIZE, STEP_DT, "cpu")
    theirs = _rsl_rl_twin(ours, cfg)
    for _ in range(2):  # two batches: the schedule and the normalisations carry over
        states = torch.randn(ENVS, STEPS, SIZE)
        rewards = ours.intrinsic_rewards(TensorDict(policy=states, batch_size=[ENVS, STEPS]))
        expected = torch.stack(
            [theirs.get_intrinsic_reward(TensorDict(policy=states[:, t], batch_size=[ENVS])) for t in range(STEPS)], 1
        )
        torch.testing.assert_close(rewards.squeeze(-1), expected, rtol=1e-5, atol=1e-6)
        assert ours.weight == pytest.approx(theirs.weight)
        flat = TensorDict(policy=states.flatten(0, 1), batch_size=[ENVS * STEPS])
        ours.update_normalization(flat)
        theirs.update_normalization(flat)
    if schedule != "constant":
        assert ours.weight != pytest.approx(cfg.weight * STEP_DT), "the schedule moved the weight"


@pytest.mark.fast
def test_the_update_adds_the_intrinsic_reward_and_trains_the_predictor_with_its_own_adam():
    torch.manual_seed(0)
    cfg = _cfg(None, **ONE_STEP)
    cfg.algorithm.rnd_cfg = TorchRLRndCfg(weight=1.0, learning_rate=0.01)
    interface = INTERFACE.__class__(
        **{**INTERFACE.__dict__, "rnd_obs_keys": ("policy",), "rnd_obs_dim": 3, "step_dt": STEP_DT}
    )
    learner = PPO(cfg, interface, "cpu")
    plain = PPO(_cfg(None, **ONE_STEP), INTERFACE, "cpu")
    plain.actor.load_state_dict(learner.actor.state_dict())
    plain.critic.load_state_dict(learner.critic.state_dict())
    batch = _batch(None)
    predictor = copy.deepcopy(learner.rnd.predictor)
    intrinsic = copy.deepcopy(learner.rnd).intrinsic_rewards(batch["next", "final_obs"])
    # the plain learner's batch with the intrinsic reward added must update the policy as the RND learner does
    with_intrinsic = batch.clone()
    with_intrinsic["next", "reward"] = batch["next", "reward"] + intrinsic

    stats = _update(learner, batch)
    expected = _update(plain, with_intrinsic)

    for ours, theirs in zip(learner.loss.parameters(), plain.loss.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
    assert stats["value"] == pytest.approx(expected["value"], rel=1e-6)
    assert stats["rnd_intrinsic_reward"] == pytest.approx(float(intrinsic.mean()), rel=1e-6)
    assert abs(float(intrinsic.mean())) > 1e-3, "the intrinsic reward is not vacuous"
    # one Adam step of the predictor on the minibatch's (here: the whole batch's) states, learning rate 0.01
    torch.manual_seed(SEED)
    order = torch.randperm(batch.numel())
    states = batch["policy"].flatten(0, 1)[order]
    optimizer = torch.optim.Adam(predictor.parameters(), lr=0.01)
    target = learner.rnd.target(states)
    torch.nn.functional.mse_loss(predictor(states), target).backward()
    optimizer.step()
    for ours, theirs in zip(learner.rnd.predictor.parameters(), predictor.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
    assert stats["rnd"] > 0


@pytest.mark.fast
def test_a_non_finite_predictor_gradient_stops_the_update_before_any_step():
    """The predictor's gradient is part of what the NaN guard checks, not only its loss: a NaN that appears in its
    backward pass alone (the losses finite) stops the update with neither the policy nor the predictor stepped."""
    torch.manual_seed(0)
    cfg = _cfg(None, **ONE_STEP)
    cfg.algorithm.rnd_cfg = TorchRLRndCfg(weight=1.0, learning_rate=0.01)
    interface = INTERFACE.__class__(
        **{**INTERFACE.__dict__, "rnd_obs_keys": ("policy",), "rnd_obs_dim": 3, "step_dt": STEP_DT}
    )
    learner = PPO(cfg, interface, "cpu")
    parameters = [*learner.loss.parameters(), *learner.rnd.predictor.parameters()]
    before = [p.detach().clone() for p in parameters]
    next(learner.rnd.predictor.parameters()).register_hook(lambda grad: grad * float("nan"))

    with pytest.raises(NonFiniteError, match=r"Non-finite \['grad_norm'\] in minibatch 1"):
        _update(learner, _batch(None))

    assert all(torch.equal(p, q) for p, q in zip(parameters, before, strict=True))


@pytest.mark.fast
def test_rsl_rls_rnd_config_ports_field_by_field():
    from isaaclab_rl.rsl_rl import RslRlRndCfg
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    from isaaclab_torchrl.agents.rsl_rl_port import port_rsl_rl_cfg

    rsl = load_cfg_from_registry("Isaac-Cartpole-Direct", "rsl_rl_cfg_entry_point")
    schedule = RslRlRndCfg.LinearWeightScheduleCfg(final_value=0.1, initial_step=10, final_step=50)
    rsl.algorithm.rnd_cfg = RslRlRndCfg(
        weight=0.5,
        weight_schedule=schedule,
        reward_normalization=True,
        learning_rate=3e-4,
        num_outputs=8,
        predictor_hidden_dims=[64, -1],
        target_hidden_dims=[32],
    )
    rnd = port_rsl_rl_cfg(rsl).algorithm.rnd_cfg
    assert (rnd.weight, rnd.reward_normalization, rnd.state_normalization) == (0.5, True, False)
    assert (rnd.learning_rate, rnd.num_outputs) == (3e-4, 8)
    assert (rnd.predictor_hidden_dims, rnd.target_hidden_dims) == ([64, -1], [32])
    assert rnd.weight_schedule.to_dict() == {"mode": "linear", "final_value": 0.1, "initial_step": 10, "final_step": 50}


def test_a_task_with_rnd_trains_logs_and_resumes_its_weight_schedule(workdir):
    from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars, tasks_env

    tasks = tasks_env()
    args = ["--task", "rnd_agent:Isaac-Cartpole-Rnd-Test", "--num_envs", "16", *CPU_ARGS]
    first = run_script("train.py", [*args, "--max_iterations", "2"], cwd=workdir, extra_env=tasks)
    assert_ok(first)
    assert "RND reads policy (4)" in first.stdout
    (run_dir,) = run_dirs(workdir, "rnd_agent")
    checkpoint = torch.load(os.path.join(run_dir, "model_2.pt"), weights_only=False)
    assert {"rnd", "rnd_optimizer"} <= set(checkpoint)
    # the schedule (weight 10 x 1/60 s until env step 24, then 0) resumes where it was: step 33 onward, weight 0
    resumed = run_script("train.py", [*args, "--max_iterations", "1", "--resume"], cwd=workdir, extra_env=tasks)
    assert_ok(resumed)
    weights = dict(scalars(run_dirs(workdir, "rnd_agent")[-1])["Rnd/weight"])
    first_weights = dict(scalars(run_dir)["Rnd/weight"])
    assert first_weights[1] == pytest.approx(10.0 / 60.0) and first_weights[2] == 0.0
    assert weights[3] == 0.0


@pytest.mark.fast
def test_the_intrinsic_reward_of_a_state_falls_as_it_is_revisited():
    torch.manual_seed(0)
    rnd = RandomNetworkDistillation(TorchRLRndCfg(weight=1.0, num_outputs=8), ("policy",), SIZE, STEP_DT, "cpu")
    visited = TensorDict(policy=torch.randn(64, SIZE), batch_size=[64])
    novel = TensorDict(policy=torch.randn(64, SIZE) + 3.0, batch_size=[64])
    before = rnd.intrinsic_rewards(visited.unsqueeze(1)).mean()
    optimizer = torch.optim.Adam(rnd.predictor.parameters(), lr=1e-2)
    for _ in range(200):  # the states are revisited: the predictor learns them
        optimizer.zero_grad()
        rnd.loss(visited).backward()
        optimizer.step()
    after = rnd.intrinsic_rewards(visited.unsqueeze(1)).mean()
    assert after < 0.2 * before
    assert rnd.intrinsic_rewards(novel.unsqueeze(1)).mean() > 2 * after, "states not visited stay novel"


@pytest.mark.fast
def test_rnds_normalisers_stop_learning_after_rsl_rls_sample_count():
    from isaaclab_torchrl.runners.rnd import UNTIL, RunningNormalizer

    normalizer = RunningNormalizer(2)
    normalizer.count.fill_(UNTIL - 1)
    normalizer.update(torch.full((4, 2), 3.0))
    assert normalizer.mean.tolist() != [0.0, 0.0] and int(normalizer.count) == UNTIL + 3
    learned = {key: value.clone() for key, value in normalizer.state_dict().items()}
    normalizer.update(torch.full((4, 2), -5.0))
    for key, value in normalizer.state_dict().items():
        assert torch.equal(value, learned[key]), key

"""Symmetry augmentation (rsl_rl's symmetry extension): the task's function read as a column selection with signs,
refused when it is not one, and an update with augmentation and mirror loss equal to a plain PyTorch one that
follows rsl_rl's rules (surrogate and value losses over all copies with the old log-probabilities, values,
advantages and returns repeated; entropy and the adaptive learning rate's KL over the original samples; the mirror
loss between the actor's mean on mirrored observations and the mirrored mean, the latter a fixed target)."""

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from helpers import CPU_ARGS, assert_ok, run_dirs, run_script, scalars, tasks_env
from isaaclab_torchrl.agents.torchrl_cfg import TorchRLSymmetryCfg
from isaaclab_torchrl.runners import PPO
from isaaclab_torchrl.symmetry import SymmetryError, read_symmetry
from ppo_reference import (
    CLIP,
    ENTROPY_COEF,
    INTERFACE,
    MAX_GRAD_NORM,
    ONE_STEP,
    SEED,
    VALUE_COEF,
    N,
    PlainNetwork,
    T,
    _batch,
    _cfg,
    _update,
    plain_gae,
)

OBS_INDEX, OBS_SIGN = [2, 1, 0], [-1.0, 1.0, -1.0]
ACTION_INDEX, ACTION_SIGN = [1, 0], [1.0, -1.0]
MIRROR_COEF = 0.5


def mirror_function(env=None, obs=None, actions=None):
    """A task's augmentation function in Isaac Lab's form: the original, then the mirrored copy."""
    obs_aug = actions_aug = None
    if obs is not None:
        obs_aug = obs.repeat(2)
        obs_aug["policy"][obs.batch_size[0] :] = obs["policy"][:, OBS_INDEX] * torch.tensor(OBS_SIGN)
    if actions is not None:
        actions_aug = torch.cat((actions, actions[:, ACTION_INDEX] * torch.tensor(ACTION_SIGN)))
    return obs_aug, actions_aug


@pytest.mark.fast
def test_isaaclab_cartpole_symmetry_reads_as_a_sign_flip():
    from isaaclab_tasks.core.cartpole.mdp.symmetry import compute_symmetric_states

    form = read_symmetry(compute_symmetric_states, None, {"policy": 4}, ("policy",), 1)
    assert form["copies"] == 2
    assert form["obs"]["policy"] == {"index": [[0, 1, 2, 3]] * 2, "scale": [[1.0] * 4, [-1.0] * 4]}
    assert form["actions"] == {"index": [[0], [0]], "scale": [[1.0], [-1.0]]}


def _mixing(env=None, obs=None, actions=None):
    obs_aug, actions_aug = mirror_function(env, obs, actions)
    if obs_aug is not None:
        obs_aug["policy"][obs.batch_size[0] :, 0] += obs["policy"][:, 1]
    return obs_aug, actions_aug


def _offset(env=None, obs=None, actions=None):
    obs_aug, actions_aug = mirror_function(env, obs, actions)
    return obs_aug, None if actions_aug is None else actions_aug + 1.0


def _nonlinear(env=None, obs=None, actions=None):
    obs_aug, actions_aug = mirror_function(env, obs, actions)
    if obs_aug is not None:
        obs_aug["policy"][obs.batch_size[0] :] = obs_aug["policy"][obs.batch_size[0] :].clamp(-0.5, 0.5)
    return obs_aug, actions_aug


@pytest.mark.fast
@pytest.mark.parametrize(
    ("function", "reason"),
    [(_mixing, "mixes several input columns"), (_offset, "adds a constant"), (_nonlinear, "as its unit inputs said")],
)
def test_a_function_that_is_not_a_column_selection_with_signs_is_refused(function, reason):
    with pytest.raises(SymmetryError, match=reason):
        read_symmetry(function, None, {"policy": 3}, ("policy",), 2)


def _learner(use_data_augmentation: bool, use_mirror_loss: bool) -> PPO:
    torch.manual_seed(0)
    cfg = _cfg(None, **ONE_STEP)
    cfg.algorithm.symmetry_cfg = TorchRLSymmetryCfg(
        use_data_augmentation=use_data_augmentation,
        use_mirror_loss=use_mirror_loss,
        data_augmentation_func=mirror_function,
        mirror_loss_coeff=MIRROR_COEF,
    )
    # the noise depends on the observation, with a std head that is not constant yet: the entropy (and the KL) of
    # the original samples then differ from those of all copies
    cfg.policy.state_dependent_std = True
    form = read_symmetry(mirror_function, None, {"policy": 3}, ("policy",), 2)
    interface = INTERFACE.__class__(**{**INTERFACE.__dict__, "symmetry": form})
    learner = PPO(cfg, interface, "cpu")
    with torch.no_grad():
        last = [m for m in learner.actor.modules() if isinstance(m, nn.Linear)][-1]
        last.weight[2:] = 0.3 * torch.randn_like(last.weight[2:])
    return learner


def _parameters(learner: PPO) -> list[torch.Tensor]:
    return [*PlainNetwork(learner.actor, "").mlp.parameters(), *PlainNetwork(learner.critic, "").mlp.parameters()]


def _actor(mlp: nn.Module, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rsl_rl's heteroscedastic Gaussian: the mean and the std (clamped to the default std_range) from one MLP."""
    out = mlp(obs)
    return out[:, :2], out[:, 2:].clamp(1e-6, 1e6)


def _mirrored(x: torch.Tensor, index: list, sign: list) -> torch.Tensor:
    return x[:, index] * torch.tensor(sign)


def _reference(learner: PPO, batch: TensorDict, augment: bool, mirror_loss: bool) -> tuple[list, dict]:
    """One gradient step on the whole batch (one epoch, one minibatch), in plain PyTorch."""
    actor, critic = PlainNetwork(learner.actor, "actor_rnn"), PlainNetwork(learner.critic, "critic_rnn")
    values, advantage, target = plain_gae(critic, batch)
    torch.manual_seed(SEED)
    order = torch.randperm(N * T)

    def flat(tensor):
        return tensor.reshape(N * T, *tensor.shape[2:])[order]

    obs, action = flat(batch["policy"]), flat(batch["action"])
    copies = 2 if augment else 1
    if augment:
        obs = torch.cat((obs, _mirrored(obs, OBS_INDEX, OBS_SIGN)))
        action = torch.cat((action, _mirrored(action, ACTION_INDEX, ACTION_SIGN)))
    old_log_prob, mb_advantage = flat(batch["action_log_prob"]).repeat(copies), flat(advantage).repeat(copies)
    old_value, mb_target = flat(values).repeat(copies), flat(target).repeat(copies)
    parameters = [*actor.weights(), *critic.weights()]
    optimizer = torch.optim.Adam(parameters, lr=learner.cfg.algorithm.learning_rate)

    loc, std = _actor(actor.mlp, obs)
    distribution = torch.distributions.Normal(loc, std)
    ratio = torch.exp(distribution.log_prob(action).sum(-1) - old_log_prob)
    surrogate = -torch.min(ratio * mb_advantage, ratio.clamp(1 - CLIP, 1 + CLIP) * mb_advantage).mean()
    value = critic.mlp(obs).squeeze(-1)
    clipped = old_value + (value - old_value).clamp(-CLIP, CLIP)
    value_loss = VALUE_COEF * torch.max((value - mb_target) ** 2, (clipped - mb_target) ** 2).mean()
    originals = N * T
    entropy = distribution.entropy().sum(-1)[:originals].mean()
    reference = torch.distributions.Normal(flat(batch["loc"]), flat(batch["scale"]))
    original = torch.distributions.Normal(loc[:originals], std[:originals])
    kl = torch.distributions.kl_divergence(reference, original).sum(-1).mean()
    # the mirror loss: the actor's mean on the mirrored observations against the mirrored mean on the originals
    mean = loc if augment else _actor(actor.mlp, torch.cat((obs, _mirrored(obs, OBS_INDEX, OBS_SIGN))))[0]
    symmetry = nn.functional.mse_loss(mean[originals:], _mirrored(mean[:originals], ACTION_INDEX, ACTION_SIGN).detach())
    loss = surrogate + value_loss - ENTROPY_COEF * entropy + (MIRROR_COEF * symmetry if mirror_loss else 0.0)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(actor.weights(), MAX_GRAD_NORM)
    torch.nn.utils.clip_grad_norm_(critic.weights(), MAX_GRAD_NORM)
    optimizer.step()
    stats = {"surrogate": surrogate, "value": value_loss, "entropy": entropy, "kl": kl, "symmetry": symmetry}
    return parameters, {key: float(value.detach()) for key, value in stats.items()}


@pytest.mark.fast
@pytest.mark.parametrize(("augment", "mirror_loss"), [(True, False), (True, True), (False, True), (False, False)])
def test_an_update_with_symmetry_follows_rsl_rl(augment, mirror_loss):
    learner = _learner(augment, mirror_loss)
    batch = _batch(None)
    expected_parameters, expected_stats = _reference(learner, batch, augment, mirror_loss)

    stats = _update(learner, batch)

    for actual, expected in zip(_parameters(learner), expected_parameters, strict=True):
        torch.testing.assert_close(actual.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
    for key, value in expected_stats.items():
        assert stats[key] == pytest.approx(value, abs=1e-5, rel=1e-5), key
    assert expected_stats["symmetry"] > 1e-3, "the policy is not symmetric yet: the mirror loss is not vacuous"


def test_cartpole_trains_with_its_symmetry_and_logs_the_mirror_loss(workdir):
    args = ["--task", "Isaac-Cartpole", "--agent", "torchrl_symmetry", "--num_envs", "32", "--max_iterations", "2"]
    process = run_script("train.py", [*args, *CPU_ARGS], cwd=workdir, offline_switch=True)
    assert_ok(process)
    assert "1 actions; 2 symmetric copies" in process.stdout, "Isaac Lab's Cartpole mirror, read by the probe"
    (run_dir,) = run_dirs(workdir, "cartpole")
    assert [step for step, _ in scalars(run_dir)["Loss/symmetry"]] == [1, 2]


def test_a_symmetry_function_that_cannot_be_applied_is_one_line_and_exit_2(workdir):
    args = ["--task", "Isaac-Cartpole", "--agent", "torchrl_symmetry", "--max_iterations", "1", *CPU_ARGS]
    args.append("agent.algorithm.symmetry_cfg.data_augmentation_func=mirror_functions:clamped")
    process = run_script("train.py", args, cwd=workdir, extra_env=tasks_env())
    assert process.returncode == 2, process.stderr[-3000:]
    (error,) = [line for line in process.stderr.splitlines() if line.startswith("[torchrl] error:")]
    assert "mirror_functions:clamped is not a mirror this runner can apply" in error
    assert "Traceback" not in process.stderr


def negation(env=None, obs=None, actions=None):
    """A mirror that negates every observation and action (Cartpole's left-right symmetry, for 3 and 2 columns)."""
    obs_aug = actions_aug = None
    if obs is not None:
        obs_aug = obs.repeat(2)
        obs_aug["policy"][obs.batch_size[0] :] = -obs["policy"]
    if actions is not None:
        actions_aug = torch.cat((actions, -actions))
    return obs_aug, actions_aug


@pytest.mark.fast
@pytest.mark.parametrize("symmetric", [True, False])
def test_the_mirror_loss_of_a_symmetric_policy_is_zero_and_of_an_asymmetric_one_is_not(symmetric):
    torch.manual_seed(0)
    cfg = _cfg(None, **ONE_STEP)
    cfg.policy.activation = "tanh"
    cfg.algorithm.symmetry_cfg = TorchRLSymmetryCfg(data_augmentation_func=negation)
    form = read_symmetry(negation, None, {"policy": 3}, ("policy",), 2)
    learner = PPO(cfg, INTERFACE.__class__(**{**INTERFACE.__dict__, "symmetry": form}), "cpu")
    if symmetric:  # tanh layers without biases: the mean is an odd function of the observation, like the mirror
        with torch.no_grad():
            for module in learner.actor.modules():
                if isinstance(module, nn.Linear):
                    module.bias.zero_()
    loss = learner.mirror.mirror_loss(learner.actor, TensorDict(policy=torch.randn(64, 3), batch_size=[64]), False)
    assert (float(loss) < 1e-12) is symmetric, float(loss)

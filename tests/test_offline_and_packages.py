"""What a user without network access, or with a task package of their own, meets first: the offline switch
whatever the import order, a task found through an installed package's ``isaaclab.tasks`` entry point, the printed
agent config, and TensorBoard tags that a dashboard built for rsl_rl finds."""

import glob
import os
import subprocess
import sys
import textwrap

import yaml

from helpers import (
    CPU_ARGS,
    OFFLINE_ASSET_ROOT,
    SIMULATION_CPU_ARGS,
    assert_ok,
    run_dirs,
    run_script,
    scalars,
    script_env,
)

EXTERNAL_TASK = "Ext-Cartpole-v0"


def test_train_and_play_with_the_offline_switch_alone(short_mlp_run):
    workdir, run_dir, _ = short_mlp_run  # trained with ISAACLAB_TORCHRL_OFFLINE_ASSETS=1 and no ISAACSIM_ASSET_ROOT
    assert os.path.isfile(os.path.join(run_dir, "model_2.pt"))
    with open(os.path.join(run_dir, "params", "env.yaml")) as file:
        env = yaml.load(file, Loader=yaml.FullLoader)
    assert env["scene"]["cartpole"]["spawn"]["usd_path"].startswith(OFFLINE_ASSET_ROOT)
    played = run_script(
        "play.py", ["--task", "Isaac-Cartpole-Direct", "--max_steps", "5", *CPU_ARGS], cwd=workdir, offline_switch=True
    )
    assert_ok(played)


def test_a_user_script_that_imports_isaaclab_tasks_first_gets_the_offline_assets(tmp_path):
    script = textwrap.dedent(
        """
        import argparse
        import isaaclab_tasks  # resolves Isaac Lab's asset paths before isaaclab_torchrl is imported
        import isaaclab_torchrl
        from isaaclab.app import add_launcher_args
        from isaaclab_tasks.utils import resolve_task_config
        from isaaclab_torchrl.envs import IsaacLabEnvFactory

        task = "Isaac-Cartpole-Direct"
        env_cfg, _ = resolve_task_config(task, "rsl_rl_cfg_entry_point", False, overrides=["physics=newton_mjwarp"])
        env_cfg.sim.device = "cpu"
        parser = argparse.ArgumentParser()
        add_launcher_args(parser)
        launcher = vars(parser.parse_args(["--viz", "none", "--device", "cpu"]))
        env = IsaacLabEnvFactory(task, env_cfg, launcher, num_envs=2, seed=0)()
        print("rollout", tuple(env.rollout(3).shape))
        env.close()
        """
    )
    process = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=script_env(offline_switch=True),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_ok(process)
    assert "rollout (2, 3)" in process.stdout


def _install_task_package(site) -> dict:
    """A task package as pip installs one: a module that registers a task (Cartpole with only an rsl_rl agent) and
    its distribution metadata with an ``isaaclab.tasks`` entry point, in a folder outside the shared venv."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401

    spec = gym.spec("Isaac-Cartpole-Direct")
    kwargs = {key: spec.kwargs[key] for key in ("env_cfg_entry_point", "rsl_rl_cfg_entry_point")}
    os.makedirs(os.path.join(site, "ext_tasks"))
    with open(os.path.join(site, "ext_tasks", "__init__.py"), "w") as file:
        file.write(
            "import gymnasium as gym\n\n"
            f"gym.register(id={EXTERNAL_TASK!r}, entry_point={spec.entry_point!r}, disable_env_checker=True, "
            f"kwargs={kwargs!r})\n"
        )
    dist_info = os.path.join(site, "ext_tasks-0.1.dist-info")
    os.makedirs(dist_info)
    with open(os.path.join(dist_info, "METADATA"), "w") as file:
        file.write("Metadata-Version: 2.1\nName: ext-tasks\nVersion: 0.1\n")
    with open(os.path.join(dist_info, "entry_points.txt"), "w") as file:
        file.write("[isaaclab.tasks]\next_tasks = ext_tasks\n")
    return {"PYTHONPATH": site}


def test_an_installed_task_package_is_found_by_its_id_and_trains(tmp_path):
    env = _install_task_package(str(tmp_path / "site"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    task = ["--task", EXTERNAL_TASK, *CPU_ARGS]

    # the effective (ported) agent, printed without training: nothing is written
    printed = run_script("train.py", [*task, "--print_config", "agent.algorithm.learning_rate=3e-4"], workdir, 300, env)
    assert_ok(printed)
    agent = yaml.safe_load(printed.stdout[printed.stdout.index("seed:") :])
    assert agent["experiment_name"] == "cartpole_direct" and agent["algorithm"]["learning_rate"] == 3e-4
    assert agent["policy"]["noise_std_type"] == "scalar", "rsl_rl's parameterisation of the action noise"
    assert not os.path.exists(os.path.join(workdir, "logs"))

    trained = run_script("train.py", [*task, "--num_envs", "8", "--max_iterations", "1"], workdir, extra_env=env)
    assert_ok(trained)
    (run_dir,) = run_dirs(workdir, "cartpole_direct")
    assert os.path.isfile(os.path.join(run_dir, "model_1.pt"))
    played = run_script("play.py", [*task, "--num_envs", "2", "--max_steps", "5"], workdir, extra_env=env)
    assert_ok(played)


def test_every_rsl_rl_tag_is_logged(short_mlp_run, tmp_path):
    """A short rsl_rl run of the same task (Isaac Lab's own rsl_rl workflow) names the tags to find in ours."""
    code = "import sys\nfrom isaaclab_rl.entrypoints.dispatch import run_train_cli\n"
    code += "sys.exit(run_train_cli(sys.argv[1:]))"
    args = ["--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "--max_iterations", "2"]
    args += ["agent.device=cpu"]  # rsl_rl learns on cuda:0 unless told
    process = subprocess.run(
        [sys.executable, "-c", code, *args, *SIMULATION_CPU_ARGS],  # rsl_rl's config has no collector
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_ok(process)
    (rsl_run,) = glob.glob(os.path.join(tmp_path, "logs", "rsl_rl", "cartpole_direct", "*"))
    rsl_tags = set(scalars(rsl_run))
    assert {"Loss/value", "Perf/collection_time", "Policy/mean_std", "Train/mean_reward/time"} <= rsl_tags, rsl_tags
    _, run_dir, _ = short_mlp_run
    ours = set(scalars(run_dir))
    assert rsl_tags <= ours, f"missing: {sorted(rsl_tags - ours)}"

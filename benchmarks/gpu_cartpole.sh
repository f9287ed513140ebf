#!/usr/bin/env bash
# Isaac-Cartpole-Direct, 4096 envs, on a GPU machine where the bundle of ../shared/gpu-bundle is unpacked
# (PYTHONPATH set): rsl_rl's OnPolicyRunner next to this project's runner (MLP sync, LSTM sync, MLP async),
# each library with its own Cartpole PPO config. Logs and steady-state steps/s go to $OUT.
#     bash benchmarks/gpu_cartpole.sh [ITERATIONS]
set -u
iterations=${1:-50}
out=${OUT:-/tmp/benchmark_out}
mkdir -p "$out"
export PYTHONPATH="$PWD/source${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ISAACSIM_ASSET_ROOT="$PWD/source/isaaclab_torchrl/offline_assets"
common=(--task Isaac-Cartpole-Direct --num_envs 4096 --max_iterations "$iterations" --viz none physics=newton_mjwarp)

run() {
  local name=$1; shift
  local start=$SECONDS
  timeout 240 "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  local run_dir
  run_dir=$(ls -dt logs/*/*/* 2>/dev/null | head -1)
  python benchmarks/steady_state.py "$run_dir" | tee -a "$out/summary.txt"
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/summary.txt"
run rsl_rl_mlp python -m isaaclab train --rl_library rsl_rl "${common[@]}"
run torchrl_mlp_sync python scripts/train.py --agent torchrl "${common[@]}"
run torchrl_lstm_sync python scripts/train.py --agent torchrl_lstm "${common[@]}"
run torchrl_mlp_async python scripts/train.py --agent torchrl --async "${common[@]}"

#!/usr/bin/env bash
# Isaac-Cartpole-Direct training throughput: rsl_rl's OnPolicyRunner next to this project's runner (MLP sync,
# LSTM sync, MLP async), each library with its own Cartpole PPO config, one after the other.
#     bash benchmarks/cartpole_throughput.sh [ITERATIONS] [NUM_ENVS] [DEVICE]
# On a GPU machine, unpack the bundle of ../shared/gpu-bundle first (it sets PYTHONPATH); on this project's
# machines run it with the venv's python first on PATH. Logs and a summary of steady-state steps/s go to $OUT.
set -u
iterations=${1:-50}
num_envs=${2:-4096}
device=${3:-cuda:0}
out=${OUT:-/tmp/benchmark_out}
mkdir -p "$out"
export PYTHONPATH="$PWD/source${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ISAACSIM_ASSET_ROOT="$PWD/source/isaaclab_torchrl/offline_assets"
unset ISAACLAB_TORCHRL_OFFLINE_ASSETS
common=(--task Isaac-Cartpole-Direct --num_envs "$num_envs" --max_iterations "$iterations" --device "$device"
        --viz none physics=newton_mjwarp)

run() {
  local name=$1; shift
  local start=$SECONDS
  timeout 900 "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  local run_dir
  run_dir=$(ls -dt logs/*/*/* 2>/dev/null | head -1)
  python benchmarks/steady_state.py "$run_dir" | tee -a "$out/summary.txt"
}

{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || nproc; } | tee "$out/summary.txt"
run rsl_rl_mlp python -m isaaclab train --rl_library rsl_rl "${common[@]}" agent.device="$device"
run torchrl_mlp_sync python scripts/train.py --agent torchrl "${common[@]}"
run torchrl_lstm_sync python scripts/train.py --agent torchrl_lstm "${common[@]}"
run torchrl_mlp_async python scripts/train.py --agent torchrl --async "${common[@]}"

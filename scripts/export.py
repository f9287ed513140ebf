"""Export a trained torchrl policy with LEAPP, as ``isaaclab leapp export --rl_library rsl_rl`` does for rsl_rl:

    python scripts/export.py --task Isaac-Cartpole --agent torchrl --viz none physics=newton_mjwarp
        [--checkpoint PATH|latest] [--load_run REGEX] [--export_method onnx-dynamo|onnx-torchscript|jit-script|...]
        [--validation_steps N] [--export_save_path DIR] [--export_task_name NAME]

The pipeline is written to <run>/<task>/<task>.yaml beside the checkpoint (or under --export_save_path), with one
model per stage, and validated by LEAPP's replay of --validation_steps recorded steps. Run it with
``isaaclab leapp deploy --task <task> --pipeline <run>/<task>/<task>.yaml``.
"""

import sys

import torch

# LEAPP traces Isaac Lab's Python tensor operations: TorchScript is off before any task module is imported, as in
# `isaaclab leapp export` (Isaac Lab's export helpers turn it off when imported too)
torch.jit._state.disable()

from isaaclab_torchrl.leapp_export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

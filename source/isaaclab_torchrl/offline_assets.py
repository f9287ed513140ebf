"""The vendored offline asset root (see ``offline_assets/README.md``).

This module imports nothing from Isaac Lab: Isaac Lab reads ``ISAACSIM_ASSET_ROOT`` once, when
``isaaclab.utils.assets`` is first imported, so the variable must be set before that.
"""

from __future__ import annotations

import os
import sys

OFFLINE_ASSET_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline_assets")
OPT_IN_VARIABLE = "ISAACLAB_TORCHRL_OFFLINE_ASSETS"


def use_offline_assets_if_requested() -> None:
    """Points ``ISAACSIM_ASSET_ROOT`` at the vendored assets when ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1``.

    A user's own ``ISAACSIM_ASSET_ROOT`` is never replaced silently: with both set to different folders this
    raises, since the offline root would hide every asset it does not mirror.
    """
    if os.environ.get(OPT_IN_VARIABLE, "0") in ("", "0"):
        return
    current = os.environ.get("ISAACSIM_ASSET_ROOT")
    if current and os.path.abspath(current) != OFFLINE_ASSET_ROOT:
        raise RuntimeError(
            f"{OPT_IN_VARIABLE}=1 asks for the offline asset root, but ISAACSIM_ASSET_ROOT is already set to "
            f"{current!r}. Unset one of them."
        )
    if "isaaclab.utils.assets" in sys.modules and not current:
        raise RuntimeError(
            f"{OPT_IN_VARIABLE}=1 came too late: Isaac Lab's asset paths were resolved before isaaclab_torchrl "
            f"was imported. Set ISAACSIM_ASSET_ROOT={OFFLINE_ASSET_ROOT} instead."
        )
    os.environ["ISAACSIM_ASSET_ROOT"] = OFFLINE_ASSET_ROOT


if __name__ == "__main__":
    print(OFFLINE_ASSET_ROOT)

"""Where a task's assets come from: the vendored offline asset root (``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1``, see
``offline_assets/README.md``), a quick check that the asset server answers before a run starts, and ANYmal's
actuator model where its network file cannot be had.

Isaac Lab turns ``ISAACSIM_ASSET_ROOT`` into asset paths once, when ``isaaclab.utils.assets`` is first imported,
and the task configs carry the resulting paths. So the offline switch is applied to the env config where a run
resolves it (:func:`use_offline_assets`): it rewrites the paths under the root Isaac Lab resolved into the
vendored root, whatever was imported first, and sets ``ISAACSIM_ASSET_ROOT`` for the processes started from then on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import urllib.error
import urllib.request
from urllib.parse import urlparse

logger = logging.getLogger(__name__)

OFFLINE_ASSET_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline_assets")
OPT_IN_VARIABLE = "ISAACLAB_TORCHRL_OFFLINE_ASSETS"
SERVER_TIMEOUT_S = 5.0


class AssetRootError(ValueError):
    """The assets cannot be had: a conflicting asset root, or an asset server that does not answer."""


def offline_assets_requested() -> bool:
    return os.environ.get(OPT_IN_VARIABLE, "0") not in ("", "0")


def _map_strings(cfg, function, seen=None) -> None:
    """Replaces every string ``s`` in a config tree (configclasses, dicts, lists, tuples) by ``function(s)``."""
    seen = set() if seen is None else seen
    if id(cfg) in seen:
        return
    seen.add(id(cfg))
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        items, setter = list(vars(cfg).items()), lambda key, value: setattr(cfg, key, value)
    elif isinstance(cfg, dict):
        items, setter = list(cfg.items()), cfg.__setitem__
    elif isinstance(cfg, list):
        items, setter = list(enumerate(cfg)), cfg.__setitem__
    else:
        return
    for key, value in items:
        if isinstance(value, str):
            setter(key, function(value))
        elif isinstance(value, tuple) and any(isinstance(item, str) for item in value):
            setter(key, tuple(function(item) if isinstance(item, str) else item for item in value))
        else:
            _map_strings(value, function, seen)


def export_offline_root() -> None:
    """With ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1``, sets ``ISAACSIM_ASSET_ROOT`` to the vendored root for the processes
    started from here on: a worker server started before the env config is resolved imports Isaac Lab with it, so
    the paths Isaac Lab builds at import (the ground plane of a terrain) are offline too. A conflicting root is left
    as it is, for :func:`use_offline_assets` to report."""
    if offline_assets_requested() and not os.environ.get("ISAACSIM_ASSET_ROOT"):
        os.environ["ISAACSIM_ASSET_ROOT"] = OFFLINE_ASSET_ROOT


def use_offline_assets(env_cfg) -> None:
    """With ``ISAACLAB_TORCHRL_OFFLINE_ASSETS=1``, points the env config's asset paths at the vendored root.

    A user's own ``ISAACSIM_ASSET_ROOT`` is never replaced silently: with both set to different folders this
    raises, since the offline root would hide every asset it does not mirror. Without the switch, nothing changes.

    Raises:
        AssetRootError: ``ISAACSIM_ASSET_ROOT`` names another folder.
    """
    if not offline_assets_requested():
        return
    current = os.environ.get("ISAACSIM_ASSET_ROOT")
    if current and os.path.abspath(current) != OFFLINE_ASSET_ROOT:
        raise AssetRootError(
            f"{OPT_IN_VARIABLE}=1 asks for the offline asset root, but ISAACSIM_ASSET_ROOT is already set to "
            f"{current!r}. Unset one of them."
        )
    export_offline_root()  # for the simulation processes started from here
    from isaaclab.utils.assets import NUCLEUS_ASSET_ROOT_DIR  # the root this process's configs were built with

    if NUCLEUS_ASSET_ROOT_DIR != OFFLINE_ASSET_ROOT:
        prefix = f"{NUCLEUS_ASSET_ROOT_DIR}/"
        _map_strings(env_cfg, lambda s: OFFLINE_ASSET_ROOT + s[len(prefix) - 1 :] if s.startswith(prefix) else s)


def check_asset_server(env_cfg) -> None:
    """Asks Isaac Lab's asset server whether it answers, when the env config has assets on it (one request, a few
    seconds at most).

    A server that answers at all, even "not found", passes: only an unreachable one is reported, before anything
    starts, instead of a download error from inside a simulation process. Assets elsewhere (a local root, Newton's
    asset repository) are not asked for.

    Raises:
        AssetRootError: the server cannot be reached; the message says how to run with local assets.
    """
    from isaaclab.utils.assets import NUCLEUS_ASSET_ROOT_DIR

    if urlparse(NUCLEUS_ASSET_ROOT_DIR).scheme not in ("http", "https"):
        return
    urls = []
    _map_strings(env_cfg, lambda s: urls.append(s) or s if s.startswith(f"{NUCLEUS_ASSET_ROOT_DIR}/") else s)
    if not urls:
        return
    try:
        urllib.request.urlopen(urllib.request.Request(urls[0], method="HEAD"), timeout=SERVER_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AssetRootError(
            f"Isaac Lab's asset server {urlparse(urls[0]).netloc} cannot be reached ({reason}). Set "
            f"ISAACSIM_ASSET_ROOT to a local copy of the assets, or {OPT_IN_VARIABLE}=1 for the vendored Cartpole "
            "and ANYmal assets."
        ) from None


if __name__ == "__main__":
    print(OFFLINE_ASSET_ROOT)


def use_available_actuators(env_cfg) -> None:
    """Swaps ANYmal's ANYdrive actuator network for its DC-motor model when the network file cannot be found.

    The network lives on Isaac Lab's asset server; offline (e.g. with the vendored asset root) it is missing,
    and the DC-motor model of the same drive (``ANYDRIVE_3_SIMPLE_ACTUATOR_CFG``) is the documented stand-in.
    """
    robot = getattr(getattr(env_cfg, "scene", None), "robot", None)
    actuators = getattr(robot, "actuators", None)
    if not isinstance(actuators, dict):
        return
    for name, actuator in actuators.items():
        network_file = str(getattr(actuator, "network_file", "") or "")
        if not network_file.endswith("anydrive_3_lstm_jit.pt") or _file_available(network_file):
            continue
        from isaaclab_assets.robots.anymal import ANYDRIVE_3_SIMPLE_ACTUATOR_CFG

        logger.warning(
            "Actuator network %s not found: actuator group %r uses the DC-motor model ANYDRIVE_3_SIMPLE_ACTUATOR_CFG.",
            network_file,
            name,
        )
        actuators[name] = ANYDRIVE_3_SIMPLE_ACTUATOR_CFG.replace(joint_names_expr=actuator.joint_names_expr)


def _file_available(path: str) -> bool:
    """Whether an asset file exists, locally or on Isaac Lab's asset server."""
    if os.path.isfile(path):
        return True
    from isaaclab.utils.assets import check_file_path

    try:
        return bool(check_file_path(path))
    except ImportError:  # no client for remote assets (omni.client), as in a kitless pip install
        return False

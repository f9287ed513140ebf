"""The recurrent modules' state primers: torchrl's, without a host sync per step on a GPU."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import expand_as_right
from torchrl.envs import TensorDictPrimer
from torchrl.envs.transforms.utils import _get_reset


class StatePrimer(TensorDictPrimer):
    """torchrl's :class:`~torchrl.envs.TensorDictPrimer` of a recurrent module's states, which after an environment's
    native auto-reset (Isaac Lab resets inside its step) sets the states of the ended episodes to their default value
    without first asking whether any episode ended.

    Proposed upstream change (torchrl 0.14.1, ``TensorDictPrimer._reset_func``): ``_reset.any()`` decides whether to
    write the default values at all, a host sync on a GPU per primer and step (two per step for an LSTM actor and
    critic: ``docs/benchmarks.md``), although the ``where`` over the reset mask that follows gives the same states
    when no episode ended.
    """

    def _reset_on_native_autoreset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        defaults = self.default_value
        states = {key: tensordict.get(key, None) for key in self.primers.keys(True, True)}
        plain = not self.random and not self.call_before_env_reset and not callable(defaults)
        if not plain or any(state is None or callable(defaults[key]) for key, state in states.items()):
            return super()._reset_on_native_autoreset(tensordict, tensordict_reset)
        reset = _get_reset(self.reset_key, tensordict)
        for key, state in states.items():
            tensordict_reset.set(key, torch.where(expand_as_right(reset, state), defaults[key], state))
        return tensordict_reset

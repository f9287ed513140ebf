"""torchrl's native auto-reset (Isaac Lab resets ended episodes inside its step) without the work it adds per env
step: the transformed env's step and the recurrent modules' state primers, each a proposed torchrl change carried as
a subclass."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import expand_as_right
from torchrl.envs import TensorDictPrimer, TransformedEnv
from torchrl.envs.transforms.utils import _get_reset


class StatePrimer(TensorDictPrimer):
    """torchrl's :class:`~torchrl.envs.TensorDictPrimer` of a recurrent module's states, which after an environment's
    native auto-reset (Isaac Lab resets inside its step) sets the states of the ended episodes to their default value
    without first asking whether any episode ended.

    Proposed upstream change (torchrl 0.14.1, ``TensorDictPrimer._reset_func``): ``_reset.any()`` decides whether to
    write the default values at all, a host sync on a GPU per primer and step (two per step for an LSTM actor and
    critic: ``docs/benchmarks.md``), although the ``where`` over the reset mask that follows gives the same states
    when no episode ended. The done-shaped reset mask (``[*batch, 1]``) is read as a view of the batch's shape, not
    reduced over its last dimension.
    """

    def _reset_on_native_autoreset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        defaults = self.default_value
        states = {key: tensordict.get(key, None) for key in self.primers.keys(True, True)}
        plain = not self.random and not self.call_before_env_reset and not callable(defaults)
        if not plain or any(state is None or callable(defaults[key]) for key, state in states.items()):
            return super()._reset_on_native_autoreset(tensordict, tensordict_reset)
        reset = tensordict.get(self.reset_key, None)
        if reset is not None and reset.numel() == tensordict.numel():
            reset = reset.reshape(tensordict.batch_size)  # a view; torchrl's _get_reset reduces with any()
        else:
            reset = _get_reset(self.reset_key, tensordict)
        for key, state in states.items():
            tensordict_reset.set(key, torch.where(expand_as_right(reset, state), defaults[key], state))
        return tensordict_reset


class AutoResetEnv(TransformedEnv):
    """The transformed env of :class:`IsaacLabEnv`: torchrl's step with native auto-reset, at the cost of the masks.

    Proposed upstream change (torchrl 0.14.1, ``EnvBase._step_and_maybe_reset`` with native auto-reset), three
    parts:

    * the episode-start flag ``is_init`` is written once per done key, ``done``, ``terminated`` and ``truncated`` in
      turn, so an env with all three ends with ``is_init = truncated``: the first step of an episode after a
      termination is not marked (the recurrent states are zeroed all the same, from the reset mask), and the update
      would run a recurrent layer across the two episodes. Written here from ``done``, the mask the reset uses.
    * every observation of the step's ``"next"`` entry (the recurrent states and the transforms' running sums
      included) is cloned and then overwritten with NaN (zeros for integers) where an episode ended, one ``where``
      over a full-size fill per key, so that nobody reads a reset observation as a final one. This env gives the
      true final observations under ``("next", "final_obs")`` and ``compact_obs`` drops the ``"next"``
      observations from the batches: nothing reads the marks. Left out here; upstream, an env that declares its
      final observations apart would skip them.
    * each done flag is cloned; the clones are OR-ed into the reset mask, which is cloned; each clone is cloned again
      as ``is_init`` (the first part's bug) and zeroed in place: Isaac Lab's ``done`` is already the union, and
      nothing writes it in place; the next step's flags are one tensor of zeros.

    What the three cost per env step: ``docs/benchmarks.md`` (per env step in a worker).
    """

    DONE_KEYS = frozenset(("done", "terminated", "truncated"))
    """The done flags this step handles (Isaac Lab's wrapper's); with others, torchrl's step runs."""

    def _step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        native = self.__dict__.get("_torchrl_native_autoreset", False)  # else torchrl's reset call (a test's path)
        if not native or set(self.done_keys) != self.DONE_KEYS:
            return super()._step_and_maybe_reset(tensordict)
        if tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        tensordict = self.step(tensordict)
        tensordict_ = self._step_mdp(tensordict)
        if self._post_step_mdp_hooks is not None:
            tensordict, tensordict_ = self._post_step_mdp_hooks(tensordict, tensordict_)
        done = tensordict.get(("next", "done"))
        # the env (its running sums) and the transforms (the recurrent states) reset the ended episodes from the mask
        tensordict_.set("_reset", done)
        tensordict_ = self._reset_on_native_autoreset(tensordict_, tensordict_)
        tensordict_.pop("_reset", None)
        if "is_init" in tensordict_.keys():
            tensordict_.set("is_init", done)
        running = torch.zeros_like(done)
        for key in self.done_keys:
            tensordict_.set(key, running)
        return tensordict, tensordict_

"""The agent config's fields as declared: the required ones set, and the scalar ones (numbers, flags, names) of the
type their annotation says, whatever a Hydra override or a task's config put there."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing

SCALARS = (bool, int, float, str)


def unset_fields(cfg, path: str = "agent") -> list[str]:
    """The dotted paths of the fields of ``cfg`` (and of the configs inside it) that are still ``MISSING``."""
    unset = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name, dataclasses.MISSING)
        if isinstance(value, type(dataclasses.MISSING)):  # configclass copies the MISSING default
            unset.append(f"{path}.{field.name}")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            unset += unset_fields(value, f"{path}.{field.name}")
    return unset


def mistyped_fields(cfg, path: str = "agent") -> list[str]:
    """``path=value (expected ...)`` for each scalar field of ``cfg`` (and of the configs inside it) whose value is
    not of its declared type: an ``int`` field takes no ``2.5`` and no ``true``, a ``float`` field takes an ``int``."""
    wrong = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name, None)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            wrong += mistyped_fields(value, f"{path}.{field.name}")
            continue
        allowed = _scalar_types(_annotation(type(cfg), field))
        if allowed is None or isinstance(value, type(dataclasses.MISSING)) or _is_one_of(value, allowed):
            continue
        names = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
        wrong.append(f"{path}.{field.name}={value!r} (expected {names})")
    return wrong


def _annotation(cls: type, field: dataclasses.Field):
    """The type ``field`` is annotated with, evaluated in the module of the class that declares it (the configs
    postpone their annotations); ``None`` where that fails."""
    if not isinstance(field.type, str):
        return field.type
    owner = next((c for c in cls.__mro__ if field.name in vars(c).get("__annotations__", {})), cls)
    try:
        return eval(field.type, vars(sys.modules[owner.__module__]))
    except Exception:  # a name the module imports only for type checking: not a scalar field's
        return None


def _scalar_types(hint) -> tuple | None:
    """The types a field annotated ``hint`` takes, when they are all scalars (or ``None``); else ``None``."""
    kinds = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    return kinds if kinds and all(kind in SCALARS or kind is type(None) for kind in kinds) else None


def _is_one_of(value, kinds: tuple) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return any(isinstance(value, kind) for kind in kinds)

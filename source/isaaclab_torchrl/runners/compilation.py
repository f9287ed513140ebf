"""How the learner's update is compiled: torch.compile's settings, where its compiled code persists, and the
precision of the CUDA matrix products (``agent.compile``, ``agent.tf32``)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import logging
import os
import platform
import sys
import tempfile
from collections.abc import Callable

import tensordict
import torch
import torchrl
from tensordict.nn import CudaGraphModule

logger = logging.getLogger(__name__)

COMPILE_SETTINGS = {"allow_rnn": True}
"""torch.compile's settings while it traces the update. tensordict finds the actor's distribution by walking its
modules, an ``nn.LSTM``/``nn.GRU`` among them, which dynamo refuses to wrap by default: it would run the whole loss
eagerly, the recurrent pass's backward included. Those modules' own forward never runs in the update (the
recurrent layers run :mod:`isaaclab_torchrl.recurrent`'s fused pass)."""


def compile_losses(losses: Callable, cfg: object) -> Callable:
    """``losses`` compiled by ``torch.compile``: traced with :data:`COMPILE_SETTINGS`, and its forward and backward
    graphs kept in AOTAutograd's cache although they contain a custom ``autograd.Function``.

    torch 2.11 leaves such graphs out of AOTAutograd's cache by default, so every new process traced the joint graph
    and partitioned it again. The fused recurrent pass (:mod:`isaaclab_torchrl.recurrent`) is such a function; dynamo
    traces its forward and its backward into the graph (``autograd_function_apply``), so they are part of the key of
    the cached entry. The cached steps and what is left of a run's first update are in ``docs/benchmarks.md``.

    The result is a :class:`SavedTrace` keyed by the runner's ``cfg``: dynamo's trace persists too, and the plain
    compiled method is its fallback.
    """
    compiled = torch._dynamo.config.patch(**COMPILE_SETTINGS)(torch.compile(losses))
    compiled = torch._functorch.config.patch(autograd_cache_allow_custom_autograd_functions=True)(compiled)
    return SavedTrace(losses, cfg, compiled)


class SavedTrace:
    """A method compiled on its first call into one graph whose trace is kept in a file of the compile cache
    (``torch.compile(...).aot_compile`` and ``save_compiled_function``), and loaded from there by a later process
    of the same config (``torch.compiler.load_compiled_function``) instead of being traced again.

    The inductor and AOTAutograd caches already keep the compiled kernels; what they do not keep is dynamo's
    trace of the Python code, seconds for an unrolled recurrent pass, paid again by every run. The file keeps the
    tensor guards only (the others cannot be saved), so what the dropped guards checked is checked here: the file's
    name is a hash of the config, the device, the precision flags, the library versions and the minibatch's
    structure, and a loaded trace is used only if the source of every function it traced is unchanged and the
    minibatch passes its guards. Any miss traces anew and replaces the file; a method that cannot be traced as one
    graph or saved runs ``fallback`` (torch.compile's usual path), and a marker file sends later runs straight there.
    """

    def __init__(self, method: Callable, cfg: object, fallback: Callable):
        self.function, self.owner, self.cfg, self.fallback = method.__func__, method.__self__, cfg, fallback
        self.compiled = None
        self.origin = None
        """How the first call got its compiled code: ``"loaded"``, ``"traced"`` or ``"fallback"``."""

    def __call__(self, *args):
        if self.compiled is None:
            self.compiled = self._load_or_trace(args)
        if self.compiled is not self.fallback and self.compiled.guard_check(self.owner, *args):
            return self.compiled(self.owner, *args)
        return self.fallback(*args)

    def path(self, args: tuple) -> str:
        """The file of this config's trace in the compile cache folder."""
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        leaves = [
            (str(key), tuple(value.shape), str(value.dtype), str(value.device))
            for arg in args
            for key, value in sorted(arg.items(include_nested=True, leaves_only=True), key=lambda item: str(item[0]))
        ]
        device = leaves[0][3] if leaves else "cpu"
        hardware = torch.cuda.get_device_name(device) if device.startswith("cuda") else _cpu_model()
        key = {
            "function": self.function.__qualname__,
            "config": {name: _as_dict(getattr(self.cfg, name, None)) for name in ("policy", "algorithm", "tf32")},
            "hardware": [device, hardware, platform.machine()],
            "flags": [torch.backends.cuda.matmul.allow_tf32, torch.are_deterministic_algorithms_enabled()],
            "versions": [torch.__version__, tensordict.__version__, torchrl.__version__],
            "minibatch": leaves,
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
        return os.path.join(cache_dir(), "isaaclab_torchrl_traces", f"{self.function.__qualname__}-{digest}")

    def _load_or_trace(self, args: tuple):
        path = self.path(args)
        if self.owner.device.type == "cpu":  # the learner's: inductor's kernels for the CPU
            skip_checked_instruction_sets()
        if os.path.exists(path + ".fallback"):
            self.origin = "fallback"
            return self.fallback
        if os.path.exists(path):
            try:
                with open(path, "rb") as file:
                    compiled = torch.compiler.load_compiled_function(file)
                compiled.disable_guard_check()  # checked in __call__, once per call
                if sources_unchanged(compiled.source_info()) and compiled.guard_check(self.owner, *args):
                    self.origin = "loaded"
                    return compiled
            except Exception as exc:  # a file of another torch, a partial write: trace anew
                logger.info("Saved trace %s not loaded: %s", path, exc)
        try:
            compiled = self._trace(args)
            _write_atomic(path, compiled)
        except Exception as exc:  # graph breaks or what cannot be saved: torch.compile's usual path from now on
            logger.info("The update's trace is not saved (%s); compiled as usual", exc)
            _write_atomic(path + ".fallback", None)
            self.origin = "fallback"
            return self.fallback
        compiled.disable_guard_check()
        self.origin = "traced"
        return compiled

    def _trace(self, args: tuple):
        dynamo = torch._dynamo.config.patch(enable_aot_compile=True, **COMPILE_SETTINGS)
        functorch = torch._functorch.config.patch(autograd_cache_allow_custom_autograd_functions=True)
        options = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}
        with dynamo, functorch:
            return torch.compile(self.function, fullgraph=True, options=options).aot_compile(((self.owner, *args), {}))


def sources_unchanged(source_info) -> bool:
    """Whether every function a saved trace inlined still has the source it had (torch's own check of its
    precompile cache, ``CompilePackage.initialize``, done here for a loaded ``aot_compile`` trace)."""
    for source in source_info.inlined_sources:
        try:
            lines = inspect.getsourcelines(importlib.import_module(source.module))[0]
        except (ImportError, OSError, TypeError):
            return False
        text = "".join(lines[source.firstlineno - 1 : source.lastlineno - 1])
        if hashlib.sha256(text.encode()).hexdigest() != source.checksum:
            return False
    return True


def skip_checked_instruction_sets() -> None:
    """Inductor's check of the CPU's vector instruction sets, done once per machine instead of once per process.

    Before it compiles or loads its first CPU kernel, inductor checks every vector instruction set the CPU reports
    (``torch._inductor.cpu_vec_isa.valid_vec_isa_list``): it builds a test program per set, which its cache keeps, and
    loads each in a new Python process, which nothing keeps (pytorch/pytorch#100378). Once every set has passed on
    this machine, with this compiler and this torch, a file in the compile cache folder says so, and later processes
    take the sets as checked (``torch._inductor.config.cpp.vec_isa_ok``, torch's own switch). The AVX-512 sets' checks
    of their bf16 and VNNI extensions do not read the switch and still run; what is saved is in
    ``docs/benchmarks.md``. A set that fails is checked again in every process. The switch is part of the key of
    inductor's graph cache, so graphs cached before the first such process compile once more. A proposed upstream
    change: inductor keeping its successful load checks (pytorch/pytorch#190561 proposes marker files).
    """
    from torch._inductor import config, cpu_vec_isa
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    if config.cpp.vec_isa_ok is not None or platform.machine() not in ("x86_64", "AMD64"):
        return
    try:
        from torch._inductor.cpp_builder import get_compiler_version_info, get_cpp_compiler

        compiler = get_compiler_version_info(get_cpp_compiler())
    except Exception:  # no C++ compiler: inductor says so itself when it compiles
        return
    flags = cpu_vec_isa.x86_isa_checker()
    reported = [str(isa) for isa in cpu_vec_isa.supported_vec_isa_list if set(str(isa).split()) <= set(flags)]
    key = json.dumps([torch.__version__, compiler, flags, reported, sys.executable])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    path = os.path.join(cache_dir(), "isaaclab_torchrl_cpu", f"vec_isa_ok-{digest}")
    if not os.path.exists(path):
        if [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()] != reported:
            return
        try:
            _write_atomic(path, None)
        except OSError as exc:  # a read-only or full cache folder: later processes check again
            logger.info("The instruction-set check's result is not kept (%s)", exc)
    config.cpp.vec_isa_ok = True


def _as_dict(cfg: object) -> object:
    return cfg.to_dict() if hasattr(cfg, "to_dict") else cfg


def _cpu_model() -> str:
    """The CPU's model name (inductor's CPU kernels are built for its instruction set)."""
    try:
        with open("/proc/cpuinfo") as file:
            return next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def _write_atomic(path: str, compiled) -> None:
    """``compiled``'s saved trace (or an empty marker for ``None``) at ``path``, never a partly written file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path))
    os.close(handle)
    try:
        if compiled is not None:
            compiled.save_compiled_function(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


class CallerSafeCudaGraph(CudaGraphModule):
    """tensordict's ``CudaGraphModule`` that leaves the caller's tensordict holding the tensors it held.

    Its warm-up and capturing calls clone the input's tensors into the caller's tensordict itself, and the graph then
    reads the capturing call's clones, which every replay overwrites with its own input. Whatever else holds that
    tensordict sees the later calls' inputs in it: the collector keeps each step's tensordict until the rollout's end,
    so the first rollout's first step recorded the observations of its last (``docs/benchmarks.md``); the first
    update's capturing minibatch, gone through again in later epochs, would hold the minibatch replayed before it.
    Those calls get a shallow copy here. A proposed upstream change: clone into a new tensordict, not the caller's.
    """

    def __call__(self, tensordict, *args, **kwargs):
        if getattr(self, "graph", None) is None:  # a warm-up or the capture: they replace the input's tensors
            tensordict = tensordict.copy()
        return super().__call__(tensordict, *args, **kwargs)


class GradientStepGraph(CallerSafeCudaGraph):
    """A :class:`CallerSafeCudaGraph` for a step whose result is its gradients, in the parameters' ``.grad``.

    The call that captures the graph runs the step once eagerly and then records it; the recording runs no kernel,
    but ``zero_grad(set_to_none=True)`` and ``backward`` under it leave each ``.grad`` pointing at a new buffer of the
    graph's memory that only a replay fills. The capturing call returns the eager run's outputs, but the optimizer
    step after it would read those unfilled buffers. So this one replays the graph once right after capturing it,
    on the same input. A proposed upstream change: ``CudaGraphModule`` replaying after the capture (or saying in its
    docstring that the capturing call's side effects are those of the capture).
    """

    def __call__(self, *args, **kwargs):
        captured = getattr(self, "graph", None) is not None
        out = super().__call__(*args, **kwargs)
        if not captured and getattr(self, "graph", None) is not None:
            out = super().__call__(*args, **kwargs)
        return out


def compile_cache_dir() -> str:
    """Where inductor keeps compiled graphs and kernels between runs: ``TORCHINDUCTOR_CACHE_DIR`` when the user set
    it, else ``isaaclab_torchrl/torchinductor`` in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``),
    which outlives a reboot where torch's own default (``/tmp/torchinductor_<user>``) may not.

    Importing tensordict already sets the variable to torch's default, so that value counts as not set.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and current != default_cache_dir():
        return current
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "isaaclab_torchrl", "torchinductor")


@contextlib.contextmanager
def tf32_products(enabled: bool):
    """CUDA float32 matrix products in TF32 inside the block (``agent.tf32``), as they were outside it after."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous

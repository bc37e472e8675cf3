"""CompiledModel: a built model, called with pointers to the framework's own tensors.

The frontend's wrapper calls ``prepare(param_ptrs)`` when parameters change
and ``run(input_ptrs, param_ptrs, output_ptrs, batch)`` per inference; the
CompiledModel owns the derived-parameter area and the workspace (grown for
larger batches). Everything is validated here, before the generated code
runs: generated code trusts its arguments.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SolInputError
from ..ir import Graph, Size, Tensor, evaluate, solve_batch
from .host_memory import aligned_buffer
from .library import ModelLibrary, pointer_array

_STATUS = {1: "an index is out of range (embedding lookup)",
           2: "a library call (e.g. oneDNN) failed; run with SOL_LOG=DEBUG and check stderr"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[Size, ...]
    dtype: str

    def concrete(self, batch: int) -> tuple[int, ...]:
        return tuple(evaluate(s, batch) for s in self.shape)


@dataclass(frozen=True, eq=False)
class NativeForward:
    """A host model's forward as native code calls it (`CompiledModel.native_forward`)."""

    function: int  # the address of <prefix>_forward(derived, inputs, params, outputs, workspace, batch)
    derived: int
    workspace: int
    workspace_owner: object
    lock: threading.Lock


class CompiledModel:
    """The runtime face of one compiled graph (see the module docstring)."""

    def __init__(self, graph: Graph, library_path: Path, prefix: str, outputs: list[Tensor] | None = None,
                 device: int = 0) -> None:
        self.graph = graph
        self.device_index = device
        self.param_names: list[str] = list(graph.params)
        self.input_specs = [TensorSpec(t.name, t.shape, t.dtype) for t in graph.inputs]
        self.output_specs = [TensorSpec(t.name, t.shape, t.dtype) for t in (outputs or graph.outputs)]
        self._lock = threading.Lock()
        self._workspace: object = None
        self._workspace_ptr = 0
        self._workspace_bytes = -1
        self._workspace_batch = -1  # the batch the workspace was last checked for
        self._open(library_path, prefix, device)
        # Per-call work is cached: the concrete input/output shapes per batch (sympy is slow: ~100 us a
        # substitution; solve_batch caches the other direction), and nothing at all for a static graph.
        #: no input dim depends on the batch (batch_of is then always 1)
        self.static = all(isinstance(s, int) for spec in self.input_specs for s in spec.shape)
        self._shapes: dict[int, tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]] = {}
        #: the length of the parameter pointer array (at least one slot, as the generated code expects)
        self._param_slots = max(len(self.param_names), 1)
        #: ctypes array types of the input and output pointers
        self._input_array = ctypes.c_void_p * max(len(self.input_specs), 1)
        self._output_array = ctypes.c_void_p * max(len(self.output_specs), 1)
        self.prepared = False
        #: called with this model after every forward (debug mode prints its per-Cluster times from here)
        self.run_listeners: list[Callable[[CompiledModel], None]] = []

    def _open(self, library_path: Path, prefix: str, device: int) -> None:
        """Load the artifact and initialise it: here a host library, called in this process."""
        self.library = ModelLibrary(library_path, prefix)
        if self.library.init(device) != 0:
            raise SolInputError(f"initialising model {self.graph.name!r} on device {device} failed")
        self._derived, self._derived_ptr = aligned_buffer(int(self.library.derived_size()))

    @property
    def library_path(self) -> Path:
        return self.library.path

    # -- shapes ----------------------------------------------------------
    def output_shapes(self, batch: int) -> list[tuple[int, ...]]:
        return list(self.shapes(batch)[1])

    def shapes(self, batch: int) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
        """(input shapes, output shapes) at ``batch``, computed once per batch (sympy is slow)."""
        shapes = self._shapes.get(batch)
        if shapes is None:
            if len(self._shapes) >= 64:  # a bound for callers that sweep many batches
                self._shapes.clear()
            shapes = (tuple(spec.concrete(batch) for spec in self.input_specs),
                      tuple(spec.concrete(batch) for spec in self.output_specs))
            self._shapes[batch] = shapes
        return shapes

    def workspace_size(self, batch: int) -> int:
        return int(self.library.workspace_size(batch))

    def batch_of(self, shapes: list[tuple[int, ...]]) -> int:
        """The batch that makes the input specs match ``shapes`` (1 for a static graph)."""
        if self.static:
            return 1
        for spec, shape in zip(self.input_specs, shapes, strict=False):
            for size, actual in zip(spec.shape, shape, strict=False):
                if not isinstance(size, int):
                    batch = solve_batch(size, actual)
                    if batch is not None:
                        return batch
                    raise SolInputError(f"input {spec.name!r}: a dim of size {actual} does not fit {size} for any batch")
        return 1

    # -- calls -------------------------------------------------------------
    def prepare(self, param_ptrs: list[int]) -> None:
        """Recompute the derived parameters (e.g. folded BatchNorm weights) from the current parameters."""
        self._check_count("parameter", param_ptrs, len(self.param_names))
        params = pointer_array(param_ptrs)
        with self._lock:
            self._raise_status(self.library.prepare(self._derived_ptr, params, 1))
            self.prepared = True

    def run(self, input_ptrs: list[int], param_ptrs: list[int] | ctypes.Array[ctypes.c_void_p],
            output_ptrs: list[int], batch: int) -> None:
        """One inference on tensors given by address (validated shapes/dtypes are the caller's job).

        ``param_ptrs`` may be a ctypes ``c_void_p`` array the caller keeps between
        calls (built from checked, non-NULL pointers, and prepared): a model with
        a hundred parameters then pays no per-call conversion for them.

        This runs once per inference, after milliseconds in generated code have left
        the interpreter's caches cold (a Python operation then costs up to 10x its
        warm time; docs/debugging.md, "Time outside the Clusters"): the checks are
        C-level (len, all) and error messages are built only when a check fails.
        """
        if len(input_ptrs) != len(self.input_specs) or not all(input_ptrs):
            self._check_count("input", input_ptrs, len(self.input_specs))
        if isinstance(param_ptrs, ctypes.Array):
            if len(param_ptrs) != self._param_slots:
                raise SolInputError(f"model {self.graph.name!r} takes {len(self.param_names)} parameter pointers, "
                                    f"got an array of {len(param_ptrs)}")
            params = param_ptrs
        else:
            self._check_count("parameter", param_ptrs, len(self.param_names))
            if not self.prepared:
                self.prepare(param_ptrs)
            params = pointer_array(param_ptrs)
        if len(output_ptrs) != len(self.output_specs) or not all(output_ptrs):
            self._check_count("output", output_ptrs, len(self.output_specs))
        if not isinstance(batch, int) or batch < 1:
            raise SolInputError(f"batch must be a positive int, got {batch!r}")
        if not self.prepared:
            raise SolInputError(f"model {self.graph.name!r}: call prepare() before run() with a pointer array")
        status = self._execute(input_ptrs, params, output_ptrs, batch)
        if status:
            self._raise_status(status)
        for listener in self.run_listeners:
            listener(self)

    def _execute(self, input_ptrs: list[int], params: ctypes.Array[ctypes.c_void_p], output_ptrs: list[int],
                 batch: int) -> int:
        """The forward itself, on checked arguments; returns the generated code's status."""
        with self._lock:
            workspace = self._workspace_ptr if batch == self._workspace_batch else self._grow_workspace(batch)
            return self.library.forward(self._derived_ptr, self._input_array(*input_ptrs), params,
                                        self._output_array(*output_ptrs), workspace, batch)

    def run_numpy(self, inputs: list[np.ndarray], params: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Convenience for tests and tools: numpy in, numpy out (prepares every call)."""
        if len(inputs) != len(self.input_specs):
            raise SolInputError(f"model {self.graph.name!r} takes {len(self.input_specs)} inputs, got {len(inputs)}")
        arrays = [np.asarray(a, order="C") for a in inputs]
        batch = self.batch_of([a.shape for a in arrays])
        for spec, a in zip(self.input_specs, arrays, strict=True):
            if a.shape != spec.concrete(batch) or str(a.dtype) != spec.dtype:
                raise SolInputError(f"input {spec.name!r} must be {spec.dtype}{list(spec.concrete(batch))} "
                                    f"(batch {batch}), got {a.dtype}{list(a.shape)}")
        missing = [n for n in self.param_names if n not in params]
        if missing:
            raise SolInputError(f"parameters missing: {', '.join(missing)}")
        plist = []
        for name in self.param_names:
            t = self.graph.params[name]
            p = np.asarray(params[name], dtype=t.dtype, order="C")  # 0-d stays 0-d
            if p.shape != t.concrete_shape(batch):
                raise SolInputError(f"parameter {name!r} must have shape {list(t.shape)}, got {list(p.shape)}")
            plist.append(p)
        outputs = [np.empty(spec.concrete(batch), dtype=spec.dtype) for spec in self.output_specs]
        param_ptrs = [p.ctypes.data for p in plist]
        self.prepare(param_ptrs)
        self.run([a.ctypes.data for a in arrays], param_ptrs, [o.ctypes.data for o in outputs], batch)
        return outputs

    def profile(self) -> list[tuple[str, float]]:
        """(cluster title, seconds summed over all forward calls) of a model built with ``compiler::profile``."""
        if self.library.profile is None:
            raise SolInputError(f"model {self.graph.name!r} was built without profiling; set "
                                "sol.config['compiler::profile'] = True before sol.optimize")
        import ctypes

        count = int(self.library.profile(None, 0))
        seconds = (ctypes.c_double * max(count, 1))()
        self.library.profile(seconds, count)
        titles = list(getattr(self, "metadata", {}).get("clusters", []))
        titles += [f"cluster {i}" for i in range(len(titles), count)]
        return [(titles[i], float(seconds[i])) for i in range(count)]

    def seed(self, seed: int) -> None:
        self.library.seed(int(seed))

    def native_forward(self, batch: int) -> NativeForward:
        """What a caller in native code needs to run this model's forward itself at ``batch`` (its arguments as
        `run` passes them; it must hold ``lock`` around the call, as `run` does). The workspace stays valid while the
        returned ``workspace_owner`` lives, even after another batch size grew a new one."""
        with self._lock:
            workspace = self._workspace_ptr if batch == self._workspace_batch else self._grow_workspace(batch)
            return NativeForward(ctypes.cast(self.library.forward, ctypes.c_void_p).value or 0, self._derived_ptr,
                                 workspace, self._workspace, self._lock)

    # -- internals -----------------------------------------------------------
    def _grow_workspace(self, batch: int) -> int:
        if batch == self._workspace_batch:  # the usual case: the same batch as the last call
            return self._workspace_ptr
        needed = self.workspace_size(batch)
        if needed > self._workspace_bytes:
            self._workspace, self._workspace_ptr = aligned_buffer(needed)
            self._workspace_bytes = needed
        self._workspace_batch = batch
        return self._workspace_ptr

    def _check_count(self, what: str, pointers: list[int], expected: int) -> None:
        if len(pointers) != expected:
            raise SolInputError(f"model {self.graph.name!r} takes {expected} {what} pointers, got {len(pointers)}")
        if any(not p for p in pointers):
            raise SolInputError(f"a {what} pointer of model {self.graph.name!r} is NULL")

    def _raise_status(self, status: int) -> None:
        if status != 0:
            raise SolInputError(f"model {self.graph.name!r}: {_STATUS.get(status, f'status {status}')}")

    def __repr__(self) -> str:
        return f"<CompiledModel {self.graph.name!r} from {self.library.path}>"

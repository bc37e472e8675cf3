"""Where a compiled graph's parameters live in the PyTorch model, and when they changed.

Parameters stay the framework's tensors: a slot is resolved once per name
and its tensor fetched per call (the user may reassign it). A compiled
model's "prepare" program (derived parameters such as folded BatchNorm
weights) re-runs only when a parameter changed: ``_version`` counts in-place
writes (optimizer steps, load_state_dict) and data_ptr catches reassignment.
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from typing import Any

import torch
from sol.errors import SolError, SolInputError
from sol.runtime.library import pointer_array

from . import native_reader

_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr

#: how many module parameters, buffers and submodules were (re)assigned in this process, anywhere
#: (`module.weight = ...`, ``load_state_dict(assign=True)``, `model.head = ...`), counted by torch's global
#: registration hooks: while it stays, the tensor objects a ParamSlots found last time are still the ones in their
#: modules, and a model's parameter names are the ones found last time
_ASSIGNMENTS = [0]


def _count_assignment(module: torch.nn.Module, name: str, tensor: Any) -> None:
    _ASSIGNMENTS[0] += 1  # returns None: the hook keeps the tensor as assigned


torch.nn.modules.module.register_module_parameter_registration_hook(_count_assignment)
torch.nn.modules.module.register_module_buffer_registration_hook(_count_assignment)
torch.nn.modules.module.register_module_module_registration_hook(_count_assignment)


def assignments() -> int:
    """The current count of module tensor and submodule assignments (see _ASSIGNMENTS)."""
    return _ASSIGNMENTS[0]


class _Arrays:
    """What one compiled model was last called with: the tensors, their versions and addresses, as lists and as
    the ctypes arrays native_reader compares and updates in place."""

    def __init__(self, tensors: list[torch.Tensor], versions: list[int], addresses: list[int]) -> None:
        self.tensors = tensors
        self.versions = versions
        self.addresses = addresses
        self.pointers = pointer_array(addresses)
        self.version_array = (ctypes.c_int64 * max(len(versions), 1))(*versions)
        self.versions_address = ctypes.addressof(self.version_array)
        self.pointers_address = ctypes.addressof(self.pointers)


class ParamSlots:
    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        self.names = list(names)
        self._slots = [self._slot(model, name) for name in names]
        # The dict each tensor lives in (the owner's _parameters or _buffers): reading it directly skips
        # nn.Module.__getattr__, which costs ~1 us per tensor per call. Assignments through the module
        # (`owner.weight = ...`, load_state_dict) update these same dicts, so they stay current.
        self._stores = [self._store(owner, attr) for owner, attr in self._slots]
        self._attrs = [attr for _, attr in self._slots]
        #: every tensor sits in a _parameters/_buffers dict: `live` can map dict.get over them at C speed
        self._mapped = all(store is not None for store in self._stores)
        self._prepared: dict[int, tuple[tuple[int, int], ...]] = {}
        #: per compiled model, its last call whose tensors were all contiguous (see _Arrays; the pointer array is
        #: the one passed to the compiled code)
        self._arrays: dict[int, _Arrays] = {}
        #: False once native_reader could not read one of these tensors (an inference tensor): Python checks then
        self._native = True
        self._keepalive: list[torch.Tensor] = []
        #: (_ASSIGNMENTS when found, the tensors live() found then)
        self._found: tuple[int, list[torch.Tensor]] | None = None

    @staticmethod
    def _slot(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
        owner_path, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_path) if owner_path else model
        if not isinstance(getattr(owner, attr, None), torch.Tensor):
            raise SolError(f"the compiled model needs parameter {name!r}, which the PyTorch model does not have")
        return owner, attr

    @staticmethod
    def _store(owner: torch.nn.Module, attr: str) -> dict[str, Any] | None:
        for store in (owner._parameters, owner._buffers):
            if attr in store:
                return store
        return None

    def live(self) -> list[torch.Tensor]:
        """The framework's tensors themselves (with autograd identity: what gradients attach to)."""
        if self._mapped:
            out = list(map(dict.get, self._stores, self._attrs))
            if not any(map(operator.is_, out, itertools.repeat(None))):  # (not `None in out`: Tensor == None is slow)
                return out
        out = []
        for (owner, attr), store in zip(self._slots, self._stores, strict=True):
            tensor = store.get(attr) if store is not None else None
            out.append(tensor if tensor is not None else getattr(owner, attr))
        return out

    def current(self) -> list[torch.Tensor]:
        """live(), reused while no module tensor was assigned anywhere since (see _ASSIGNMENTS). Right after a
        model run the interpreter's data is out of the CPU caches: the per-call check (lookup, versions,
        addresses) took mnasnet1_0 143 us with the lookup and 88 us without, efficientnet_b0 234 and 158 us
        (medians, alternating; docs/debugging.md, "Time outside the Clusters")."""
        seen = _ASSIGNMENTS[0]
        found = self._found
        if found is not None and found[0] == seen:
            return found[1]
        tensors = self.live()
        # only tensors that sit in _parameters/_buffers dicts: assigning a plain attribute calls no hook
        self._found = (seen, tensors) if self._mapped else None
        return tensors

    def tensors(self) -> list[torch.Tensor]:
        """Detached, contiguous views (copies only where the framework's tensor is not contiguous)."""
        out = []
        for tensor in self.live():
            tensor = tensor.detach()
            out.append(tensor if tensor.is_contiguous() else tensor.contiguous())
        return out

    def native_arrays(self, compiled: Any) -> _Arrays | None:
        """The arrays native_reader checked and ``compiled`` was last prepared with, while they hold the tensors
        found at the current assignment count; None when the Python check (or a copy) served the last call."""
        arrays = self._arrays.get(id(compiled))
        found = self._found
        if arrays is None or found is None or found[1] is not arrays.tensors or not self._native:
            return None
        return arrays

    def assignment_count(self) -> int:
        """The module-tensor assignment count at which `current` last found its tensors (see _ASSIGNMENTS)."""
        return self._found[0] if self._found is not None else -1

    def pointer_array(self, compiled: Any) -> ctypes.Array[ctypes.c_void_p] | list[int]:
        """The parameter pointers of one inference call, prepared; the same ctypes array while nothing changed.

        The per-call work is reading each tensor's version and address (in one C
        call once native_reader is loaded, else in Python); the array is rebuilt
        (and ``compiled`` re-prepared) only when one of them changed.
        A non-contiguous parameter needs a contiguous copy per call: then a plain
        list is returned (and checked by ``compiled.run``), the copies kept alive here.
        """
        tensors = self.current()
        cached = self._arrays.get(id(compiled))
        reader = native_reader.loaded() if self._native else None
        if cached is not None and reader is not None and cached.tensors is tensors:
            changed = reader(tensors, cached.versions_address, cached.pointers_address)
            if changed == 0:
                return cached.pointers
            self._native = changed > 0  # -1: a tensor it cannot read; Python explains or copes
            self._arrays.pop(id(compiled))  # the reader updated the arrays: they no longer say what was prepared
            cached = None
        # map() over C-level getters: ~0.1 us a tensor instead of ~0.7 us for list comprehensions
        # (mobilenet_v2 has 262 parameters and buffers, so this is most of a call's Python time)
        versions = list(map(_VERSION, tensors))
        addresses = list(map(_DATA_PTR, tensors))
        if cached is not None and cached.versions == versions and cached.addresses == addresses:
            return cached.pointers
        contiguous = self.tensors()
        pointers = self.pointers(compiled, contiguous)
        if not pointers or pointers != addresses or 0 in pointers:  # none, copies (never cache temporaries), NULL
            self._arrays.pop(id(compiled), None)
            self._keepalive = contiguous
            return pointers
        arrays = self._arrays[id(compiled)] = _Arrays(tensors, versions, addresses)
        return arrays.pointers

    def pointers(self, compiled: Any, tensors: list[torch.Tensor]) -> list[int]:
        """Pointers for ``compiled``, running its prepare program first when a parameter changed since its last one."""
        pointers = [t.data_ptr() for t in tensors]
        signature = tuple(zip(pointers, (t._version for t in self.live()), strict=True))
        previous = self._prepared.get(id(compiled))
        if previous != signature:
            takes = getattr(compiled, "device_type", "cpu")
            for name, tensor in zip(self.names, tensors, strict=True):
                if tensor.device.type != takes:  # e.g. a model moved to the VE, called with CPU tensors
                    raise SolInputError(f"parameter {name!r} is on {tensor.device}, but the model was called with {takes} "
                                        f"tensors: move the inputs to {tensor.device}, or the model to {takes}")
            if previous is not None and getattr(compiled, "uploads_changed", False):
                # an offloaded model copies only the parameters whose version or address changed (a fine-tuned head
                # does not re-send a frozen backbone)
                compiled.prepare(pointers, changed=[a != b for a, b in zip(previous, signature, strict=True)])
            else:
                compiled.prepare(pointers)
            self._prepared[id(compiled)] = signature
        return pointers

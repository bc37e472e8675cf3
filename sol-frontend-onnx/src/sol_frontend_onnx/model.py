"""`OnnxModel`: what `sol.optimize` returns for an ONNX model -- a callable on numpy arrays.

Conventions follow onnxruntime: ``model.run(output_names, {name: array})``
returns a list of arrays (``output_names=None``: all outputs). Calling the
model directly takes the inputs positionally or by name and returns the
single output array of a one-output model, else a list.

The float initializers are the model's parameters: ``model.params`` maps
their ONNX names to numpy arrays. Assigning an entry (``model.params["fc.weight"]
= w``) re-runs the compiled "prepare" program on the next call; after
changing an array in place, call ``model.params.changed()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
from sol.errors import SolInputError
from sol.runtime.library import pointer_array

from .dtypes import contiguous
from .importer import ImportResult


class Parameters(MutableMapping[str, np.ndarray]):
    """The model's parameters by ONNX name; replacing one marks the compiled model for re-preparation."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._arrays = {name: contiguous(a) for name, a in arrays.items()}
        self.version = 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self._arrays:
            raise SolInputError(f"the model has no parameter {name!r}")
        old = self._arrays[name]
        new = contiguous(value, dtype=old.dtype)
        if new.shape != old.shape:
            raise SolInputError(f"parameter {name!r} has shape {list(old.shape)}, got {list(new.shape)}")
        self._arrays[name] = new
        self.changed()

    def __delitem__(self, name: str) -> None:
        raise SolInputError(f"parameters cannot be removed from a compiled model ({name!r})")

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def changed(self) -> None:
        """Tell the model that parameter values changed in place."""
        self.version += 1


class OnnxModel:
    """A compiled ONNX model (see the module docstring)."""

    def __init__(self, compiled: Any, imported: ImportResult) -> None:
        self.compiled = compiled
        self.input_names: list[str] = list(imported.input_names)
        self.output_names: list[str] = list(imported.output_names)
        self.specialized = dict(imported.specialized)
        self._feeds = list(imported.feeds)
        self.params = Parameters({name: t.data for name, t in imported.graph.params.items()})
        #: positional arguments are exactly the fed inputs, in order
        self._positional = self._feeds == self.input_names
        self._input_dtypes = [np.dtype(spec.dtype) for spec in compiled.input_specs]
        self._output_dtypes = [np.dtype(spec.dtype) for spec in compiled.output_specs]
        #: (the Parameters object, its version, the ctypes pointer array) of the last prepare
        self._prepared: tuple[Parameters, int, Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | list[np.ndarray]:
        if not kwargs and len(args) == len(self._feeds) and self._positional and not self.specialized:  # model(x)
            outputs = self._infer(args)
            return outputs[0] if len(outputs) == 1 else outputs
        if len(args) > len(self.input_names):
            raise SolInputError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                f"got {len(args)}")
        feed = dict(zip(self.input_names, args, strict=False))
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise SolInputError(f"the model has no input {name!r}; its inputs are {self.input_names}")
            if name in feed:
                raise SolInputError(f"input {name!r} given twice")
            feed[name] = value
        outputs = self.run(None, feed)
        return outputs[0] if len(outputs) == 1 else outputs

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]) -> list[np.ndarray]:
        """onnxruntime's ``InferenceSession.run``: the requested outputs (all for None) as a list."""
        missing = [n for n in self.input_names if n not in input_feed]
        if missing:
            raise SolInputError(f"inputs missing: {', '.join(missing)}")
        for name, expected in self.specialized.items():
            if not np.array_equal(np.asarray(input_feed[name]), expected):
                raise SolInputError(f"the value of input {name!r} was fixed when the model was optimized (it decides "
                                    f"shapes); optimize again with the new value {np.asarray(input_feed[name]).tolist()}")
        outputs = self._infer([input_feed[name] for name in self._feeds])
        if output_names is None:
            return outputs
        by_name = dict(zip(self.output_names, outputs, strict=True))
        unknown = [n for n in output_names if n not in by_name]
        if unknown:
            raise SolInputError(f"the model has no outputs {unknown}; its outputs are {self.output_names}")
        return [by_name[n] for n in output_names]

    def _infer(self, values: Sequence[Any]) -> list[np.ndarray]:
        """One inference on the values of ``self._feeds`` (in that order); new output arrays.

        Per-call work is kept to a few C-level operations (see CompiledModel.run): what does not
        change between calls (dtypes, shapes per batch, the parameter pointer array) is cached.
        """
        arrays = list(values)
        for index, (value, dtype) in enumerate(zip(arrays, self._input_dtypes, strict=True)):
            if type(value) is not np.ndarray or value.dtype != dtype or not value.flags.c_contiguous:
                arrays[index] = self._array(index, value)
        compiled = self.compiled
        batch = compiled.batch_of([a.shape for a in arrays])
        input_shapes, output_shapes = compiled.shapes(batch)
        for index, (a, shape) in enumerate(zip(arrays, input_shapes, strict=True)):
            if a.shape != shape:
                raise SolInputError(f"input {self._feeds[index]!r} must have shape {list(shape)} (batch {batch}), "
                                    f"got {list(a.shape)}")
        outputs = [np.empty(shape, dtype) for shape, dtype in zip(output_shapes, self._output_dtypes, strict=True)]
        compiled.run([a.ctypes.data for a in arrays], self._param_array(), [o.ctypes.data for o in outputs], batch)
        return outputs

    def _param_array(self) -> Any:
        """The parameter pointers as a ctypes array, the compiled model prepared for them.

        Built once and reused while ``self.params`` is the same object at the same version: its
        arrays are replaced only through ``__setitem__`` (which bumps the version), so the pointers
        cannot change without it, and reading 100 ``ndarray.ctypes.data`` per call costs ~100 us.
        """
        params, prepared = self.params, self._prepared
        if prepared is not None and prepared[0] is params and prepared[1] == params.version:
            return prepared[2]
        version = params.version
        param_ptrs = [params[name].ctypes.data for name in self.compiled.param_names]
        self.compiled.prepare(param_ptrs)
        self._prepared = (params, version, pointer_array(param_ptrs))
        return self._prepared[2]

    def _array(self, index: int, value: Any) -> np.ndarray:
        """Input ``index`` as a C-contiguous array of its dtype (the slow path: _infer passes such arrays on)."""
        array = contiguous(value)
        if array.dtype != self._input_dtypes[index]:
            raise SolInputError(f"input {self._feeds[index]!r} must be {self.compiled.input_specs[index].dtype}, "
                                f"got {array.dtype}")
        return array

    def __repr__(self) -> str:
        return f"<OnnxModel {self.compiled.graph.name!r}: {self.input_names} -> {self.output_names}>"

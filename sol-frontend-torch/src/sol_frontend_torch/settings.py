"""The PyTorch frontend's settings (``sol.config`` keys).

Defined apart from the code that uses them because the plugin loader reads
them at ``sol.optimize`` time for every model: this module must not import
torch (1.3 s), which an ONNX-only process never needs.
"""

from __future__ import annotations

from sol.records import ConfigKey

#: this frontend's name (``sol.frontends`` entry point, ``TorchFrontend.name``): the key of ``Backend.framework_devices``
FRONTEND_NAME = "pytorch"

READER_KEY = ConfigKey("pytorch::native_reader", bool, True,
                       "Check a PyTorch model's parameters for changes before each call with a small compiled helper "
                       "(built once per torch version, in the foreground by the first sol.optimize that lacks it) instead of Python: 8 us instead of "
                       "80-160 us for MobileNetV2's 262 tensors.")

FAST_CALL_KEY = ConfigKey("pytorch::fast_call", bool, True,
                          "Run a plain inference call (one float32 CPU tensor in and out, autograd off, no autocast) "
                          "in one C++ function of the same helper, without the Python steps between the checks and "
                          "the forward (fast_call.py): resnet18 1.10x, the transformer encoder 1.20x in bf16.")

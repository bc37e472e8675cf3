"""SOL's ONNX frontend."""

__version__ = "0.1.0"

"""Automatic differentiation of SOL Graphs: training forward + backward, both compiled like inference."""

from .derive import Saved, TrainingGraphs, copy_graph, derive

__all__ = ["Saved", "TrainingGraphs", "copy_graph", "derive"]

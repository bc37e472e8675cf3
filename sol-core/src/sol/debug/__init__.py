"""Seeing inside SOL: per-Cluster time tables, graphs, memory plots, progress and profiles.

One module per job: `table` (per-Cluster records and their text table),
`profile` (`sol.profile` and the chrome trace), `graphviz` (the network as a
DOT graph), `memory_plot` (live memory over the schedule), `progress` (the
compile progress bar), `artifacts` (what ``compiler::debug`` writes and prints
per compiled model).
"""

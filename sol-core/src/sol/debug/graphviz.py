"""The planned network as a GraphViz graph: layers, Clusters as boxes, the device around them.

Nodes are the layers the plan runs (including the copies and layout reorders
planning inserts, which the framework's graph does not have), the model's
inputs and outputs; parameters and constants are left out because they would
outnumber the layers. Every non-alias forward Cluster is a subgraph named
``cluster_main_<i>`` with ``i`` its position in the forward program, the same
index as in the time table and `sol.profile`. The prepare program (derived
parameters, e.g. folded BatchNorm weights; it runs only when parameters
change) is drawn only on request, as ``cluster_prepare_<i>`` boxes: in a
network with BatchNorm it has more layers than the forward program and
would bury it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .. import log
from ..codegen.cluster import Cluster
from ..codegen.plan import Plan
from ..ir import Layer, Tensor

_log = log.get("debug")

# subgraph attributes are statements: separated by ";" (a "," is a syntax error there)
_DNN_STYLE = 'style="rounded,filled"; fillcolor="#dbe9f6"; color="#3b73b9";'
_DFP_STYLE = 'style="rounded,filled"; fillcolor="#e8f4e1"; color="#4d9a3a";'
_PREPARE_STYLE = 'style="rounded,dashed"; color="#888888";'


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(tensor: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in tensor.shape) + "]"


def _layer_label(layer: Layer) -> str:
    out = f"\n{_shape(layer.outputs[0])}" if layer.outputs else ""
    from ..codegen.source import describe  # lazy: the generator loads every kernel; cached loads import this module

    return f"{layer.name}\n{describe(layer)}{out}"


def cluster_label(index: int, c: Cluster) -> str:
    module = "DNN" if c.dnn is not None else "DFP"
    return f"#{index} {c.anchor.name} ({module})"


def to_dot(the_plan: Plan, device: str, prepare: bool = False) -> str:
    """The DOT text of ``the_plan`` as run on ``device`` (e.g. ``"x86:0"``); ``prepare``: draw that program too."""
    programs = the_plan.programs
    node_of: dict[int, str] = {}  # layer id -> node id
    producer: dict[int, str] = {}  # tensor id -> node id of the layer (or input) that makes it
    body: list[str] = []
    counter = 0

    def add_layers(layers: list[Layer], indent: str) -> None:
        nonlocal counter
        for layer in layers:
            node = f"L{counter}"
            counter += 1
            node_of[id(layer)] = node
            body.append(f"{indent}{node} [label={_quote(_layer_label(layer))}];")
            for t in layer.outputs:
                producer[id(t)] = node

    for i, t in enumerate(the_plan.graph.inputs):
        producer[id(t)] = f"I{i}"
        label = _quote("input " + t.name + "\n" + _shape(t))
        body.append(f'    I{i} [label={label}, shape=oval, style=filled, fillcolor="#fff2cc"];')
    drawn = [("prepare", programs.prepare)] if prepare else []
    for program, clusters in [*drawn, ("main", programs.main)]:
        index = 0
        for c in clusters:
            if c.alias:  # a free view: drawn, but it is no cluster and runs no code
                add_layers(c.layers, "    ")
                body[-1] = body[-1][:-2] + ", style=dashed];"
                continue
            style = _PREPARE_STYLE if program == "prepare" else _DNN_STYLE if c.dnn is not None else _DFP_STYLE
            label = f"prepare #{index}" if program == "prepare" else cluster_label(index, c)
            body.append(f"    subgraph cluster_{program}_{index} {{")
            body.append(f"      label={_quote(label)}; {style}")
            add_layers(c.layers, "      ")
            body.append("    }")
            index += 1
    edges: list[str] = []
    for c in [*(programs.prepare if prepare else []), *programs.main]:
        for layer in c.layers:
            for t in layer.inputs:
                source = producer.get(id(t))
                if source is not None and source != node_of[id(layer)]:
                    edges.append(f"    {source} -> {node_of[id(layer)]};")
    for i, t in enumerate(programs.outputs):
        label = _quote("output " + t.name + "\n" + _shape(t))
        body.append(f'    O{i} [label={label}, shape=oval, style=filled, fillcolor="#fce4d6"];')
        if id(t) in producer:
            edges.append(f"    {producer[id(t)]} -> O{i};")
    # the plan summary is one long sentence: one clause per line keeps the graph as wide as the network
    title = f"SOL: {the_plan.graph.name} on {device}\n" + the_plan.summary().replace("; ", "\n")
    if not prepare and programs.prepare:
        title += "\n(the prepare program of the derived parameters is not drawn)"
    header = [f"digraph {_quote(the_plan.graph.name)} {{",
              "  rankdir=TB;",
              '  node [shape=box, style=rounded, fontname="Helvetica", fontsize=10];',
              '  edge [color="#555555"];',
              f"  label={_quote(title)};",
              '  labelloc=t; fontname="Helvetica";',
              f"  subgraph {_quote('cluster_device_' + device)} {{",
              f"    label={_quote('device ' + device)}; style=solid; color=\"#aaaaaa\";"]
    return "\n".join([*header, *body, *dict.fromkeys(edges), "  }", "}", ""])


def write_dot(the_plan: Plan, device: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_dot(the_plan, device))
    return path


def render(dot_file: Path, formats: tuple[str, ...] = ("svg", "png")) -> list[Path]:
    """Render ``dot_file`` next to itself with GraphViz ``dot``; without ``dot`` a logged note and no files."""
    dot = shutil.which("dot")
    if dot is None:
        _log.warning("GraphViz `dot` is not installed, so %s is not rendered (install graphviz, e.g. "
                     "`apt install graphviz`, or open the .dot file in any GraphViz viewer)", dot_file)
        return []
    rendered = []
    for fmt in formats:
        target = dot_file.with_suffix(f".{fmt}")
        done = subprocess.run([dot, f"-T{fmt}", str(dot_file), "-o", str(target)], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            _log.warning("rendering %s as %s failed: %s", dot_file, fmt, done.stderr.strip()[-500:])
            continue
        rendered.append(target)
    return rendered

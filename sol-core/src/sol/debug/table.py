"""Per-Cluster execution times as records and as a text table.

The records are built from the cluster titles the compiler stores in the
artifact's metadata (``Cluster.title()``: ``"DNN conv1 (conv) -> relu (relu)"``)
so that a model fetched from the cache, whose plan was never computed in this
process, still names its clusters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_DNN_PREFIX = "DNN "


@dataclass(frozen=True)
class ClusterTime:
    """One Cluster of one model and the time its generated code (or library call) took."""

    #: position among the model's forward clusters (the order they run in; the index in the .dot graph)
    index: int
    #: the anchor layer's name, which the cluster is named after
    name: str
    #: the names of the layers it fuses, anchor first
    layers: tuple[str, ...]
    #: their ops, in the same order
    ops: tuple[str, ...]
    #: "DNN" (a library call) or "DFP" (generated depth-first loop code)
    module: str
    seconds: float
    #: seconds / the total of all clusters (0 when nothing was timed)
    share: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layers"], data["ops"] = list(self.layers), list(self.ops)
        return data


def parse_title(title: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(module, layer names, ops) of a ``Cluster.title()``."""
    module = "DNN" if title.startswith(_DNN_PREFIX) else "DFP"
    body = title[len(_DNN_PREFIX):] if module == "DNN" else title
    names: list[str] = []
    ops: list[str] = []
    for part in body.split(" -> "):
        name, _, op = part.rpartition(" (")
        if not name:  # not "name (op)": keep the text as the name
            name, op = part, "?)"
        names.append(name)
        ops.append(op[:-1])
    return module, tuple(names), tuple(ops)


def records(titles: Sequence[str], seconds: Sequence[float]) -> list[ClusterTime]:
    """One record per cluster; ``titles[i]`` and ``seconds[i]`` describe cluster i."""
    total = float(sum(seconds))
    result = []
    for index, (title, spent) in enumerate(zip(titles, seconds, strict=True)):
        module, names, ops = parse_title(title)
        result.append(ClusterTime(index, names[0], names, ops, module, float(spent),
                                  float(spent) / total if total > 0 else 0.0))
    return result


def format_table(rows: Iterable[ClusterTime], title: str = "") -> str:
    """A fixed-width table: #, cluster, module, fused layers, time, share; a total line last."""
    rows = list(rows)
    fused = [", ".join(f"{n} ({o})" for n, o in zip(r.layers, r.ops, strict=True)) for r in rows]
    name_w = max([len("cluster"), *(len(r.name) for r in rows)])
    layers_w = min(max([len("layers"), *(len(f) for f in fused)]), 80)
    header = f"{'#':>3}  {'cluster':<{name_w}}  {'module':<6}  {'layers':<{layers_w}}  {'time ms':>10}  {'share':>6}"
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    for r, text in zip(rows, fused, strict=True):
        shown = text if len(text) <= layers_w else text[: layers_w - 3] + "..."
        lines.append(f"{r.index:>3}  {r.name:<{name_w}}  {r.module:<6}  {shown:<{layers_w}}  "
                     f"{r.seconds * 1e3:>10.3f}  {r.share * 100:>5.1f}%")
    total = sum(r.seconds for r in rows)
    lines += ["-" * len(header),
              f"{'':>3}  {'total':<{name_w}}  {'':<6}  {f'{len(rows)} clusters':<{layers_w}}  {total * 1e3:>10.3f}  "
              f"{100.0 if total > 0 else 0.0:>5.1f}%"]
    return "\n".join(lines)

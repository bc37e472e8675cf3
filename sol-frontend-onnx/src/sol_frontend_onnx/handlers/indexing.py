"""Gathers and one-hot encodings."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ._registry import handler
from ._util import cast, norm_axis, unsqueeze


@handler("Gather")
def gather(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("gather", [x, ctx.need(1)], {"axis": norm_axis(int(ctx.attr("axis", 0)), x.rank)})


@handler("GatherElements")
def gather_elements(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("gather_elements", [x, ctx.need(1)], {"axis": norm_axis(int(ctx.attr("axis", 0)), x.rank)})


@handler("OneHot")
def one_hot(ctx: Any) -> Tensor:
    indices, depth_t, values = ctx.need(0), ctx.need(1), ctx.need(2)
    depth = int(np.asarray(ctx.static(depth_t, "depth")).reshape(-1)[0])
    rank = indices.rank + 1
    axis = norm_axis(int(ctx.attr("axis", -1)), rank)
    index = cast(ctx, indices, "int64")
    # negative indices count from the end of the depth
    negative = ctx.one("lt", [index, ctx.const(np.asarray(0, dtype=np.int64))])
    index = ctx.one("where", [negative, ctx.one("add", [index, ctx.const(np.asarray(depth, dtype=np.int64))]), index])
    positions = np.arange(depth, dtype=np.int64).reshape([depth if d == axis else 1 for d in range(rank)])
    hot = ctx.one("eq", [unsqueeze(ctx, index, [axis]), ctx.const(positions)])
    off = ctx.one("gather", [values, ctx.const(np.asarray(0, dtype=np.int64))], {"axis": 0})
    on = ctx.one("gather", [values, ctx.const(np.asarray(1, dtype=np.int64))], {"axis": 0})
    return ctx.one("where", [hot, on, off])

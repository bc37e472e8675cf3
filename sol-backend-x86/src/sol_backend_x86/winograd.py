"""Which 3x3 convolutions run as SOL's Winograd kernels (glue/sol_winograd.cpp) instead of oneDNN.

oneDNN 3.2 has no Winograd for AVX2, and its direct 3x3 kernels already run
near the cores' peak, so doing fewer multiplications is the one way left to
be faster. Winograd pays for that with input and output transforms and with
larger weights, so it wins on layers with many output tiles and loses on
small images (resnet's 7x7 layer) and thin layers.

Accuracy decides which tile sizes are candidates. F(2x2,3x3) (2.25x fewer
multiplications) is as accurate as a direct convolution in float32 (measured:
max error against float64 0.3-0.7x oneDNN's). F(4x4,3x3) (4x fewer) is not:
its transforms' larger coefficients give 3-5x the mean and 6-16x the max error
of a direct convolution per layer, and through vgg11_bn or wide_resnet50_2 SOL
then lands 2.5-3x further from float64 than eager PyTorch. Other interpolation
points improve that by 1.3x at best (simulated), so F(4x4) is opt-in:
``sol.config["x86::winograd_4x4"] = True`` for models that tolerate it.

The choice per layer: with ``sol.config["autotuning"]`` on, the candidates are
timed at compile time on the layer's shape (through the glue, loaded with
ctypes) and the fastest is kept; timings are cached per (shape, CPU, glue
source), so each shape is timed once per machine. With autotuning off, a
heuristic from those measurements decides. ``x86::winograd`` turns the
kernels off altogether.
"""

from __future__ import annotations

import functools

import sol
from sol.ir import Layer
from sol.records import ConfigKey

from .cpuinfo import read_cpuinfo
from .tuning import (
    DIRECT,
    WINOGRAD_BLOCKS,
    WINOGRAD_PHASES,
    WINOGRAD_SCHEDULE_MASK,
    WINOGRAD_SCHEDULES,
    Tuner,
    post_ops_supported,
)
from .tuning import NAMES as TIMED_NAMES

WINOGRAD_KEY = ConfigKey("x86::winograd", bool, True,
                         "Run eligible 3x3 convolutions (stride 1, no groups) as SOL's Winograd F(2x2,3x3) kernel "
                         "where it is faster than oneDNN (timed at compile time when autotuning is on).")
WINOGRAD_4X4_KEY = ConfigKey("x86::winograd_4x4", bool, False,
                             "Also consider Winograd F(4x4,3x3) (up to 1.25x faster than F(2x2) on 56x56 and 28x28 "
                             "layers); its float32 error is 3-5x (mean) to 6-16x (max) a direct convolution's, so deep "
                             "networks drift further from exact results than eager PyTorch does.")

WINOGRAD_SCHEDULE_KEY = ConfigKey("x86::winograd_schedule", bool, True,
                                  "Time both ways of sharing a Winograd convolution between the threads (each thread "
                                  "its own blocks of tiles, or all threads through each phase) per layer when "
                                  "autotuning; off: pick by the size of the transformed weights.")


def eligible(layer: Layer, post_ops: list[Layer]) -> bool:
    """Whether the Winograd kernel can compute this conv and its fused post-ops (shapes must be static)."""
    if layer.op != "conv" or layer.inputs[0].rank != 4 or layer.attrs.get("trained_params"):
        return False  # trained weights would be re-transformed every step
    a, x, w = layer.attrs, layer.inputs[0], layer.inputs[1]
    if not all(isinstance(s, int) for s in (*x.shape[1:], *w.shape)) or int(w.shape[0]) % 8 != 0:
        return False
    if int(a.get("groups", 1)) != 1 or tuple(w.shape[2:]) != (3, 3):
        return False
    if any(int(s) != 1 for s in a["stride"]) or any(int(d) != 1 for d in a["dilation"]):
        return False
    return post_ops_supported(post_ops)


#: the glue's algorithms (SOL_DNNL_DIRECT, SOL_DNNL_WINOGRAD, SOL_DNNL_WINOGRAD_2X2 in sol_dnnl.h), by name
WINOGRAD_4X4, WINOGRAD_2X2 = 1, 2
NAMES = {a: TIMED_NAMES["conv"][a] for a in (DIRECT, WINOGRAD_4X4, WINOGRAD_2X2)}
C_NAMES = {WINOGRAD_4X4: "SOL_DNNL_WINOGRAD", WINOGRAD_2X2: "SOL_DNNL_WINOGRAD_2X2"}
#: the schedule flags of sol_dnnl.h, ORed onto a tile size
_C_SCHEDULES = {WINOGRAD_BLOCKS: "SOL_DNNL_WINOGRAD_BLOCKS", WINOGRAD_PHASES: "SOL_DNNL_WINOGRAD_PHASES"}


def c_expression(algorithm: int) -> str:
    """The glue's algorithm as generated C: the tile size, ORed with the schedule the tuner chose (if any)."""
    tiles, schedule = algorithm & ~WINOGRAD_SCHEDULE_MASK, algorithm & WINOGRAD_SCHEDULE_MASK
    return C_NAMES[tiles] + (f" | {_C_SCHEDULES[schedule]}" if schedule else "")


def name(algorithm: int) -> str:
    """What the log and the generated code's comments call ``algorithm``."""
    return TIMED_NAMES["conv"][algorithm]


def choose(layer: Layer, post_ops: list[Layer], tuner: Tuner | None) -> int:
    """How ``layer`` runs (DIRECT: oneDNN): timed on this machine (autotuning) or by the heuristic."""
    if not sol.config.get(WINOGRAD_KEY.name, True) or not eligible(layer, post_ops):
        return DIRECT
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    x, w = layer.inputs[0], layer.inputs[1]
    batch = x.shape[0] if isinstance(x.shape[0], int) else 1
    (top, bottom), (left, right) = spatial_padding(layer.attrs["padding"], 2)
    shape = (batch, int(x.shape[2]), int(x.shape[3]), int(w.shape[1]), int(w.shape[0]), top, left, bottom, right)
    if not worth_timing(shape):
        return DIRECT
    allowed = candidates()
    if tuner is not None and sol.config["autotuning"]:
        return fastest(tuner, shape, allowed)
    return heuristic(shape, allowed)


def settings() -> str:
    """What decides the choices of ``choose`` besides the layer (for cache keys of generated code)."""
    use = sol.config.get(WINOGRAD_KEY.name, True)
    tiles = "".join(str(a) for a in sorted(candidates()))
    schedule = int(sol.config.get(WINOGRAD_SCHEDULE_KEY.name, True))
    return (f"winograd {int(use)} {tiles} schedule {schedule} from {MIN_INPUT_CHANNELS[gemm_isa()]}x"
            f"{MIN_OUTPUT_CHANNELS} channels")


def candidates() -> frozenset[int]:
    """The algorithms sol.config allows: oneDNN and F(2x2), and F(4x4) where its accuracy was asked for."""
    if sol.config.get(WINOGRAD_4X4_KEY.name, False):
        return frozenset(NAMES)
    return frozenset({DIRECT, WINOGRAD_2X2})


#: fewer output channels: not a candidate. Timed alone, Winograd wins on DenseNet's 128 -> 32 layers, yet
#: densenet121 ran slower with them (0.83x on AVX2, 0.88-0.91x on AVX-512; paired rounds, docs/x86.md).
MIN_OUTPUT_CHANNELS = 64
#: fewer input channels: not a candidate, by whether the GEMMs run on AVX-512 (sol_winograd.cpp). With it,
#: SqueezeNet's and Inception's thin 3x3 layers (16-48 input channels) pay off in the model: squeezenet1_0 1.064x,
#: googlenet 1.030x, inception_v3 1.022x against a limit of 64. On AVX2 those layers cost squeezenet1_1 8% and
#: googlenet 4% (docs/x86.md).
MIN_INPUT_CHANNELS = {"avx512": 16, "avx2": 64}


@functools.cache
def gemm_isa() -> str:
    """"avx512" where the Winograd GEMMs run on AVX-512F (the glue checks the same flag), else "avx2"."""
    try:
        flags = read_cpuinfo().features("flags")
    except OSError:
        return "avx2"
    return "avx512" if "avx512f" in flags else "avx2"


def worth_timing(shape: tuple[int, ...]) -> bool:
    """Enough work that the transforms could pay off (smaller layers take microseconds either way)."""
    return (_tiles(shape, 4) >= 16 and shape[3] >= MIN_INPUT_CHANNELS[gemm_isa()]
            and shape[4] >= MIN_OUTPUT_CHANNELS)


def heuristic(shape: tuple[int, ...], allowed: frozenset[int] = frozenset(NAMES)) -> int:
    """Enough output tiles and channels to amortize the transforms. Measured on AVX2 with cold caches against
    oneDNN: F(4x4) 1.36x faster at 56x56x64 and 1.6x at 28x28x128, 0.76x at 14x14x256, 3x slower at 7x7x512;
    F(2x2) 1.12x, 1.35x and 1.42x on the first three."""
    if WINOGRAD_4X4 in allowed and _tiles(shape, 4) >= 48 and min(shape[3], shape[4]) >= 16:
        return WINOGRAD_4X4
    if WINOGRAD_2X2 in allowed and _tiles(shape, 2) >= 49 and min(shape[3], shape[4]) >= 32:
        return WINOGRAD_2X2
    return DIRECT


def _tiles(shape: tuple[int, ...], size: int) -> int:
    """size x size output tiles of a (batch, H, W, C, K, pad top, left, bottom, right) convolution."""
    n, h, w, _, _, top, left, bottom, right = shape
    return n * -(-(h + top + bottom - 2) // size) * -(-(w + left + right - 2) // size)


def fastest(tuner: Tuner, shape: tuple[int, ...], allowed: frozenset[int] = frozenset(NAMES)) -> int:
    """The fastest ``allowed`` algorithm for the 3x3 ``shape`` on this machine: oneDNN and each allowed tile size,
    the latter with each schedule (tuning.WINOGRAD_SCHEDULES) unless ``x86::winograd_schedule`` is off. The result
    may carry a schedule flag (see ``c_expression``)."""
    n, h, w, c, k, top, left, bottom, right = shape
    tiles = sorted(allowed - {DIRECT})
    if sol.config.get(WINOGRAD_SCHEDULE_KEY.name, True):
        timed = (DIRECT, *(t | schedule for t in tiles for schedule in WINOGRAD_SCHEDULES))
    else:
        timed = (DIRECT, *tiles)
    return tuner.fastest((n, h, w, c, k, 1, 3, 3, 1, 1, top, left, bottom, right), timed)

"""The predicted cost of a tiling (toolchain/vta/estimate.py) and the default search that
short-lists the whole tiling space by it (toolchain/vta/compile.py)."""

import numpy as np
import pytest

from toolchain.vta.compile import compile_conv2d, compile_dense
from toolchain.vta.config import VTAConfig
from toolchain.vta.estimate import predict, shortlist
from toolchain.vta.schedule import (
    ConvShape,
    ConvTiles,
    DenseShape,
    Tiles,
    candidate_conv_tiles,
)
from toolchain.vta.timing import estimate_cycles, program_cost

RNG = np.random.default_rng(7)
#: weights whose accumulators need 3 byte planes (as ResNet-8's layers under Kiln's PTQ)
W_CONV = RNG.integers(-64, 64, (64, 64, 3, 3), dtype=np.int8)


@pytest.mark.parametrize("shape, tiles, vt, output", [
    (DenseShape(64, 128, 64), Tiles(16, 2, 8, "n"), 2, "int8"),
    (DenseShape(64, 128, 64), Tiles(64, 4, 8), 1, "int32"),
    (DenseShape(24, 80, 48), Tiles(2, 3, 5, "m", True), 3, "int32"),
    (ConvShape(8, 8, 32, 64, 3, 1, 1), ConvTiles(2, 2, 1, "m"), 4, "int8"),
    (ConvShape(16, 16, 16, 32, 3, 2, 1), ConvTiles(4, 1, 1, "n", True), 2, "int32"),
])
def test_prediction_counts_the_built_program(shape, tiles, vt, output) -> None:
    """The predicted instructions are the built program's, and the predicted cycles within
    10 % of its modelled cycles (the search only ranks by them)."""
    if isinstance(shape, DenseShape):
        w = RNG.integers(-64, 64, (shape.k, shape.n), dtype=np.int8)
        layer = compile_dense(w, shape.m, 8, tiles=tiles, vthreads=vt, output=output)
    else:
        w = RNG.integers(-64, 64, (shape.oc, shape.ic, shape.k, shape.k), dtype=np.int8)
        layer = compile_conv2d(w, shape.h, shape.w, 8, stride=shape.s, pad=shape.pad,
                               tiles=tiles, vthreads=vt, output=output)
    tag = f"int32x{layer.planes}" if output == "int32" else "int8"
    p = predict(shape, VTAConfig(), tag, tiles, vt)
    assert p.insns == len(layer.program.insns)
    assert abs(p.cycles - estimate_cycles(layer.program)) <= 0.1 * p.cycles


def test_default_search_finds_the_point_the_analytic_candidates_missed() -> None:
    """ResNet-8's stack3/conv2 (64 -> 64 channels, 3x3, 8x8): the best program_cost of the
    old search's 8 analytic candidates is 12,268; the space's optimum (8 rows, 2 channel
    blocks, 1 input block a step, split n, 2 threads: 12,072) lies outside them. The
    short list of the whole space holds it."""
    shape = ConvShape(8, 8, 64, 64, 3, 1, 1)
    old = candidate_conv_tiles(shape, VTAConfig(), 2, 8)
    old_best = min(program_cost(compile_conv2d(W_CONV, 8, 8, 0, pad=1, output="int32",
                                               tiles=t, vthreads=2).program) for t in old)
    layer = compile_conv2d(W_CONV, 8, 8, 0, pad=1, output="int32", layer="stack3/conv2")
    assert layer.planes == 3
    assert (layer.tiles, layer.vthreads) == (ConvTiles(8, 2, 1, "n"), 2)
    assert layer.tiles not in old
    assert program_cost(layer.program) == 12_072 < old_best == 12_268


def test_default_search_chooses_the_thread_count() -> None:
    """The autoencoder's dense_5 (8 x 128 by 128 x 8): one thread, no double buffering,
    is the cheapest point (758 against 1,034 at 2 threads); ``vthreads=`` pins the count."""
    w = RNG.integers(-64, 64, (128, 8), dtype=np.int8)
    free = compile_dense(w, 8, 0, output="int32")
    pinned = compile_dense(w, 8, 0, output="int32", vthreads=2)
    assert (free.vthreads, pinned.vthreads) == (1, 2)
    assert program_cost(free.program) == 758 < program_cost(pinned.program) == 1_034
    assert free.space.default()["vthreads"] == 1    # declared for the tuner as the default


def test_shortlist_keeps_the_best_predicted_points_in_order() -> None:
    """The lower bound that skips timing a point never drops one that belongs: the list is
    the best ``count`` of the predictions of every point."""
    shape, cfg = ConvShape(8, 8, 64, 64, 3, 1, 1), VTAConfig()
    points = [(ConvTiles(h, c, i, s), vt) for h in (1, 2, 4, 8) for c in (1, 2, 4)
              for i in (1, 2, 4) for s in ("m", "n") for vt in (1, 2)
              if (8 // h if s == "m" else 4 // c) % vt == 0]
    every = sorted(points, key=lambda p: predict(shape, cfg, "int32x3", *p).cost)
    got = shortlist(shape, cfg, "int32x3", points, 5)
    assert [predict(shape, cfg, "int32x3", *p).cost for p in got] == \
        [predict(shape, cfg, "int32x3", *p).cost for p in every[:5]]

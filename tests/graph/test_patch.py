"""Patch-stage geometry and chain detection (toolchain/graph/patch.py).

The geometry is checked against a direct simulation: every output pixel of the chain is
covered by some tile, each tile's span in every tensor is exactly what its layer's window
reads (stride, dilation, padding), and the reference executor run tile by tile on the
spans (padding outside the image) equals the whole-image run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes.fused_op import fused_node
from toolchain.graph.patch import PatchLayer, PatchStage, apply_stage, chains, patch_layer
from toolchain.graph.reference import run_node


def _layer(name: str, c: int, h: int, m: int, k: int, s: int, d: int, pad: int) -> PatchLayer:
    ho = (h + 2 * pad - (k - 1) * d - 1) // s + 1
    return PatchLayer(name, (c, h, h), (m, ho, ho), (k, k), (s, s), (d, d), (pad,) * 4, 0, 4,
                      "NCHW", m * c * k * k)


@pytest.mark.parametrize("grid", [(1, 2), (2, 2), (3, 3), (4, 3), (5, 5)])
@pytest.mark.parametrize("dilation", [1, 2])
def test_tiles_cover_the_output_and_read_their_windows(grid: tuple[int, int],
                                                        dilation: int) -> None:
    layers = (_layer("a", 2, 20, 4, 3, 2, 1, 1), _layer("b", 4, 10, 4, 3, 1, dilation,
                                                        dilation),
              _layer("c", 4, 10, 6, 1, 1, 1, 0))
    stage = PatchStage("p", layers, grid)
    sizes = stage.tile_sizes()
    for axis in (0, 1):
        n = layers[-1].out_shape[1 + axis]
        covered = set()
        for starts in stage.origins(axis):
            covered.update(range(starts[-1], starts[-1] + sizes[-1][axis]))
            for i, layer in enumerate(layers):  # each span is what the next one's window reads
                lo, size = layer.span(axis, starts[i + 1], sizes[i + 1][axis])
                assert (lo, size) == (starts[i], sizes[i][axis])
        assert covered == set(range(n))
    assert stage.macs() >= stage.full_macs()


def _conv_node(name: str, x: Value, m: int, k: int, s: int, pad: int, rng) -> Node:
    c = x.shape[1]
    w = Value.constant(f"{name}_w", rng.standard_normal((m, c, k, k)).astype(np.float32))
    ho = (x.shape[2] + 2 * pad - k) // s + 1
    y = Value(f"{name}_y", (1, m, ho, ho), "float32")
    xi, wi = Value("x", x.shape, "float32"), Value("w", w.shape, "float32")
    yi = Value(f"{name}_y", y.shape, "float32")
    r = Value(f"{name}_r", y.shape, "float32")
    inner = Graph(name, [xi, wi], [r], [
        Node("Conv", "conv", [xi, wi], [yi], {"strides": [s, s], "pads": [pad] * 4,
                                             "kernel_shape": [k, k]}),
        Node("Relu", "relu", [yi], [r])])
    node = fused_node(inner, "complex-out-fusable", [x, w])
    return node


def test_tile_by_tile_equals_the_whole_run() -> None:
    """The reference executor on each tile (the image padded with zeros outside, the
    rows/columns outside each middle tensor zeroed again) equals the whole run."""
    from toolchain.graph.patch import tile_node

    rng = np.random.default_rng(0)
    x = Value("img", (1, 3, 13, 13), "float32")
    a = _conv_node("a", x, 4, 3, 2, 1, rng)
    b = _conv_node("b", a.outputs[0], 5, 3, 1, 1, rng)
    layers = (patch_layer(a), patch_layer(b))
    assert None not in layers
    img = rng.standard_normal(x.shape).astype(np.float32)

    def run(n: Node, v: np.ndarray) -> np.ndarray:
        return run_node(n, [v, *(w.data for w in n.inputs[1:])])[0]

    want = run(b, run(a, img))
    for grid in ((2, 2), (3, 2), (7, 7)):
        stage = PatchStage("p", layers, grid)  # type: ignore[arg-type]
        sizes = stage.tile_sizes()
        got = np.full_like(want, np.nan)
        for ry, rx in itertools.product(stage.origins(0), stage.origins(1)):
            t = np.zeros((1, 3, *sizes[0]), np.float32)
            for i, j in itertools.product(range(sizes[0][0]), range(sizes[0][1])):
                if 0 <= ry[0] + i < 13 and 0 <= rx[0] + j < 13:
                    t[0, :, i, j] = img[0, :, ry[0] + i, rx[0] + j]
            for k, (n, layer) in enumerate(zip((a, b), layers, strict=True)):
                tn, _ = tile_node(n, layer, k, (sizes[k], sizes[k + 1]), "p")  # type: ignore[arg-type]
                t = run(tn, t)
                if k == 0:  # zero what lies outside the middle tensor (b pads with 0)
                    for i, j in itertools.product(range(t.shape[2]), range(t.shape[3])):
                        if not (0 <= ry[1] + i < 7 and 0 <= rx[1] + j < 7):
                            t[0, :, i, j] = 0
            got[0, :, ry[2]:ry[2] + t.shape[2], rx[2]:rx[2] + t.shape[3]] = t[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_chains_end_where_a_tensor_has_two_readers() -> None:
    rng = np.random.default_rng(1)
    x = Value("img", (1, 3, 8, 8), "float32")
    a = _conv_node("a", x, 4, 3, 1, 1, rng)
    b = _conv_node("b", a.outputs[0], 4, 3, 1, 1, rng)
    c = _conv_node("c", b.outputs[0], 4, 1, 1, 0, rng)
    out = Value("out", (1, 4, 8, 8), "float32")
    add = Node("Add", "add", [b.outputs[0], c.outputs[0]], [out])  # b read twice
    g = Graph("g", [x], [out], [a, b, c, add])
    assert [[n.name for n in r] for r in chains(g)] == [["a", "b"], ["c"]]
    assert patch_layer(add) is None
    stage = PatchStage("p", (patch_layer(a), patch_layer(b)), (2, 2))  # type: ignore[arg-type]
    patched = apply_stage(g, stage)
    assert [n.name for n in patched.nodes] == ["p", "c", "add"]
    assert patched.nodes[0].attrs["patch"] is stage
    with pytest.raises(OptionError, match="not consecutive"):
        apply_stage(g, PatchStage("p", (patch_layer(a), patch_layer(c)), (2, 2)))  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="does not fit"):
        PatchStage("p", (patch_layer(a),), (9, 1))  # type: ignore[arg-type]

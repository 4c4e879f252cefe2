"""Default Conv schedule (NCHW[x]c direct) on every CPU target that runs here vs the op
registry's numpy reference (max relative error <= 1e-4), incl. odd, non-divisible shapes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.covering import params
from tests.schedules._cpu_targets import HOST_BACKENDS, RUNNABLE, cross_compile_m4
from toolchain.codegen import get_renderer
from toolchain.graph.ops.registry import get_op
from toolchain.schedules import compile_op, make_node, schedule_for
from toolchain.schedules.generic.common import cpu_params
from toolchain.schedules.generic.conv2d import ConvGeom, pack_weight, plan_conv
from toolchain.target import load_target
from toolchain.tir.transform.pipeline import lower

RTOL = 1e-4

#: (x shape, w shape, attrs)
CASES = [
    ((1, 8, 10, 10), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 11, 9), (5, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((2, 6, 7, 7), (10, 6, 1, 1), {}),
    ((1, 9, 13, 11), (20, 9, 1, 1), {"strides": [2, 2]}),
    ((1, 4, 9, 13), (7, 4, 3, 3), {"dilations": [2, 2]}),
    ((1, 5, 15, 15), (9, 5, 7, 7), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
]


def _run(target, xs, ws, attrs, const_w=True, bias=True, seed=0, backend="c"):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    ins = [xs, w if const_w else ws] + ([b] if bias else [])
    op = compile_op("Conv", target, inputs=ins, attrs=attrs, backend=backend)
    got = op(x)[0] if const_w else op(x, w)[0]
    ref_attrs = {"group": 1, "auto_pad": "NOTSET", **attrs}
    ref = get_op("Conv").reference([x, w] + ([b] if bias else []), ref_attrs)[0]
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert got.shape == ref.shape and err <= RTOL, (op.metadata["info"], err)
    return op


@pytest.mark.parametrize("xs, ws, attrs, target, backend", params(
    [pytest.param(*c, id=f"xs{k}-ws{k}-attrs{k}") for k, c in enumerate(CASES)], RUNNABLE,
    HOST_BACKENDS))
def test_conv_constant_weights(target, xs, ws, attrs, backend) -> None:
    """Every case on every target, each through one of the two backends (both backends meet
    every case and every target: ``tests/covering.py``)."""
    op = _run(target, xs, ws, attrs, backend=backend)
    info = op.metadata["info"]
    pointwise = ws[2:] == (1, 1)
    assert info["schedule"] == ("conv2d_1x1_gemm" if pointwise else "conv2d_nchwc")
    assert info["packed_weight"] is True
    assert op.op_schedule.input_values[1].name.endswith("_matrix" if pointwise else "_packed")


@pytest.mark.parametrize("target", RUNNABLE)
def test_conv_runtime_weights_without_bias(target) -> None:
    op = _run(target, (1, 6, 9, 9), (11, 6, 3, 3), {"pads": [1, 1, 1, 1]}, const_w=False,
              bias=False)
    assert op.metadata["info"]["packed_weight"] is False


def test_conv_parallel_schedule_matches() -> None:
    t = replace(load_target(RUNNABLE[-1]), cores=2)
    op = _run(t, (1, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]})
    assert "parallel" in str(op.op_schedule.schedule.mod)


def test_grouped_conv_falls_back_to_the_generic_schedule() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    op = compile_op("Conv", "c-generic", inputs=[x.shape, w], attrs={"group": 4})
    assert op.metadata["info"]["schedule"] == "generic"
    ref = get_op("Conv").reference([x, w], {"group": 4, "auto_pad": "NOTSET"})[0]
    np.testing.assert_allclose(op(x)[0], ref, rtol=1e-4, atol=1e-5)


def test_plan_and_weight_packing() -> None:
    g = ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
    p512, p256 = plan_conv(g, cpu_params("x86_64-avx512")), plan_conv(g, cpu_params(
        "x86_64-avx2"))
    assert (p512.ob, p512.rw) == (32, 8) and (p256.ob, p256.rw) == (16, 6)
    w = np.arange(3 * 4 * 2 * 2, dtype=np.float32).reshape(3, 4, 2, 2)
    pk = pack_weight(w, p256.__class__(2, 8, 4, 8), 8)
    assert pk.shape == (1, 2, 2, 2, 2, 8)
    # packed[o0, c0, kh, kw, c1, o1] == w[o0*8+o1, c0*2+c1, kh, kw]; padded channels are 0
    assert pk[0, 1, 1, 0, 1, 2] == w[2, 3, 1, 0] and pk[0, 0, 0, 0, 0, 5] == 0


def test_cortex_m4_conv_cross_compiles(tmp_path) -> None:
    node = make_node("Conv", [(1, 4, 8, 8), np.ones((6, 4, 3, 3), np.float32)],
                     {"pads": [1, 1, 1, 1]})
    s = schedule_for(node, "cortex-m4")
    cross_compile_m4(get_renderer("c", openmp=False).render(lower(s.schedule)).code, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("target", RUNNABLE)
@pytest.mark.parametrize("xs, ws", [
    ((1, 32, 10, 10), (32, 32, 3, 3)),
    ((1, 32, 13, 11), (40, 32, 3, 3)),
    ((2, 32, 7, 9), (33, 32, 3, 3)),
])
def test_winograd_is_chosen_and_matches(target, xs, ws) -> None:
    from toolchain.schedules.generic.winograd import winograd_tile

    n, c, h, w = xs
    m = winograd_tile(ConvGeom(n, c, h, w, ws[0], 3, 3, h, w, 1, 1, 1, 1, 1, 1),
                      cpu_params(target))
    assert m == 2
    op = _run(target, xs, ws, {"pads": [1, 1, 1, 1]})
    assert op.metadata["info"]["schedule"] == f"conv2d_winograd_f{m}"
    assert op.op_schedule.input_values[1].name.endswith(f"_winograd{m}")


def test_forced_tile() -> None:
    from toolchain.schedules.generic.winograd import forced_tile

    def g(c, k=3, s=1):
        return ConvGeom(1, c, 9, 9, 8, k, k, 9 // s, 9 // s, s, s, 1, 1, 1, 1)

    assert forced_tile(g(8), "winograd4") == 4 and forced_tile(g(8), "winograd2") == 2
    assert forced_tile(g(1024), "winograd4") == 2      # F(4x4) accuracy limit
    assert forced_tile(g(8, s=2), "winograd2") is None and forced_tile(g(8, k=5),
                                                                       "winograd4") is None


@pytest.mark.parametrize("algorithm", ["direct", "winograd2", "winograd4"])
def test_algorithm_override(monkeypatch, algorithm) -> None:
    from toolchain.schedules.generic import conv2d as cpu_conv2d

    monkeypatch.setattr(cpu_conv2d, "ALGORITHM", algorithm)
    op = _run(RUNNABLE[-1], (1, 16, 9, 9), (16, 16, 3, 3), {"pads": [1, 0, 1, 2]})
    want = "conv2d_nchwc" if algorithm == "direct" else f"conv2d_winograd_f{algorithm[-1]}"
    assert op.metadata["info"]["schedule"] == want


def test_winograd_rule() -> None:
    from toolchain.schedules.generic.winograd import winograd_tile

    p = cpu_params("x86_64-avx512")

    def g(c, hw, o=64, k=3, s=1):
        return ConvGeom(1, c, hw, hw, o, k, k, hw // s, hw // s, s, s, 1, 1, 1, 1)

    # F(2x2) wherever it applies with >= 32 channels (F(4x4) only when forced)
    assert [winograd_tile(g(c, hw, o=c), p) for c, hw in [(64, 56), (128, 28), (256, 14),
                                                           (512, 7), (1024, 28)]] == [2] * 5
    assert winograd_tile(g(32, 16, o=32), p) == 2
    assert winograd_tile(g(16, 32, o=16), p) is None   # transforms dominate
    assert winograd_tile(g(64, 32, o=16), p) is None   # few output channels too
    assert winograd_tile(g(8, 56), p) is None
    assert winograd_tile(g(64, 4), p) is None          # 4 tiles would fill a quarter vector
    assert winograd_tile(g(64, 56, s=2), p) is None and winograd_tile(g(64, 56, k=5), p) \
        is None


@pytest.mark.slow
@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("ws", [(16, 16, 3, 3), (16, 16, 1, 1), (16, 16, 5, 5)])
def test_x86_code_compiles_warning_free_with_the_target_flags(target, ws) -> None:
    """Always built (loading needs no AVX-512); run only where the CPU has it."""
    w = np.ones(ws, np.float32)
    op = compile_op("Conv", target, inputs=[(1, 16, 12, 12), w, np.ones(16, np.float32)],
                    attrs={"pads": [ws[2] // 2] * 4},
                    extra_flags=["-Wall", "-Wextra", "-Werror"])
    flags = op.metadata["build"]["flags"]
    assert f"-march={load_target(target).arch}" in flags and "-Werror" in flags


@pytest.mark.parametrize("target", RUNNABLE)
@pytest.mark.parametrize("xs, ws, dl, ol, kl, attrs", [
    ((1, 32, 14, 14), (64, 32, 3, 3), "NCHW16c", "NCHW16c", "OIHW16i16o", {"pads": [1] * 4}),
    ((1, 16, 9, 11), (16, 16, 3, 3), "NCHW8c", "NCHW8c", "OIHW8i8o",
     {"pads": [1] * 4, "strides": [2, 2]}),
    ((1, 3, 15, 15), (32, 3, 3, 3), "NCHW", "NCHW16c", "OIHW3i16o",
     {"pads": [1] * 4, "strides": [2, 2]}),
    ((1, 16, 10, 10), (8, 16, 3, 3), "NCHW16c", "NCHW", "OIHW16i8o", {"pads": [1] * 4}),
    ((1, 6, 8, 8), (10, 6, 3, 3), "NHWC", "NHWC", "OHWI", {"pads": [1] * 4}),
    ((1, 16, 12, 10), (16, 16, 3, 3), "NHWC", "NHWC", "OHWI", {"pads": [1] * 4}),
    ((1, 16, 12, 12), (32, 16, 3, 3), "NCHW8c", "NCHW16c", "OIHW8i16o", {"pads": [1] * 4}),
    # outputs in blocks narrower than an AVX-512 vector: a tile of that many lanes
    ((1, 16, 12, 12), (8, 16, 1, 1), "NCHW16c", "NCHW8c", "OIHW16i8o", {}),
    ((1, 3, 15, 15), (8, 3, 3, 3), "NCHW3c", "NCHW8c", "OIHW3i8o",
     {"pads": [0, 0, 1, 1], "strides": [2, 2]}),
    ((1, 16, 6, 10), (24, 16, 3, 3), "NCHW16c", "NCHW8c", "OIHW16i8o", {"pads": [1] * 4}),
    # small images: tiles of several output rows (3 x 3 and 2 x 6 pixels)
    ((1, 32, 3, 3), (48, 32, 1, 1), "NCHW16c", "NCHW16c", "OIHW16i16o", {}),
    ((1, 16, 6, 6), (32, 16, 3, 3), "NCHW16c", "NCHW16c", "OIHW16i16o", {"pads": [1] * 4}),
    # Winograd (>= 32 channels) into the other output layouts
    ((1, 32, 8, 6), (32, 32, 3, 3), "NHWC", "NHWC", "OHWI", {"pads": [1] * 4}),
    ((1, 32, 10, 10), (40, 32, 3, 3), "NCHW16c", "NCHW", "OIHW16i8o", {"pads": [1] * 4}),
])
def test_layout_conv(target, xs, ws, dl, ol, kl, attrs) -> None:
    import toolchain.graph.passes  # noqa: F401 - registers LayoutConv
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.passes.layout_ops import from_layout, kernel_to_layout, to_layout

    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    ref = get_op("Conv").reference([x, w, b], {"group": 1, "auto_pad": "NOTSET", **attrs})[0]
    xl = to_layout(x, dl)
    node = Node("LayoutConv", "lc", [Value("x", xl.shape, "float32"),
                                     Value.constant("w", kernel_to_layout(w, kl)),
                                     Value.constant("b", b)],
                [Value("y", to_layout(ref, ol).shape, "float32")],
                {**attrs, "data_layout": dl, "out_layout": ol, "kernel_layout": kl})
    op = compile_op(node, target)
    got = from_layout(op(xl)[0], ol)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= RTOL, (op.metadata["info"], err)
    lanes = cpu_params(target).lanes("float32")
    if ws[2:] == (3, 3) and "strides" not in attrs and min(xs[1], ws[0]) >= 32:
        assert op.metadata["info"]["schedule"].startswith("conv2d_winograd")
    elif dl == ol == f"NCHW{lanes}c" or (ol == "NCHW8c" and lanes >= 8):
        assert op.metadata["info"]["direct_out"] is True
        if xs[3] < 8 and lanes == 16:
            assert op.metadata["info"]["ry"] == {3: 3, 6: 2}[xs[3]]
        assert 'T.block("conv_out")' not in str(op.op_schedule.schedule.mod)  # in write-back


@pytest.mark.parametrize("ks, pads, packs", [(1, [0] * 4, False), (3, [1] * 4, True)])
def test_layout_conv_reads_a_blocked_input_in_place_or_packs_it_by_vectors(ks, pads,
                                                                           packs) -> None:
    """A 1x1 conv on an input already in its channel blocks has no pack stage; a padded
    one packs whole channel-block vectors (no per-element select: the padding is a select
    of whole vectors, by a condition the same for every lane)."""
    import toolchain.graph.passes  # noqa: F401 - registers LayoutConv
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.passes.layout_ops import from_layout, kernel_to_layout, to_layout
    from toolchain.tir.schedule import state as st

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 6, 8)).astype(np.float32)
    w = rng.standard_normal((16, 32, ks, ks)).astype(np.float32)
    ref = get_op("Conv").reference([x, w], {"group": 1, "auto_pad": "NOTSET", "pads": pads})[0]
    node = Node("LayoutConv", "lc", [Value("x", (1, 2, 6, 8, 16), "float32"),
                                     Value.constant("w", kernel_to_layout(w, "OIHW16i16o"))],
                [Value("y", (1, 1, 6, 8, 16), "float32")],
                {"pads": pads, "data_layout": "NCHW16c", "out_layout": "NCHW16c",
                 "kernel_layout": "OIHW16i16o"})
    op = compile_op(node, "x86_64-avx512" if "x86_64-avx512" in RUNNABLE else RUNNABLE[-1])
    mod = op.op_schedule.schedule.mod
    assert ("data_pack" in st.block_names(mod)) == packs
    got = from_layout(op(to_layout(x, "NCHW16c"))[0], "NCHW16c")
    assert np.abs(got - ref).max() / np.abs(ref).max() <= RTOL
    if packs:  # one vector store a pixel (a select of a lane-invariant condition), no
        # element-wise store
        src = op.module.source
        assert "*(float32x16_u*)(data_pack + " in src and "data_pack[c" not in src

"""Float32 Cortex-M convolutions (toolchain/schedules/cortex_m/fp32.py): built for the host,
equal to the reference within float rounding, free of whole-tensor scratch, and correct
when they say they may write over their input and do."""

from __future__ import annotations

import numpy as np
import pytest

from tests.schedules._cpu_targets import run_aliased
from toolchain.codegen import get_renderer
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.runtime.build import build
from toolchain.schedules.registry import schedule_for
from toolchain.tir.transform.pipeline import lower

RNG = np.random.default_rng(11)


def _conv(c: int, m: int, k: int | tuple[int, int], stride: int = 1,
          pads: tuple[int, ...] = (0, 0, 0, 0), hw: tuple[int, int] = (7, 6), group: int = 1,
          dilation: int = 1, bias: bool = True, n: int = 1) -> Node:
    kh, kw = (k, k) if isinstance(k, int) else k
    x = Value("x", (n, c, *hw), "float32")
    ins = [x, Value.constant("w", RNG.standard_normal((m, c // group, kh, kw)).astype(np.float32))]
    if bias:
        ins.append(Value.constant("b", RNG.standard_normal(m).astype(np.float32)))
    attrs = {"strides": (stride, stride), "pads": pads, "dilations": (dilation, dilation),
             "group": group}
    node = Node("Conv", "conv", ins, [], attrs)
    t = get_op("Conv").infer(node)[0]
    return node.replace(outputs=(Value("y", t.shape, t.dtype),))


def _reference(node: Node, x: np.ndarray) -> np.ndarray:
    return get_op("Conv").reference([x, *[v.data for v in node.inputs[1:]]], node.attrs)[0]


def _x(node: Node) -> np.ndarray:
    return RNG.standard_normal(node.inputs[0].shape).astype(np.float32)


CASES = [
    dict(c=64, m=64, k=1, hw=(25, 5)),                          # KWS pointwise: 8 lanes
    dict(c=6, m=12, k=1),                                       # 4 lanes, channels change
    dict(c=5, m=7, k=3, pads=(1, 1, 1, 1)),                     # M % 4 != 0: padded lanes
    dict(c=1, m=64, k=(10, 4), stride=2, pads=(4, 1, 5, 1), hw=(49, 10)),  # KWS first conv
    dict(c=3, m=8, k=3, stride=2, pads=(0, 0, 1, 1), hw=(9, 8)),  # TF SAME
    dict(c=4, m=8, k=3, dilation=2, pads=(2, 2, 2, 2), bias=False),
    dict(c=8, m=8, k=1, stride=2, hw=(6, 6)),                   # strided 1x1
    dict(c=3, m=8, k=3, pads=(1, 1, 1, 1), hw=(3, 3), n=3),     # batch 3, odd pixel count
    dict(c=8, m=8, k=3, pads=(1, 1, 1, 1), group=8),            # depthwise, staged plane
    dict(c=4, m=4, k=5, stride=2, pads=(2, 2, 2, 2), group=4, hw=(11, 9)),
    dict(c=3, m=3, k=3, pads=(1, 1, 1, 1), group=3, hw=(70, 66)),  # plane too big: direct
    # acc's loops of extent 1 elided by compute_at (fuzzer seed 234098: a ScheduleError)
    dict(c=1, m=1, k=(3, 1), pads=(2, 0, 1, 0), hw=(3, 8)),     # one output channel
    dict(c=2, m=1, k=3, hw=(5, 5)),
    dict(c=1, m=3, k=1, hw=(4, 4)),                             # a one-step reduction
    dict(c=1, m=1, k=1, hw=(4, 4), bias=False),                 # both
]


@pytest.mark.parametrize("cfg", CASES)
def test_cortex_m_conv_matches_the_reference(cfg: dict) -> None:
    node = _conv(**cfg)
    s = schedule_for(node, "cortex-m4")
    assert s.info["schedule"] in ("conv2d_pixel_rows", "depthwise_plane")
    mod = build(s.schedule, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    x = _x(node)
    out = np.empty(node.outputs[0].shape, np.float32)
    mod(x, *[v.data for v in s.input_values[1:]], out)
    np.testing.assert_allclose(out, _reference(node, x), rtol=1e-4, atol=1e-4)


def test_no_whole_tensor_buffers() -> None:
    """The KWS pointwise layer keeps two pixels' input rows and accumulators (512 B each)
    where the CPU GEMM schedule packs the whole input and keeps the whole product."""
    s = schedule_for(_conv(64, 64, 1, hw=(25, 5)), "cortex-m4")
    code = get_renderer("c", openmp=False).render(lower(s.schedule)).code
    assert "col[128]" in code and "acc[128]" in code
    assert "malloc" not in code and "B_packed" not in code


@pytest.mark.parametrize("cfg", [
    dict(c=64, m=64, k=1, hw=(25, 5)),
    dict(c=12, m=12, k=1, hw=(3, 7), bias=False),
    dict(c=8, m=8, k=3, pads=(1, 1, 1, 1), group=8),
    dict(c=6, m=6, k=5, pads=(2, 2, 2, 2), group=6, hw=(9, 5)),
])
def test_in_place_kernels_are_right_over_their_own_input(cfg: dict) -> None:
    node = _conv(**cfg)
    x = _x(node)
    got, info = run_aliased(node, x)
    assert info["in_place"] == 0
    np.testing.assert_allclose(got, _reference(node, x), rtol=1e-4, atol=1e-4)


def test_the_aliasing_check_can_fail() -> None:
    """A 3x3 convolution run over its own input reads overwritten pixels: it does not say
    in_place, and the result really is wrong."""
    node = _conv(8, 8, 3, pads=(1, 1, 1, 1))
    x = _x(node)
    got, info = run_aliased(node, x)
    assert "in_place" not in info
    assert not np.allclose(got, _reference(node, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", [
    dict(c=6, m=12, k=1),                                       # channels change
    dict(c=8, m=8, k=1, stride=2, pads=(1, 1, 1, 1), hw=(2, 2)),  # same shape, stride 2
    dict(c=3, m=3, k=3, pads=(1, 1, 1, 1), group=3, hw=(70, 66)),  # plane not staged
    dict(c=8, m=8, k=3, pads=(1, 1, 1, 1)),                     # reads neighbours
])
def test_kernels_that_may_not_write_over_their_input_do_not_say_so(cfg: dict) -> None:
    assert schedule_for(_conv(**cfg), "cortex-m4").in_place is None


def test_runtime_weights_keep_the_cpu_schedule() -> None:
    x = Value("x", (1, 4, 6, 6), "float32")
    w = Value("w", (8, 4, 3, 3), "float32")
    node = Node("Conv", "conv", [x, w], [Value("y", (1, 8, 4, 4), "float32")],
                {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1})
    assert schedule_for(node, "cortex-m4").info["schedule"] != "conv2d_pixel_rows"


def test_ds_cnn_fp32_board_arena_is_one_activation() -> None:
    """DS-CNN fp32 as the boards compile it (cortex-m4, NCHW): no kernel keeps scratch,
    every depthwise and pointwise convolution writes over its input, and the first one
    reads the caller's input through a view: the arena is one 64 x 25 x 5 float
    activation (32,000 B; it was 128,512 with the CPU schedules' packed copies)."""
    from dataclasses import replace

    from toolchain.bundle.compiler import build_spec
    from toolchain.target import load_target
    from toolchain.zoo import ZOO

    t = replace(load_target("cortex-m4"), layout="nchw")
    spec = build_spec(ZOO["ds_cnn"].build(), t, progress=False)
    convs = [k for k in spec.kernels if k.node.attrs["graph"].nodes[0].op == "Conv"]
    assert len(convs) == 9 and all(k.source.scratch_bytes == 0 for k in convs)
    assert sum(k.in_place for k in convs) == 8
    assert spec.plan.arena_bytes <= 32_256


@pytest.mark.parametrize("residual", [False, True])
def test_a_fused_tail_keeps_in_place_unless_it_reads_the_input(residual: bool) -> None:
    """conv1x1 -> relu: the relu is inlined where the conv writes, the group may run in
    place; conv1x1 -> add(its own input): the tail reads the input the output would
    overwrite, so it may not."""
    from tests.graph.passes.helpers import GraphBuilder
    from toolchain.graph.passes import fuse
    from toolchain.schedules.generic.fused import schedule_fused

    b = GraphBuilder()
    x = b.input("x", (1, 8, 5, 3))
    pre = b.op("Relu", [x], name="pre")
    c = b.op("Conv", [pre, b.weight("w", (8, 8, 1, 1)), b.weight("b", (8,))], name="c")
    y = b.op("Add", [c, pre], name="add") if residual else b.op("Relu", [c], name="r")
    g = fuse(b.graph([y]))
    (node,) = [n for n in g.nodes if any(i.op == "Conv" for i in n.attrs["graph"].nodes)]
    k = schedule_fused(node, "cortex-m4", bind=True)
    assert (k.in_place is None) == residual

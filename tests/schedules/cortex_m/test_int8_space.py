"""The search space of the Cortex-M int8 DSP convolution (``cm_int8_conv``): the default is
the heuristic, traces round-trip, invalid points are refused, every point is bit-exact with
the integer reference (host build: the portable C of the intrinsics; QEMU: the Arm asm),
records change the generated kernel, and the tuned points count fewer instructions."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.boards.conftest import ANCHORS_GROUP, anchor
from tests.covering import THOROUGH
from tests.schedules._cpu_targets import cross_compile_m4
from tests.schedules.cortex_m.test_int8 import _conv, _qx, _reference, _run_host
from tests.tools import needs
from toolchain.autotune.apply import applying, declared, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.codegen import get_renderer
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target, parse_target
from toolchain.tir.transform.pipeline import lower

COMPACT = "{name: m4-compact, kind: c, extends: cortex-m4, drop_intrinsics: ['dot_q15q15_*']}"

#: (in channels, out channels, kernel, stride, pads, (h, w)): K = 144; pointwise (int8
#: weights by default); K = 576 (rows 576 int16 apart: the straight-line dot's second
#: pointers); an odd width (pairs of the flattened pixel index); stride 2
SHAPES = [
    (16, 16, 3, 1, (1, 1, 1, 1), (6, 8)),
    (8, 8, 1, 1, (0, 0, 0, 0), (4, 6)),
    (64, 4, 3, 1, (1, 1, 1, 1), (4, 4)),
    (4, 8, 3, 1, (1, 1, 1, 1), (5, 7)),
    (6, 10, 3, 2, (1, 1, 1, 1), (9, 8)),
]


def pair_index(pair: tuple[bool, str]) -> int:
    """0, 1 or 2 for the (wide, unroll) pairs (False, loop), (True, loop), (True, full)."""
    return int(pair[0]) + int(pair[1] == "full")


def _space(node, target="cortex-m4"):
    with declared() as seen:
        schedule_for(node, target)
    (space,) = seen
    return space


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    kxk = _space(_conv(16, 16, 3, 1, (1, 1, 1, 1), hw=(6, 8)))
    assert kxk.kind == "cm_int8_conv"
    d = {"unroll": "loop", "zero_point": "im2col"}
    assert kxk.default() == {"wide": True, **d}   # k x k: int16 weights
    pw = _space(_conv(8, 8, 1, 1, (0, 0, 0, 0), hw=(4, 6)))
    assert pw.default() == {"wide": False, **d}   # 1 x 1: int8 weights
    for s in (kxk, pw):
        points = s.valid_points()
        assert len(points) == 6
        for p in points:
            t = s.trace(p)
            assert Trace.from_json(t.to_json()) == t and s.point_of(t) == p
    assert kxk.workload != pw.workload


def test_the_seeds_are_the_instruction_saving_points() -> None:
    """The tuner's first points after the default (the prior, docs/tuning.md): every
    saving knob on; none on a target without the int16-weight dots."""
    node = _conv(16, 16, 3, 1, (1, 1, 1, 1), hw=(6, 8))
    assert _space(node).seed_points()[0] == {"wide": True, "unroll": "full",
                                             "zero_point": "bias"}
    assert _space(node, parse_target(COMPACT)).seed_points() == []
    dw = _conv(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8)
    assert _space(dw).seed_points() == [{"pad": "partitioned", "zero_point": "bias"}]


def test_invalid_points_are_refused_before_building() -> None:
    node = _conv(16, 16, 3, 1, (1, 1, 1, 1), hw=(6, 8))
    s = _space(node)
    with pytest.raises(InvalidPoint, match="straight-line dot"):
        s.check({"wide": False, "unroll": "full", "zero_point": "im2col"})
    with pytest.raises(InvalidPoint):
        with forcing({s.workload: Trace("cm_int8_conv", (("wide", False), ("unroll", "full")))}):
            schedule_for(node, "cortex-m4")
    with pytest.raises(InvalidPoint, match="not one of|choices|zero_point"):
        s.check({"wide": True, "unroll": "loop", "zero_point": "weights"})
    # a target without the int16-weight dots offers int8 weights and the loop only
    compact = _space(node, parse_target(COMPACT))
    assert compact.size == 2
    assert compact.default() == {"wide": False, "unroll": "loop", "zero_point": "im2col"}
    assert compact.workload != s.workload   # the capability is part of the key
    with pytest.raises(InvalidPoint):
        compact.check({"wide": True, "unroll": "loop", "zero_point": "im2col"})


@pytest.mark.parametrize("i", range(len(SHAPES)),
                         ids=[f"c{c}-m{m}-k{k}-s{st}-{h}x{w}" for c, m, k, st, _, (h, w) in SHAPES])
def test_every_point_is_bit_exact_on_the_host(i: int) -> None:
    """Every (weights, unroll) pair on every shape, the zero point's two ways alternating
    from shape to shape (each way meets each shape and each pair; ``KILN_TEST_THOROUGH=1``:
    every point on every shape)."""
    c, m, k, stride, pads, hw = SHAPES[i]
    node = _conv(c, m, k, stride, pads, hw=hw)
    x = _qx(node.inputs[0].shape, "int8")
    want = _reference(node, x)
    s = _space(node)
    ways = ("im2col", "bias")
    tested = set()
    for p in s.valid_points():
        pair = (p["wide"], p["unroll"])
        if not THOROUGH and p["zero_point"] != ways[(i + pair_index(pair)) % 2]:
            continue
        tested.add(pair)
        with forcing({s.workload: s.trace(p)}):
            got, info = _run_host(node, x)
        kind = "q15q15" if p["wide"] else "q15q7"
        assert f"dot_{kind}_2x2x" in info["intrinsic"], (p, info)
        assert info["intrinsic"].endswith("u") == (p["unroll"] == "full"), (p, info)
        np.testing.assert_array_equal(got, want, err_msg=str(p))
    assert len(tested) == 3   # every (weights, unroll) pair, whatever the zero point


DEPTHWISE = [
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8),
    dict(c=8, m=8, k=3, stride=2, pads=(0, 0, 1, 1), group=8, hw=(9, 7)),   # TF SAME
    dict(c=4, m=4, k=5, stride=1, pads=(2, 2, 2, 2), group=4, dtype="uint8"),
    dict(c=6, m=6, k=3, stride=1, pads=(1, 1, 1, 1), group=6, hw=(70, 60)),  # row bands
]


@pytest.mark.parametrize("cfg", DEPTHWISE)
def test_every_depthwise_point_is_bit_exact_on_the_host(cfg) -> None:
    node = _conv(**cfg)
    x = _qx(node.inputs[0].shape, node.inputs[0].dtype)
    want = _reference(node, x)
    s = _space(node)
    assert s.kind == "cm_int8_depthwise" and s.default() == {"pad": "select",
                                                            "zero_point": "im2col"}
    points = s.valid_points()
    assert len(points) == 4
    for p in points:
        t = s.trace(p)
        assert Trace.from_json(t.to_json()) == t
        with forcing({s.workload: t}):
            got, info = _run_host(node, x)
        assert info["intrinsic"] == "cortex-m4.dwconv_q15q7_1x4"
        np.testing.assert_array_equal(got, want, err_msg=str(p))
    with pytest.raises(InvalidPoint):
        s.check({"pad": "rows", "zero_point": "im2col"})


def test_a_partitioned_depthwise_plane_has_no_padding_test() -> None:
    node = _conv(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8)
    s = _space(node)
    code = {}
    for pad in ("select", "partitioned"):
        with forcing({s.workload: s.trace({"pad": pad, "zero_point": "bias"})}):
            op = schedule_for(node, "cortex-m4")
        code[pad] = get_renderer("c", openmp=False).render(
            lower(op.schedule.mod, target=load_target("cortex-m4")), name=None).code
    pad_lines = {k: [ln for ln in v.splitlines() if "pad[" in ln and "= " in ln]
                 for k, v in code.items()}
    def tested(ln: str) -> bool:   # a padding test or a clamped index
        return any(t in ln for t in ("?", "kiln_select", "kiln_max", "kiln_min"))

    assert any(tested(ln) for ln in pad_lines["select"])
    assert pad_lines["partitioned"] and not any(tested(ln) for ln in pad_lines["partitioned"])


def test_records_change_the_generated_kernel(tmp_path) -> None:
    """A record's point replaces the default: int16 weights for a 1 x 1 layer (twice the
    weight bytes) and the straight-line dot, whose Arm build has no dot loop."""
    node = _conv(8, 8, 1, 1, (0, 0, 0, 0), hw=(4, 6))
    s = _space(node)
    base = schedule_for(node, "cortex-m4")
    trace = s.trace({"wide": True, "unroll": "full", "zero_point": "bias"})
    with applying({s.workload: trace}) as applied:
        tuned = schedule_for(node, "cortex-m4")
    assert applied == {s.workload: trace}
    assert base.info["intrinsic"] == "cortex-m4.dot_q15q7_2x2x8"
    assert tuned.info["intrinsic"] == "cortex-m4.dot_q15q15_2x2x8u"
    w_base, w_tuned = base.input_values[1].data, tuned.input_values[1].data
    assert (w_base.dtype, w_tuned.dtype) == (np.int8, np.int16)
    # the zero point (5) folded into the bias: bias - 5 * sum_k w
    w = node.inputs[1].data.astype(np.int64).reshape(8, -1)
    np.testing.assert_array_equal(tuned.input_values[2].data,
                                  base.input_values[2].data - 5 * w.sum(axis=1))
    code = get_renderer("c", openmp=False).render(
        lower(tuned.schedule.mod, target=load_target("cortex-m4")), name=None).code
    assert "kiln_m4_dot_q15q15_2x2x8u_" in code and "smlad %0, %4, %8, %0" in code
    cross_compile_m4(code, tmp_path)


@needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")
def test_the_straight_line_dot_counts_fewer_instructions(tmp_path) -> None:
    """Under QEMU (deterministic counts): the straight-line dot beats its loop and int16
    weights beat int8 ones on a 3 x 3 layer (K = 144) and a pointwise one."""
    from toolchain.autotune.measure import BuildInput
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.tasks import task_of

    for node in (_conv(16, 16, 3, 1, (1, 1, 1, 1), hw=(6, 8)),
                 _conv(32, 32, 1, 1, (0, 0, 0, 0), hw=(4, 6))):
        task = task_of(node, "cortex-m4")
        s = task.space
        points = [{"wide": False}, {"wide": True}, {"wide": True, "unroll": "full"},
                  {"wide": True, "unroll": "full", "zero_point": "bias"}]
        builds = QemuBuilder("cortex-m4", tmp_path).build(
            [BuildInput(task.node, task.target, s.workload, s.trace({**s.default(), **p}))
             for p in points])
        assert [b.error for b in builds] == [None] * 4
        narrow, wide, full, fold = (r.costs[0] for r in QemuRunner("cortex-m4").run(builds))
        assert fold < full < wide < narrow, (narrow, wide, full, fold)


@pytest.mark.slow
@pytest.mark.xdist_group(ANCHORS_GROUP)
@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
@pytest.mark.parametrize("model", ["ds_cnn", "resnet8"])
def test_whole_models_with_the_straight_line_dot_are_bit_exact_on_qemu(model, tmp_path):
    """Every convolution at int16 weights, the straight-line dot (its Arm asm: K = 40 in
    flattened pairs, 64 pointwise, 144, and 576 with the second row pointers on ResNet-8)
    and the zero point in the bias, every depthwise one (DS-CNN) with the partitioned plane
    and the folded zero point: the firmware's integers equal the reference's."""
    import onnx

    from toolchain.autotune.tasks import extract_tasks
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph

    m = anchor(model)  # quantized once a process (the arena and board tests read it too)
    path = tmp_path / f"{model}.onnx"
    onnx.save(m, path)
    points = {"cm_int8_conv": {"wide": True, "unroll": "full", "zero_point": "bias"},
              "cm_int8_depthwise": {"pad": "partitioned", "zero_point": "bias"}}
    tasks = [t for t in extract_tasks(path, "cortex-m4") if t.space.kind in points]
    assert {t.space.kind for t in tasks} == ({"cm_int8_conv"} if model == "resnet8"
                                             else set(points))
    traces = {t.space.workload: t.space.trace(points[t.space.kind]) for t in tasks}
    with applying(traces) as applied:
        bundle, _ = compile_board(path, "qemu-mps2-an386", tmp_path / "fw", name=model)
    assert len(applied) == len(tasks)
    assert "_2x2x144u_" in (bundle / "src" / "kernels.c").read_text() or model == "ds_cnn"
    rng = np.random.default_rng(0)
    (inp,) = m.graph.input
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    inputs = {inp.name: rng.integers(-128, 128, shape).astype(np.int8)}
    run = run_on_qemu(bundle, inputs, timeout=120)
    ref = run_graph(quantize_ops(from_onnx(m)), inputs)
    ints = [k for k in ref if ref[k].dtype.kind in "iu"]
    assert ints
    for k in ints:
        np.testing.assert_array_equal(run.outputs[k], ref[k], err_msg=k)


@pytest.mark.slow
@pytest.mark.xdist_group(ANCHORS_GROUP)
@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
def test_kiln_tune_on_qemu_then_compile_for_the_board_with_the_records(tmp_path, capsys):
    """``kiln tune MODEL --target cortex-m4 --runner qemu`` finds DS-CNN's int8 tasks (the
    convolutions, the depthwise layers and the dense layer), writes instruction counts,
    and ``kiln compile --board qemu-mps2-an386 --records`` builds the tuned kernels (slow:
    8 trials, each a cross build; the dense layer's seed, 4 k a call, beats its default)."""
    import onnx

    from toolchain.autotune.records import load_records
    from toolchain.cli import main

    model = tmp_path / "ds_cnn.onnx"
    onnx.save(anchor("ds_cnn"), model)
    out = tmp_path / "r.jsonl"
    assert main(["tune", str(model), "--target", "cortex-m4", "--runner", "qemu", "--trials",
                 "8", "-o", str(out), "--no-progress"]) == 0
    recs = load_records(out)
    assert {r.space for r in recs} == {"cm_int8_conv", "cm_int8_depthwise", "cm_int8_dense"}
    assert all(r.unit == "instructions" and r.costs for r in recs)
    assert main(["compile", str(model), "--board", "qemu-mps2-an386", "--records", str(out),
                 "-o", str(tmp_path / "fw")]) == 0
    summary = re.search(r"tuning records from .*: 4 of its \d+ tuned workloads serve \d+ "
                        r"kernels of this compile: (\d+) kernels? \(\d+ workloads?\) built "
                        r"with a tuned schedule that differs from the default",
                        capsys.readouterr().out)
    assert summary and int(summary[1]) >= 1  # the dense layer's seed at least
    kernels = (tmp_path / "fw" / "src" / "kernels.c").read_text()
    assert "_2x2x64u_" in kernels
    assert "kiln_m4_dot_s8s8_4x4" in kernels and "kiln_m4_dot_s8s8_4x8" not in kernels

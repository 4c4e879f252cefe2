"""Default CPU schedules of the non-GEMM ops, built and run against the op registry's
numpy reference (max relative error <= 1e-4 for fp32), on c-generic and the host x86
targets, over several shapes including odd ones; plus checks that the schedules do what
docs/performance.md says (vectorize, rfactor, unroll, tile, parallel)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.covering import params
from tests.tools import needs
from tests.topi.util import make_node, rand
from toolchain import te
from toolchain.driver import build, lower
from toolchain.graph.ops import get_op
from toolchain.schedules.generic.ops import CpuConfig, cpu_config, schedule_cpu
from toolchain.schedules.registry import schedule_for
from toolchain.target import TARGETS_DIR
from toolchain.topi.nn.softmax import softmax as topi_softmax
from toolchain.topi.registry import node_compute

I64 = np.int64
F32 = np.float32

#: (op, inputs, attrs, constant input indices, outputs)
CASES: list[tuple] = [
    ("Relu", [rand(3, 37)], {}, (), 1),
    ("Add", [rand(2, 3, 37), rand(37, seed=1)], {}, (), 1),
    ("Add", [rand(2, 3, 1), rand(3, 37, seed=1)], {}, (), 1),
    ("Mul", [rand(4, 1, 5, 6), rand(4, 3, 1, 1, seed=2)], {}, (), 1),
    ("Sigmoid", [rand(129)], {}, (), 1),
    ("Clip", [rand(5, 33), np.array(-0.5, F32), np.array(0.5, F32)], {}, (1, 2), 1),
    ("Where", [rand(3, 17, dtype="bool"), rand(3, 17), rand(17, seed=3)], {}, (), 1),
    ("Cast", [rand(3, 19)], {"to": 6}, (), 1),
    ("ReduceSum", [rand(5, 64), np.array([1], I64)], {"keepdims": 1}, (1,), 1),
    ("ReduceSum", [rand(5, 61), np.array([1], I64)], {"keepdims": 0}, (1,), 1),
    ("ReduceSum", [rand(33, 7), np.array([0], I64)], {"keepdims": 1}, (1,), 1),
    ("ReduceSum", [rand(9, 40), np.array([0], I64)], {"keepdims": 0}, (1,), 1),
    ("ReduceMean", [rand(2, 9, 35), np.array([1], I64)], {"keepdims": 1}, (1,), 1),
    ("ReduceMax", [rand(3, 5, 7), np.array([0, 2], I64)], {"keepdims": 0}, (1,), 1),
    ("ReduceMin", [rand(3, 5, 7), None], {"keepdims": 0}, (), 1),
    ("ArgMax", [rand(6, 37)], {"axis": 1, "keepdims": 1}, (), 1),
    ("ArgMax", [rand(6, 37)], {"axis": 0, "keepdims": 0, "select_last_index": 1}, (), 1),
    ("MaxPool", [rand(1, 3, 13, 13)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (), 1),
    ("MaxPool", [rand(2, 4, 28, 28)], {"kernel_shape": [2, 2], "strides": [2, 2]}, (), 1),
    ("AveragePool", [rand(1, 3, 11, 11)],
     {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, (), 1),
    ("AveragePool", [rand(1, 3, 11, 11)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1,
      "ceil_mode": 1}, (), 1),
    ("GlobalAveragePool", [rand(1, 37, 7, 7)], {}, (), 1),
    ("GlobalMaxPool", [rand(2, 5, 8, 8)], {}, (), 1),
    ("Softmax", [rand(5, 37)], {"axis": -1}, (), 1),
    ("Softmax", [rand(2, 64)], {"axis": -1}, (), 1),
    ("Softmax", [rand(2, 5, 3, 7)], {"axis": 1}, (), 1),
    ("LogSoftmax", [rand(3, 100)], {"axis": -1}, (), 1),
    ("LayerNormalization", [rand(2, 5, 64), rand(64, seed=1), rand(64, seed=2)],
     {"axis": -1}, (), 1),
    ("LayerNormalization", [rand(3, 37), rand(37, seed=1), rand(37, seed=2)], {"axis": -1},
     (), 3),
    ("InstanceNormalization", [rand(2, 3, 5, 7), rand(3, seed=1), rand(3, seed=2)], {}, (), 1),
    ("BatchNormalization", [rand(2, 3, 5, 7), rand(3, seed=1), rand(3, seed=2), rand(3, seed=3),
                            rand(3, seed=4, lo=0.1)], {}, (), 1),
    ("Transpose", [rand(33, 47)], {"perm": [1, 0]}, (), 1),
    ("Transpose", [rand(2, 3, 5, 7)], {"perm": [0, 2, 3, 1]}, (), 1),
    ("Transpose", [rand(2, 40, 5, 36)], {"perm": [0, 3, 2, 1]}, (), 1),
    ("Transpose", [rand(1, 20, 24, 3)], {"perm": [0, 3, 1, 2]}, (), 1),   # 3 planes
    ("Reshape", [rand(2, 3, 5), np.array([5, -1], I64)], {}, (1,), 1),
    ("Flatten", [rand(2, 3, 5)], {"axis": 1}, (), 1),
    ("Concat", [rand(2, 3, 5), rand(2, 4, 5, seed=1)], {"axis": 1}, (), 1),
    ("Split", [rand(4, 7, 5), np.array([2, 3, 2], I64)], {"axis": 1}, (1,), 3),
    ("Slice", [rand(5, 9), np.array([1, 2], I64), np.array([4, 9], I64), np.array([0, 1], I64),
               np.array([1, 2], I64)], {}, (1, 2, 3, 4), 1),
    ("Pad", [rand(2, 3, 5), np.array([0, 1, 2, 0, 1, 1], I64)], {"mode": "constant"}, (1,), 1),
    ("Pad", [rand(2, 3, 5), np.array([0, 1, 2, 0, 1, 1], I64)], {"mode": "reflect"}, (1,), 1),
    ("Gather", [rand(7, 5), np.array([[0, 3], [6, 1]], I64)], {"axis": 0}, (), 1),
    ("Resize", [rand(1, 2, 5, 6), None, np.array([1, 1, 2, 2], F32)], {"mode": "nearest"},
     (2,), 1),
    ("Resize", [rand(1, 2, 5, 6), None, np.array([1, 1, 1.5, 2], F32)], {"mode": "linear"},
     (2,), 1),
    ("Tile", [rand(2, 3), np.array([2, 3], I64)], {}, (1,), 1),
    ("Expand", [rand(3, 1), np.array([2, 3, 5], I64)], {}, (1,), 1),
    # the layout pass's ops (computes registered by toolchain.schedules.generic.fused)
    ("LayoutTransform", [rand(1, 8, 3, 5)], {"src_layout": "NCHW", "dst_layout": "NCHW4c"},
     (), 1),
    ("LayoutTransform", [rand(2, 3, 5, 8)], {"src_layout": "NHWC", "dst_layout": "NCHW4c"},
     (), 1),
    ("LayoutTransform", [rand(2, 2, 3, 5, 4)], {"src_layout": "NCHW4c", "dst_layout": "NHWC"},
     (), 1),
    ("LayoutPool", [rand(1, 2, 9, 9, 4)],
     {"pool": "MaxPool", "layout": "NCHW4c", "kernel_shape": [3, 3], "strides": [2, 2],
      "pads": [1, 1, 1, 1]}, (), 1),
    ("LayoutPool", [rand(1, 9, 9, 5)],
     {"pool": "AveragePool", "layout": "NHWC", "kernel_shape": [2, 2], "strides": [2, 2]},
     (), 1),
    ("LayoutPool", [rand(1, 2, 7, 7, 8)], {"pool": "GlobalAveragePool", "layout": "NCHW8c"},
     (), 1),
]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _host_targets() -> list:
    """c-generic always; the x86 descriptors whose ISA this machine runs."""
    flags = _cpu_flags()
    out = [pytest.param("c-generic", id="c-generic")]
    for name, need in (("x86_64-avx2", "avx2"), ("x86_64-avx512", "avx512f")):
        marks = [pytest.mark.slow] if name == "x86_64-avx2" else []
        if not (TARGETS_DIR / f"{name}.yaml").exists():
            marks.append(pytest.mark.skip(reason=f"targets/{name}.yaml is not there yet"))
        elif need not in flags:
            marks.append(pytest.mark.skip(reason=f"this CPU has no {need}"))
        out.append(pytest.param(name, id=name, marks=marks))
    return out


def check_schedule(case: tuple, target: object, backend: str = "c") -> object:
    """Build ``case`` with its default schedule for ``target`` (through the schedule
    registry for a target name, directly for a CpuConfig) with ``backend`` (``c``: strict
    warnings; ``llvm``: in-process through llvmlite); compare with the reference."""
    op, arrays, attrs, const, n_out = case
    node = make_node(op, arrays, attrs, const, n_out)
    if isinstance(target, CpuConfig):
        nc = node_compute(node)
        sch = schedule_cpu(te.create_prim_func(list(nc.inputs) + list(nc.outputs)), target)
        values = list(nc.input_values)
    else:
        s = schedule_for(node, target)
        assert s.info.get("schedule") == "default_schedule", s.info
        sch, values = s.schedule, list(s.input_values)
    by_value = {id(v): a for v, a in zip(node.inputs, arrays, strict=True) if v is not None}
    feeds = [np.ascontiguousarray(by_value[id(v)]).reshape(v.shape or (1,)) for v in values]
    outs = [np.zeros(v.shape or (1,), np.dtype(v.dtype)) for v in node.outputs]
    if backend == "llvm":
        build(sch, backend="llvm")(*feeds, *outs)
    else:
        build(sch, extra_flags=["-Wall", "-Wextra", "-Werror"])(*feeds, *outs)
    want = get_op(op).reference(list(arrays), dict(attrs))[:n_out]
    for k, (g, w) in enumerate(zip(outs, want, strict=True)):
        g = g.reshape(w.shape)
        assert g.dtype == w.dtype, f"{op} output {k}: {g.dtype} != {w.dtype}"
        if g.dtype.kind == "f":
            err = float(np.abs(g - w).max() / max(1e-6, float(np.abs(w).max()))) if w.size else 0
            assert err <= 1e-4, f"{op} output {k}: max relative error {err:.2e}"
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{op} output {k}")
    return sch


@pytest.mark.parametrize("case,target,backend", params(
    [(k, c) for k, c in enumerate(CASES)], _host_targets(), ["c", "llvm"],
    ids=[lambda kc: f"{kc[1][0]}-{kc[0]}"]))
def test_default_schedule_matches_reference(case: tuple, target: str, backend: str) -> None:
    """Every case on every host target, each through one of the two backends (both
    backends meet every case and every target: ``tests/covering.py``)."""
    check_schedule(case[1], target, backend)


# ReduceSum over axis 0 is left out: its only spatial loop is the vectorized inner one
@pytest.mark.parametrize("case", [c for c in CASES if c[0] in (
    "Softmax", "LayerNormalization", "MaxPool", "Transpose", "Add") or (
        c[0] == "ReduceSum" and list(c[1][1]) == [1])], ids=lambda c: c[0])
def test_parallel_schedule_matches_reference(case: tuple) -> None:
    """With two cores and a tiny threshold every nest runs in parallel; still exact."""
    sch = check_schedule(case, CpuConfig(vector_bits=256, cores=2, parallel_min_work=16))
    assert "T.parallel" in str(sch.mod)


def _sched(op: str, arrays: list, attrs: dict, const: tuple = (),
           cfg: CpuConfig | None = None) -> str:
    nc = node_compute(make_node(op, arrays, attrs, const))
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs))
    return str(lower(schedule_cpu(func, cfg or CpuConfig(vector_bits=512))))


def test_elementwise_is_vectorized_without_fallback() -> None:
    text = _sched("Add", [rand(4, 8, 32), rand(32, seed=1)], {})
    assert "T.Ramp" in text and "vectorize_fallback" not in text
    # a short inner axis is fused with the next one so the vector is full
    text = _sched("Add", [rand(5, 3, 4), rand(5, 3, 4, seed=1)], {},
                  cfg=CpuConfig(vector_bits=128))
    assert "T.Ramp(i0 * 12 + 8, 1, 4)" in text and "//" not in text
    # max has no C vector form: the loop stays scalar under `omp simd`, index still affine
    text = _sched("Relu", [rand(4, 8, 32)], {})
    assert "pragma_simd" in text and "//" not in text


def test_softmax_rows_are_rfactored_and_fused() -> None:
    text = _sched("Softmax", [rand(3, 64)], {"axis": -1})
    assert "softmax_max_rf" in text and "T.Ramp" in text
    assert text.count("for i0 in range(3)") == 1  # every pass over a row under one loop


def test_pool_window_unrolled_and_output_vectorized() -> None:
    text = _sched("MaxPool", [rand(1, 2, 32, 32)], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert text.count("T.max(") == 4  # 2x2 window unrolled
    assert "T.Ramp" in text or "pragma_simd" in text


def test_outer_reduction_vectorizes_the_kept_axis() -> None:
    text = _sched("ReduceSum", [rand(40, 64), np.array([0], I64)], {"keepdims": 0}, (1,))
    assert "T.Ramp" in text and "for k0" in text


def test_transpose_is_tiled() -> None:
    text = _sched("Transpose", [rand(64, 64)], {"perm": [1, 0]})
    assert "i0_0" in text and "i1_0" in text and "T.Ramp" in text  # both axes tiled


def test_few_planes_transpose_reads_in_input_order() -> None:
    """NHWC -> NCHW of 3 channels: the 3 planes unrolled innermost (the input read in order,
    not 3 floats apart per vector), no tile; the 64-channel one is still tiled."""
    text = _sched("Transpose", [rand(1, 20, 24, 3)], {"perm": [0, 3, 1, 2]})
    loops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("for ")]
    assert loops == ["for i2, i3 in T.grid(20, 24):"]  # pixels; the planes unrolled inside
    assert all(f"in0[i2 * 72 + i3 * 3{k}]" in text for k in ("", " + 1", " + 2"))
    assert "i3_0" in _sched("Transpose", [rand(1, 20, 24, 64)], {"perm": [0, 3, 1, 2]})


def test_no_parallel_on_one_core_or_small_work() -> None:
    assert "parallel" not in _sched("Relu", [rand(256, 256)], {}, cfg=CpuConfig(512, 1))
    assert "parallel" not in _sched("Relu", [rand(4, 4)], {}, cfg=CpuConfig(512, 8))
    assert "parallel" in _sched("Relu", [rand(256, 256)], {}, cfg=CpuConfig(512, 8))


def test_cpu_config_reads_target() -> None:
    assert cpu_config(None).lanes("float32") == 4
    assert cpu_config("c-generic").lanes("int8") == 16
    assert CpuConfig(vector_bits=512).lanes("float64") == 8


def test_softmax_and_sigmoid_call_the_vectorizable_exp() -> None:
    """exp stays a math call in the schedule; the C renderer spells it kiln_fast_expf."""
    assert "T.exp(" in _sched("Softmax", [rand(3, 64)], {"axis": -1})
    x = te.placeholder((3, 64), name="x")
    sm = topi_softmax(x)
    mod = build(schedule_cpu(te.create_prim_func([x, sm]), CpuConfig(vector_bits=512)))
    assert "kiln_fast_expf(" in mod.get_source() and "expf(" not in mod.get_source().replace(
        "kiln_fast_expf(", "")
    a = np.random.default_rng(3).normal(0, 20, (3, 64)).astype(F32)
    out = np.zeros_like(a)
    mod(a, out)
    e = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("case", [
    ("Softmax", [rand(8, 32)], {"axis": -1}, (), 1),
    ("LayerNormalization", [rand(6, 64), rand(64, seed=1), rand(64, seed=2)],
     {"axis": -1, "epsilon": 1e-5}, (), 1),
    ("ReduceSum", [rand(5, 64), np.array([1], I64)], {"keepdims": 1}, (1,), 1),
    ("Softmax", [rand(3, 40)], {"axis": -1}, (), 1),
], ids=lambda c: f"{c[0]}-{c[1][0].shape[-1]}")
def test_row_reduction_tail_is_a_two_level_tree(case: tuple) -> None:
    """The 16 partial results of an rfactored row reduction are folded by 4-wide vector
    steps, then 4 scalar ones (not 16 dependent scalar steps); results match numpy."""
    cfg = CpuConfig(vector_bits=512)
    sch = check_schedule(case, cfg)
    text = str(lower(sch))
    if case[1][0].shape[-1] % 16 == 0:
        assert "_rf_1" in text and "T.Ramp(0, 1, 4)" in text, text
    else:  # 40 = 5 x 8: an 8-lane rfactor, and still a tree over 4
        assert "_rf_1" in text, text


SANITIZED = ["Softmax-23", "MaxPool-17", "Transpose-31", "LayerNormalization-28",
             "ReduceSum-10", "Resize-43"]


@needs("cc")
@pytest.mark.parametrize("case", [c for k, c in enumerate(CASES)
                                  if f"{c[0]}-{k}" in SANITIZED],
                         ids=lambda c: c[0])
def test_default_schedule_is_clean_under_asan_ubsan(case: tuple, tmp_path: Path) -> None:
    """Guarded tails, rfactor buffers, attached row buffers and tiles: no out-of-bounds
    access or undefined behaviour (stand-alone program, -fsanitize=address,undefined)."""
    from toolchain.codegen.c import render_standalone_main

    op, arrays, attrs, const, n_out = case
    node = make_node(op, arrays, attrs, const, n_out)
    s = schedule_for(node, "x86_64-avx512" if "avx512f" in _cpu_flags() else "c-generic")
    mod = build(s.schedule, name="san")
    src = tmp_path / "main.c"
    src.write_text(render_standalone_main(mod.func, mod.get_source(), mod.entry))
    exe = tmp_path / "main"
    res = subprocess.run(["cc", "-std=gnu11", "-O1", "-g1", "-march=native",
                          "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                          "-fopenmp", str(src), "-o", str(exe), "-lm"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    by_value = {id(v): a for v, a in zip(node.inputs, arrays, strict=True) if v is not None}
    args = [np.ascontiguousarray(by_value[id(v)]).reshape(v.shape or (1,))
            for v in s.input_values]
    args += [np.zeros(v.shape or (1,), np.dtype(v.dtype)) for v in s.output_values]
    paths = []
    for k, a in enumerate(args):
        p = tmp_path / f"arg{k}.bin"
        a.tofile(p)
        paths.append(str(p))
    run = subprocess.run([str(exe), *paths], capture_output=True, text=True, check=False,
                         env={"OMP_NUM_THREADS": "1", "ASAN_OPTIONS": "detect_leaks=1"})
    assert run.returncode == 0 and "runtime error" not in run.stderr, run.stderr
    want = get_op(op).reference(list(arrays), dict(attrs))[0]
    got = np.fromfile(paths[len(s.input_values)], dtype=want.dtype).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _quantize_transpose(h: int, w: int, c: int) -> str:
    from toolchain.topi.elemwise import quantize_linear
    from toolchain.topi.transform import transpose

    x = te.placeholder((1, h, w, c), name="x")
    s = te.placeholder((1,), name="s")
    z = te.placeholder((1,), "int8", name="z")
    t = transpose(quantize_linear(x, s, z, out_dtype="int8"), [0, 3, 1, 2])
    return str(lower(schedule_cpu(te.create_prim_func([x, s, z, t]), CpuConfig(512))))


def test_quantized_few_planes_transpose_stages_the_row() -> None:
    """QuantizeLinear + NHWC -> NCHW of 3 channels: the quantized value of a row (96 x 3
    floats) computed contiguously, 16 lanes, into a row buffer; the transpose only
    converts. A row past STAGE_ROW_BYTES stays one inlined expression."""
    text = _quantize_transpose(6, 96, 3)
    assert 'quantize_linear_value = T.allocate((288,), "float32")' in text
    assert "x[i2 * 288 + ax2_ax3_fused_0 * 16 + ax2_ax3_fused_1]" in text
    assert 'T.Cast("int8", quantize_linear_value[i3 * 3 + 2])' in text
    wide = _quantize_transpose(2, 800, 3)  # 9,600 bytes a row
    assert "quantize_linear_value" not in wide and "T.round(x[i2 * 2400 + i3 * 3 + 2]" in wide

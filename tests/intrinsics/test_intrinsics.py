"""Target tensor intrinsics: behaviour parsing, tensorize matching, generated C that
compiles with the target's flags, and runs (with numpy as the oracle) where the CPU can."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from toolchain import te
from toolchain.codegen import get_renderer
from toolchain.codegen.artifact import support_of
from toolchain.driver import build
from toolchain.errors import ScheduleError, TargetError
from toolchain.intrinsics import attach_intrinsics, get_spec, intrinsic_flags, load_intrinsics
from toolchain.intrinsics.behaviour import behaviour_func, parse_behaviour
from toolchain.runtime.build import compile_shared
from toolchain.target import load_target, runs_here
from toolchain.tir.schedule import Schedule, TensorIntrin
from toolchain.tir.transform.pipeline import lower

# --------------------------------------------------------------------------- behaviour


def test_parse_behaviour_shapes_and_casts() -> None:
    b = parse_behaviour("C[j] += A[k] * B[j, k]")
    f = behaviour_func(b, {"j": 16, "k": 4}, {"A": "uint8", "B": "int8", "C": "int32"})
    assert [(x.name, x.dtype) for x in f.buffers] == [("A", "uint8"), ("B", "int8"),
                                                      ("C", "int32")]
    text = str(f)
    assert 'T.Cast("int32", A[' in text or "T.Cast(" in text
    g = behaviour_func(parse_behaviour("C[i] += A[2 * i + k] * (B[k] + B[k])"),
                       {"i": 3, "k": 2}, dict.fromkeys("ABC", "float32"))
    assert [int(d.value) for d in g.buffers[0].shape] == [6]


@pytest.mark.parametrize("text, extents, needle", [
    ("C[i, j] = A[i, k]", {"i": 1, "k": 1}, "not index the output"),
    ("C[i] += A[i, k] *", {"i": 1, "k": 1}, "expected 'name', found the end"),
    ("C[i] += A[i, q]", {"i": 2, "k": 2}, "index variable 'q' of A has no extent"),
    ("C[i + 1] += A[i, k]", {"i": 2, "k": 2}, "must be one loop variable"),
    ("C[i] += A[i]", {"i": 2}, "at least one loop variable"),
    ("C[i] += A[i, k] * C[i]", {"i": 2, "k": 2}, "C is the output"),
])
def test_behaviour_errors(text: str, extents: dict, needle: str) -> None:
    with pytest.raises(TargetError, match="intrinsic") as ei:
        behaviour_func(parse_behaviour(text), extents, dict.fromkeys("ABC", "float32"))
    assert needle in str(ei.value)


def test_behaviour_never_evaluates_python() -> None:
    with pytest.raises(TargetError, match="unexpected character"):
        parse_behaviour("C[i] += __import__('os').system('true')")


# --------------------------------------------------------------------------- matching

def _matmul(m: int, n: int, k: int, dtype: str = "float32") -> Schedule:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return Schedule(te.create_prim_func([A, B, C]))


def _tile(sch: Schedule, mr: int, nr: int, kc: int, local: bool = True) -> object:
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    ko, ki = sch.split(k, [None, kc])
    sch.reorder(io, jo, ko, ii, ji, ki)
    if local:
        loc = sch.cache_write(c, 0, "local")
        sch.reverse_compute_at(loc, jo)
    sch.decompose_reduction(c, ko)
    return ii


def test_tensorize_accepts_the_matching_block_and_runs() -> None:
    name = "c-generic.fma_f32_4x4"
    load_intrinsics("c-generic")
    sch = _matmul(12, 8, 16)
    sch.tensorize(_tile(sch, 4, 4, 4), name)
    assert f"'tensorized': '{name}'" in str(sch.mod)
    mod = build(sch, "c-generic", passes={1: [attach_intrinsics]},
                extra_flags=["-Wall", "-Wextra", "-Werror"])
    assert "static inline int32_t kiln_fma_f32_4x4_" in mod.get_source()
    rng = np.random.default_rng(0)
    a, b = rng.random((12, 16), np.float32), rng.random((16, 8), np.float32)
    c = np.empty((12, 8), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_tensorize_rejects_a_wrong_tile_size() -> None:
    load_intrinsics("c-generic")
    sch = _matmul(16, 16, 16)
    with pytest.raises(ScheduleError, match=r"loop 0 \(i_1\) has extent 8, the intrinsic's "
                                            r"loop i has 4; split i_1 by 4"):
        sch.tensorize(_tile(sch, 8, 4, 4), "c-generic.fma_f32_4x4")


def test_tensorize_rejects_a_wrong_dtype() -> None:
    load_intrinsics("c-generic")
    sch = _matmul(8, 8, 8, "float64")
    with pytest.raises(ScheduleError, match="has dtype float64 but the intrinsic's .* is "
                                            "float32"):
        sch.tensorize(_tile(sch, 4, 4, 4), "c-generic.fma_f32_4x4")


def test_tensorize_rejects_a_transposed_operand() -> None:
    load_intrinsics("c-generic")
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    r = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    with pytest.raises(ScheduleError, match="tensorize with 'c-generic.fma_f32_4x4'") as ei:
        sch.tensorize(_tile(sch, 4, 4, 4), "c-generic.fma_f32_4x4")
    assert "B" in str(ei.value)


def test_unknown_intrinsic_lists_the_loaded_ones() -> None:
    load_intrinsics("c-generic")
    with pytest.raises(ScheduleError, match="no target intrinsic 'c-generic.nope'; loaded: "
                                            ".*c-generic.fma_f32_4x4"):
        get_spec("c-generic.nope")


# --------------------------------------------------------------------------- x86 fp32

@pytest.mark.parametrize("target, intrin, tile", [
    ("x86_64-avx2", "fma_f32_6x16", (6, 16, 64)),
    ("x86_64-avx512", "fma_f32_6x16", (6, 16, 64)),
    ("x86_64-avx512", "fma_f32_8x32", (8, 32, 64)),
])
def test_x86_fma_intrinsics_compile_and_run_where_supported(target, intrin, tile) -> None:
    load_intrinsics(target)
    mr, nr, kc = tile
    m, n, k = 2 * mr, 2 * nr, 2 * kc
    sch = _matmul(m, n, k)
    sch.tensorize(_tile(sch, mr, nr, kc), f"{target}.{intrin}")
    t = load_target(target)
    if not runs_here(t):
        f = attach_intrinsics(lower(sch, passes={1: [attach_intrinsics]}))
        src = get_renderer("c").render(f)
        compile_shared(src.code, ["-O2", "-fPIC", "-shared", f"-march={t.arch}"])
        pytest.skip(f"{target} code compiled; this CPU lacks {', '.join(t.cpu_flags)}")
    mod = build(sch, target, passes={1: [attach_intrinsics]})
    assert "_mm" in mod.get_source()
    rng = np.random.default_rng(1)
    a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    c = np.empty((m, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    # the llvm_impl (llvm.fma in the C body's order) gives the C build's floats to the bit
    c_llvm = np.empty_like(c)
    build(sch, target, backend="llvm")(a, b, c_llvm)
    np.testing.assert_array_equal(c_llvm, c)


# --------------------------------------------------------------------------- int8 dots

def _dot_schedule(lanes: int, n: int, adt: str, bdt: str, acc: str = "int32") -> Schedule:
    A = te.placeholder((2,) if adt == "int16" and lanes == 4 else (4,), adt, name="A")
    kk = int(A.shape[0].value)
    B = te.placeholder((n, kk), bdt, name="B")
    r = te.reduce_axis((0, kk), name="k")
    C = te.compute((n,), lambda j: te.sum(te.cast(A[r], acc) * te.cast(B[j, r], acc),
                                          axis=r), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    j, _ = sch.get_loops(c)
    _, ji = sch.split(j, [None, lanes])
    sch.decompose_reduction(c, ji)
    return sch, ji


@pytest.mark.parametrize("target, intrin, lanes", [
    ("x86_64-avx512", "dot_u8i8_16x4", 16),
    ("x86_64-avx2", "dot_u8i8_8x4", 8),
])
def test_int8_dot_intrinsics(target: str, intrin: str, lanes: int) -> None:
    load_intrinsics(target)
    sch, ji = _dot_schedule(lanes, 3 * lanes, "uint8", "int8")
    sch.tensorize(ji, f"{target}.{intrin}")
    flags = intrinsic_flags(sch.mod)
    t = load_target(target)
    f = lower(sch, passes={1: [attach_intrinsics]})
    src = get_renderer("c").render(f)
    assert ("_mm512_dpbusd_epi32" if "512" in target else "_mm256_maddubs_epi16") in src.code
    assert intrinsic_flags(f) == flags  # the bundle asks the lowered (renamed) calls
    compile_shared(src.code, ["-O2", "-fPIC", "-shared", f"-march={t.arch}", *flags])
    spec = get_spec(f"{target}.{intrin}")
    if not runs_here(t) or not set(spec.cpu_flags) <= __import__(
            "toolchain.target", fromlist=["x"]).host_cpu_flags():
        pytest.skip(f"{target}.{intrin} compiled; this CPU lacks its features")
    mod = build(sch, target, passes={1: [attach_intrinsics]}, extra_flags=flags)
    rng = np.random.default_rng(2)
    a = rng.integers(0, 128, 4).astype(np.uint8)
    b = rng.integers(-128, 128, (3 * lanes, 4)).astype(np.int8)
    c = np.empty(3 * lanes, np.int32)
    mod(a, b, c)
    np.testing.assert_array_equal(c, b.astype(np.int32) @ a.astype(np.int32))
    c_llvm = np.empty_like(c)
    build(sch, target, backend="llvm")(a, b, c_llvm)  # the llvm_impl (vpdpbusd, vpmaddubsw)
    np.testing.assert_array_equal(c_llvm, c)


def test_intrinsic_template_refuses_unsupported_strides() -> None:
    load_intrinsics("x86_64-avx512")
    A = te.placeholder((4,), "uint8", name="A")
    B = te.placeholder((32, 8), "int8", name="B")   # rows of 8: not the packed [16][4]
    r = te.reduce_axis((0, 4), name="k")
    C = te.compute((32,), lambda j: te.sum(te.cast(A[r], "int32") * te.cast(B[j, r], "int32"),
                                           axis=r), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    j, _ = sch.get_loops(c)
    _, ji = sch.split(j, [None, 16])
    sch.decompose_reduction(c, ji)
    sch.tensorize(ji, "x86_64-avx512.dot_u8i8_16x4")
    with pytest.raises(ScheduleError, match=r"dot_u8i8_16x4'.*B must be packed \[16\]\[4\].*"
                                            r"B_s0.: 8"):
        lower(sch, passes={1: [attach_intrinsics]})


# --------------------------------------------------------------------------- Cortex-M4

def test_cortex_m4_smlad_generates_c_for_arm_gcc(tmp_path) -> None:
    load_intrinsics("cortex-m4")
    sch, ji = _dot_schedule(4, 8, "int16", "int16")
    sch.tensorize(ji, "cortex-m4.smlad_i16_4x2")
    src = get_renderer("c", openmp=False).render(lower(sch, passes={1: [attach_intrinsics]}))
    assert "__smlad(" in src.code and "#include <arm_acle.h>" in src.code
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (apt-get install "
                    "gcc-arm-none-eabi); the C was generated but not cross-compiled")
    c_file = tmp_path / "k.c"
    c_file.write_text(src.code)
    t = load_target("cortex-m4")
    specs = subprocess.run([cc, "-print-file-name=picolibc.specs"], capture_output=True,
                           text=True, check=False).stdout.strip()
    if not specs or specs == "picolibc.specs":
        pytest.skip("picolibc-arm-none-eabi is not installed (the kernels include "
                    "<stdlib.h>); the C was generated but not cross-compiled")
    res = subprocess.run([cc, *t.cflags, "--specs=picolibc.specs", "-Wall", "-Werror", "-c",
                          str(c_file), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(tmp_path / "k.o")],
                         capture_output=True, text=True, check=False).stdout
    if dis:
        assert "smlad" in dis


def test_unit_extent_loops_leave_the_nest() -> None:
    """Loops of extent 1 are not part of the description's nest (schedules elide them): the
    intrinsic then matches one row of a 2-D operand, the offset taking the row."""
    f = behaviour_func(parse_behaviour("C[i, j] += A[i, 2 * h + l] * B[j, h + 2 * l]"),
                       {"i": 1, "j": 4, "h": 2, "l": 2}, {"A": "int16", "B": "int8",
                                                           "C": "int32"})
    assert [int(d.value) for d in f.buffers[0].shape] == [1, 4]
    text = str(f)
    assert "T.grid(4, 2, 2)" in text and "T.axis.spatial(1, 0)" in text


def test_cortex_m_helpers_are_one_definition_per_kernel() -> None:
    """The descriptor's c_helpers come once (keyed by the functions they define), before
    the specialised bodies (keyed by their names); the typed support says which headers
    and flags the kernel needs — nothing downstream reads them back from C text."""
    load_intrinsics("cortex-m4")
    sch, ji = _dot_schedule(4, 8, "int16", "int16")
    sch.tensorize(ji, "cortex-m4.smlad_i16_4x2")
    f = lower(sch, passes={1: [attach_intrinsics]})
    support = support_of(f)
    helpers, body = support.definitions
    assert helpers.key.startswith("c_helpers:") and "kiln_smlad" in helpers.key.split(",")
    assert helpers.text == get_spec("cortex-m4.smlad_i16_4x2").helpers
    assert body.key.startswith("kiln_m4_smlad_i16_4x2_") and body.key in str(f)
    assert support.headers == ("string.h",)


def test_cortex_m4_smlad_runs_on_the_host_with_the_portable_fallback() -> None:
    """The same kernel built for this machine (no DSP extension): kiln_smlad's C fallback
    gives numpy's integers, wrap-around included."""
    load_intrinsics("cortex-m4")
    sch, ji = _dot_schedule(4, 8, "int16", "int16")
    sch.tensorize(ji, "cortex-m4.smlad_i16_4x2")
    mod = build(sch, "c-generic", passes={1: [attach_intrinsics]},
                extra_flags=["-Wall", "-Wextra", "-Werror"])
    rng = np.random.default_rng(3)
    a = rng.integers(-32768, 32768, (2,)).astype(np.int16)
    b = rng.integers(-32768, 32768, (8, 2)).astype(np.int16)
    c = np.zeros(8, np.int32)
    mod(a, b, c)
    want = (b.astype(np.int64) @ a.astype(np.int64)).astype(np.int64)
    np.testing.assert_array_equal(c, ((want + 2**31) % 2**32 - 2**31).astype(np.int32))


# --------------------------------------------------------------------------- lowering aids

def _ptr(load: object) -> object:
    from toolchain.tir import ir

    return ir.Call("handle", "tir.address_of", [load])


def test_operand_tiles_span_the_declared_extents() -> None:
    """First and last element of each operand tile (trailing dims when the buffer has more
    dimensions than the declaration); the output is the written one; other calls: None."""
    from toolchain.intrinsics import operand_tiles
    from toolchain.tir import ir

    load_intrinsics("cortex-m4")
    x = ir.Var("x", "int32")
    col = ir.Buffer("im2col", (3, 10, 16), "int16")
    w = ir.Buffer("w", (8, 16), "int8")
    acc = ir.Buffer("acc", (30, 8), "int32")
    call = ir.Call("int32", get_spec("cortex-m4.dot_q15q7_4x8").function,
                   [_ptr(col[1, x, 8]), _ptr(w[4, 8]), _ptr(acc[x, 4])])
    got = [(str(f), str(la), rd, wr) for f, la, rd, wr in operand_tiles(call)]
    assert got == [("im2col[1, x, 8]", "im2col[1, x, 15]", True, False),
                   ("w[4, 8]", "w[7, 15]", True, False), ("acc[x, 4]", "acc[x, 7]", True, True)]
    assert operand_tiles(ir.Call("int32", "memcpy", [_ptr(w[0, 0])])) is None
    flat = ir.Buffer("flat", (64,), "int8")  # fewer dimensions than the 2-D tile
    bad = ir.Call("int32", call.op, [_ptr(col[0, 0, 0]), _ptr(flat[0]), _ptr(acc[0, 0])])
    assert operand_tiles(bad) is None


def _helper_only_kernel() -> object:
    """``O[0] = kiln_ssat8(300)``: a Cortex-M helper called with no intrinsic."""
    from toolchain.tir import ir

    out = ir.Buffer("O", (1,), "int32")
    call = ir.Call("int32", "kiln_ssat8", [ir.IntImm(300)])
    return ir.PrimFunc([out], ir.BufferStore(out, call, (ir.IntImm(0),)), "k")


def test_helpers_are_attached_to_kernels_that_call_them_without_intrinsics() -> None:
    load_intrinsics("cortex-m4")
    f = attach_intrinsics(_helper_only_kernel())
    helpers = get_spec("cortex-m4.dot_q15q7_4x4").helpers
    assert support_of(f).headers == ("string.h",)
    assert [d.text for d in support_of(f).definitions] == [helpers]
    assert attach_intrinsics(f) is f  # once only
    assert "c_support" not in attach_intrinsics(_helper_only_kernel(),
                                                ("x86_64-avx2",)).attrs
    mod = build(_helper_only_kernel(), "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    out = np.zeros(1, np.int32)
    mod(out)
    assert out[0] == 127  # saturated to int8 by the portable fallback


def test_an_output_only_written_is_not_read() -> None:
    """``C[b, o] = 0`` and ``C = A >> imm`` write their output without reading it (so buffer
    compaction may start a fresh tile there); ``C += A * B`` reads it first."""
    from toolchain.intrinsics import operand_tiles
    from toolchain.tir import ir

    load_intrinsics("vta")
    a = ir.Buffer("a", (4, 1, 16), "int32")
    c = ir.Buffer("c", (4, 1, 16), "int32")
    reset = ir.Call("int32", get_spec("vta.gemm_reset").function, [_ptr(c[1, 0, 0])])
    shr = ir.Call("int32", get_spec("vta.alu_shr_imm").function,
                  [_ptr(a[1, 0, 0]), _ptr(c[1, 0, 0]), 3])
    assert [(rd, wr) for _, _, rd, wr in operand_tiles(reset)] == [(False, True)]
    assert [(rd, wr) for _, _, rd, wr in operand_tiles(shr)] == [(True, False), (False, True)]
    assert get_spec("vta.gemm").reads_output and not get_spec("vta.alu_max_imm").reads_output


def test_a_variant_in_other_fields_reuses_the_compiled_intrinsics() -> None:
    """A descriptor that differs from the loaded one only in fields the intrinsics do not
    read (``layout``: the bundle tests' NHWC cortex-m4) registers the same compiled
    intrinsics again; one whose C helpers differ is compiled anew."""
    m4 = load_target("cortex-m4")
    name = load_intrinsics(m4)[0]
    desc = TensorIntrin.get(name).desc
    nhwc = dataclasses.replace(m4, layout="NHWC" if m4.layout != "NHWC" else "NCHW")
    assert load_intrinsics(nhwc)[0] == name
    assert TensorIntrin.get(name).desc is desc
    marked = dataclasses.replace(m4, c_helpers=m4.c_helpers + "\n/* kiln test */\n")
    try:
        load_intrinsics(marked)
        assert TensorIntrin.get(name).desc is not desc
        assert "/* kiln test */" in get_spec(name).helpers
    finally:
        load_intrinsics(m4)
    assert "/* kiln test */" not in get_spec(name).helpers

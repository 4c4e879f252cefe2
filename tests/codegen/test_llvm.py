"""The LLVM backend: TIR -> LLVM IR -> in-process JIT and object files, against numpy.

The op and schedule suites run through both backends too
(``tests/schedules/generic/test_ops.py``, ``tests/codegen/test_primitives_build.py``);
this file checks what is LLVM's own: math, integer semantics, control flow, memory, the
cache, the metadata, cross objects and the refusals.
"""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from tests.tir import workloads as W
from toolchain import te
from toolchain.codegen.backend import BACKENDS, LLVMBackend, backend_for
from toolchain.codegen.llvm import LLVMCodegen
from toolchain.codegen.llvm_target import machine_for
from toolchain.driver import build, lower
from toolchain.errors import BuildError, TargetError, UnsupportedError
from toolchain.target import load_target, parse_target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

RNG = np.random.default_rng(0)


def _unary(fn, n: int = 1000, dtype: str = "float32", lo: float = -6.0, hi: float = 6.0,
           vectorize: bool = True):
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    if vectorize:
        (i,) = sch.get_loops(sch.get_block("B"))
        _, ii = sch.split(i, [None, 8])
        sch.vectorize(ii)
    a = RNG.uniform(lo, hi, n).astype(dtype)
    b = np.zeros(n, dtype)
    build(sch, backend="llvm")(a, b)
    return a, b


MATH = [
    ("exp", te.exp, np.exp, -80.0, 80.0),
    ("tanh", te.tanh, np.tanh, -12.0, 12.0),
    ("sigmoid", te.sigmoid, lambda x: 1 / (1 + np.exp(-x.astype("float64"))), -30.0, 30.0),
    ("sqrt", te.sqrt, np.sqrt, 0.0, 100.0),
    ("log", te.log, np.log, 0.01, 100.0),
    ("floor", te.floor, np.floor, -9.0, 9.0),
    ("round", te.round, np.round, -9.0, 9.0),
    ("abs", te.abs, np.abs, -9.0, 9.0),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vectorize", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("case", MATH, ids=[c[0] for c in MATH])
def test_math_matches_numpy(case, vectorize: bool, dtype: str) -> None:
    _, fn, ref, lo, hi = case
    a, b = _unary(fn, dtype=dtype, lo=lo, hi=hi, vectorize=vectorize)
    np.testing.assert_allclose(b, ref(a).astype(dtype), rtol=1e-6 if dtype == "float32"
                               else 1e-12, atol=1e-30)


def test_libm_calls_resolve_and_are_listed() -> None:
    """float64 erf has no LLVM intrinsic: the object calls libm's erf, which the JIT finds
    (a symbol it could not find is a BuildError naming it, not a crash)."""
    from toolchain.runtime.jit import undefined_symbols

    A = te.placeholder((64,), "float64", name="A")
    B = te.compute((64,), lambda i: te.erf(A[i]), name="B")
    mod = build(te.create_prim_func([A, B]), backend="llvm")
    obj = open(mod.lib_path, "rb").read()
    assert "erf" in undefined_symbols(obj)
    a = np.linspace(-3, 3, 64)
    b = np.zeros(64)
    mod(a, b)
    import math

    np.testing.assert_allclose(b, [math.erf(x) for x in a], rtol=1e-15)


def test_float16_math_computes_in_double() -> None:
    """As the C backend: promote, compute in double, round back once (__truncdfhf2 comes
    from libgcc_s, which the JIT loads)."""
    a, b = _unary(te.tanh, n=64, dtype="float16", lo=-3, hi=3, vectorize=False)
    np.testing.assert_array_equal(b, np.tanh(a.astype("float64")).astype("float16"))


def test_erf_and_pow() -> None:
    import math

    a, b = _unary(te.erf, lo=-5, hi=5)
    want = np.array([math.erf(float(x)) for x in a], "float32")
    np.testing.assert_allclose(b, want, rtol=1e-6, atol=1e-7)
    a, b = _unary(lambda x: te.power(x, 2.0))
    np.testing.assert_array_equal(b, a * a)
    a, b = _unary(lambda x: te.power(te.abs(x), 0.5), lo=0, hi=9)
    np.testing.assert_allclose(b, np.sqrt(a), rtol=1e-6)


def test_integer_floor_division_casts_and_select() -> None:
    n = 64
    A = te.placeholder((n,), "int32", name="A")
    D = te.compute((n,), lambda i: te.floordiv(A[i], 3) * 100 + te.floormod(A[i], 3)
                   + te.floordiv(A[i], -4) * 10000, name="D")
    M = te.compute((n,), lambda i: te.cast(te.select(A[i] > 0, A[i], -A[i]), "int8"), name="M")
    F = te.compute((n,), lambda i: te.cast(A[i], "float32") / 4.0, name="F")
    Q = te.compute((n,), lambda i: A[i] < 3, name="Q")
    func = te.create_prim_func([A, D, M, F, Q])
    a = RNG.integers(-50, 50, n).astype("int32")
    d, m = np.zeros(n, "int32"), np.zeros(n, "int8")
    f, q = np.zeros(n, "float32"), np.zeros(n, "bool")
    build(func, backend="llvm")(a, d, m, f, q)
    np.testing.assert_array_equal(d, a // 3 * 100 + a % 3 + a // -4 * 10000)
    np.testing.assert_array_equal(m, np.abs(a).astype("int8"))
    np.testing.assert_array_equal(f, a.astype("float32") / 4)
    np.testing.assert_array_equal(q, a < 3)


def test_schedules_build_through_llvm() -> None:
    """split + reorder + vectorize + unroll + cache_write + compute_at over a matmul and
    a padded convolution (if_then_else: only the branch taken is evaluated)."""
    func, inputs, ref = W.matmul(32, 48, 24)
    sch = Schedule(func)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, k, ii, ji)
    sch.vectorize(ji)
    sch.unroll(ii)
    args = inputs()
    mod = build(sch, backend="llvm")
    mod(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-4, atol=1e-4)
    assert "llvm.loop.unroll" in mod.get_source() or "<16 x float>" in mod.get_source()
    func, inputs, ref = W.conv2d(1, 3, 9, 7, 4, 3)
    sch = Schedule(func)
    args = inputs()
    build(sch, backend="llvm")(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-4, atol=1e-4)


def test_big_temporary_goes_to_the_heap_and_symbolic_sizes_are_arguments() -> None:
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    mod = build(te.create_prim_func([A, C]), backend="llvm")
    assert "malloc" in mod.get_source() and [v.name for v in mod.extra_args] == ["n"]
    a = RNG.standard_normal(100_000).astype("float32")
    c = np.zeros_like(a)
    mod(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_loop_metadata() -> None:
    """Loops the lowering leaves (symbolic extents) keep what the schedule asked for."""
    n = ir.Var("n")
    A, B = ir.Buffer("A", (n,)), ir.Buffer("B", (n,))
    i, j = ir.Var("i"), ir.Var("j")
    body = ir.seq(ir.For(i, 0, n, "unrolled", B.store(A[i] + 1.0, [i])),
                  ir.For(j, 0, n, "vectorized", B.store(B[j] * 2.0, [j])))
    text = LLVMCodegen().generate(ir.PrimFunc((A, B), body), "md").ir
    assert text.count("distinct !{ !") == 2 and text.count("distinct !{}") == 1  # 2 loops
    assert '"llvm.loop.unroll.count", i32 16' in text
    assert '"llvm.loop.vectorize.enable", i1 1' in text
    # the vectorized loop's accesses are declared independent (as #pragma omp simd)
    assert '"llvm.loop.parallel_accesses"' in text and "!llvm.access.group" in text
    mod = build(ir.PrimFunc((A, B), body), backend="llvm")
    a, b = np.arange(50, dtype="float32"), np.zeros(50, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, (a + 1) * 2)


def test_loop_unroll_scheduled_unrolls_only_the_loops_the_schedule_unrolled() -> None:
    """``llvm.loop_unroll: scheduled`` (docs/llvm.md, "Build time"): a 4-iteration loop
    left serial stays a loop, the same loop marked unrolled becomes four copies of its
    body (a libm call, which no vectorizer touches). ``all`` (the default of every shipped
    descriptor) lets LLVM unroll both."""
    from dataclasses import replace

    from toolchain.codegen.llvm_target import optimize

    scheduled = machine_for(parse_target(
        "{name: s, kind: c, llvm: {cpu: x86-64-v3, loop_unroll: scheduled}}"))
    assert scheduled.loop_unroll == "scheduled"
    calls = {}
    for machine in (scheduled, replace(scheduled, loop_unroll="all")):
        for kind in ("serial", "unrolled"):
            A, B = ir.Buffer("A", (4,), "float64"), ir.Buffer("B", (4,), "float64")
            i = ir.Var("i")
            body = ir.For(i, 0, 4, kind, B.store(ir.Call("float64", "erf", (A[i],)), [i]))
            text = LLVMCodegen(machine).generate(ir.PrimFunc((A, B), body), f"u_{kind}").ir
            calls[machine.loop_unroll, kind] = str(optimize(text, machine)[0]).count(
                "call double @erf(")
    assert calls == {("scheduled", "serial"): 1, ("scheduled", "unrolled"): 4,
                     ("all", "serial"): 4, ("all", "unrolled"): 4}
    # a kernel that links intrinsic or helper bodies keeps LLVM's unrolling (their loops
    # are the descriptor's, not the schedule's)
    A, B, i = ir.Buffer("A", (4,), "float64"), ir.Buffer("B", (4,), "float64"), ir.Var("i")
    body = ir.For(i, 0, 4, "serial", B.store(ir.Call("float64", "erf", (A[i],)), [i]))
    text = LLVMCodegen(scheduled).generate(ir.PrimFunc((A, B), body), "u_linked").ir
    helper = "define linkonce_odr i32 @kiln_h(i32 %x) alwaysinline {\n  ret i32 %x\n}\n"
    assert str(optimize(text, scheduled, extra=[helper])[0]).count("call double @erf(") == 4
    assert {machine_for(load_target(t)).loop_unroll for t in ("cortex-m4", "x86_64-avx512")
            } == {"all"}
    with pytest.raises(TargetError, match="llvm.loop_unroll' must be one of all, scheduled"):
        parse_target("{name: s, kind: c, llvm: {loop_unroll: some}}")


def test_in_place_vectorized_loop_needs_no_overlap_check() -> None:
    """Output over input (a bundle's in-place kernel: no noalias on the pair): a loop the
    schedule vectorized is declared free of loop-carried dependencies, so LLVM vectorizes
    it without the run-time overlap check that equal pointers would always fail."""
    from toolchain.codegen.llvm_target import optimize

    n = ir.Var("n")
    A, B, C = ir.Buffer("A", (n * 16,)), ir.Buffer("B", (n * 16,)), ir.Buffer("C", (1,))
    machine = machine_for(load_target("x86_64-avx512"))
    opt = {}
    for kind in ("vectorized", "serial"):
        i, j = ir.Var("i"), ir.Var("j")
        x = A[i * 16 + j]
        body = B.store(x * (ir.Call("float32", "erf", (x / C[0],)) + 1.0), [i * 16 + j])
        func = ir.PrimFunc((A, C, B), ir.For(i, 0, n, "serial", ir.For(j, 0, 16, kind, body)))
        text = LLVMCodegen(machine, restrict=frozenset({0, 2})).generate(func, "ip").ir
        opt[kind] = str(optimize(text, machine)[0])
    assert "diff.check" in opt["serial"]  # B - A < 64 bytes: the scalar loop when in place
    assert "diff.check" not in opt["vectorized"] and "<16 x float>" in opt["vectorized"]


def test_noalias_alignment_and_fast_math_flags() -> None:
    func, _, _ = W.row_sum(8, 32)
    sch = Schedule(func)
    text = LLVMCodegen().generate(lower(sch.mod), "rs").ir
    assert 'ptr noalias align 4 %"A"' in text and "fadd contract float" in text
    aliased = LLVMCodegen(restrict=frozenset({0})).generate(lower(sch.mod), "rs").ir
    assert 'ptr align 4 %"A"' in aliased and 'ptr noalias align 4 %"B"' in aliased
    strict = parse_target("{name: s, kind: c, llvm: {fast_math: []}}")
    plain = LLVMCodegen(machine_for(strict)).generate(lower(sch.mod), "rs").ir
    assert "contract" not in plain


def test_object_cache_and_no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_subprocess(*a, **k):
        raise AssertionError("the LLVM path started a subprocess")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: A[i] * 3.0 - 1.0, name="B")
    func = te.create_prim_func([A, B])
    first = build(func, backend="llvm", name="cache_probe")
    again = build(func, backend="llvm", name="cache_probe")
    assert not first.build_info["cached"] and again.build_info["cached"]
    assert first.build_info["cache_key"] == again.build_info["cache_key"]
    a, b = np.arange(37, dtype="float32"), np.zeros(37, "float32")
    again(a, b)
    np.testing.assert_array_equal(b, a * 3 - 1)


def _elf(obj: bytes) -> tuple[int, int, int]:
    """(class, machine, flags) of an ELF object."""
    assert obj[:4] == b"\x7fELF"
    machine = struct.unpack_from("<H", obj, 18)[0]
    flags = struct.unpack_from("<I", obj, 48 if obj[4] == 2 else 36)[0]
    return obj[4], machine, flags


@pytest.mark.parametrize("target,machine", [("x86_64-avx2", 62), ("cortex-m4", 40),
                                            ("cortex-m7", 40)])
def test_cross_objects(target: str, machine: int) -> None:
    t = load_target(target)
    func, _, _ = W.matmul(8, 8, 8)
    art = backend_for(t, backend="llvm").kernel(lower(func, target=t), "net_k0")
    # the C prototype: A and B read only (const, as the C kernel declares them), C written
    assert art.backend == "llvm" and art.params == [
        "const float* restrict A", "const float* restrict B", "float* restrict C"]
    cls, mach, flags = _elf(art.object_code)
    assert mach == machine
    if machine == 40:  # 32-bit Arm, EABI 5
        assert cls == 1 and flags & 0xFF000000 == 0x05000000
    assert "@net_k0" in art.llvm_ir.replace('"', "")


def test_bundle_objects_are_cached_by_content(tmp_path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """A bundle kernel compiled again (same IR, same machine) comes from the build cache:
    the same bytes, no LLVM pass run; another machine misses."""
    import toolchain.codegen.llvm_target as llvm_target

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    func, _, _ = W.matmul(8, 8, 8)
    avx2, m4 = load_target("x86_64-avx2"), load_target("cortex-m4")
    first = backend_for(avx2, backend="llvm").kernel(lower(func, target=avx2), "net_k0")
    assert [p.name.startswith("llvm-net_k0-") for p in tmp_path.glob("*.o")] == [True]
    emitted = llvm_target.emit_object

    def no_pass(*a, **k):
        raise AssertionError("a cached kernel ran LLVM again")

    monkeypatch.setattr(llvm_target, "emit_object", no_pass)
    again = backend_for(avx2, backend="llvm").kernel(lower(func, target=avx2), "net_k0")
    assert again.object_code == first.object_code
    assert again.object_code == emitted(first.llvm_ir, llvm_target.machine_for(avx2))
    with pytest.raises(AssertionError, match="ran LLVM again"):
        backend_for(m4, backend="llvm").kernel(lower(func, target=m4), "net_k0")


def test_bundle_kernel_uses_scratch_not_heap() -> None:
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((4096,), lambda i: B[i] + 1.0, name="C")
    art = LLVMBackend().kernel(lower(te.create_prim_func([A, C])), "net_k1")
    assert art.scratch_bytes == 4096 * 4 and art.params[-1] == "uint8_t* kiln_scratch"
    assert "malloc" not in art.llvm_ir


def test_refusals_name_the_kernel_and_what() -> None:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: ir.Call("float32", "kiln_my_helper", (A[i],)), name="B")
    with pytest.raises(UnsupportedError, match=r"kernel main: calls the C function "
                                                r"kiln_my_helper\(\)"):
        build(te.create_prim_func([A, B]), backend="llvm")
    func, _, _ = W.matmul(8, 8, 8)
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "threadIdx.x")
    with pytest.raises(UnsupportedError, match="kernel k: loop .* is bound to threadIdx.x"):
        LLVMCodegen().generate(lower(sch.mod), "k")
    with pytest.raises(TargetError, match="runs the kernel in this process"):
        build(func, "cortex-m4", backend="llvm")
    with pytest.raises(TargetError, match="CPU targets"):
        backend_for(load_target("cuda-sm80"), backend="llvm")
    with pytest.raises(TargetError, match="llvm.fast_math"):
        parse_target("{name: s, kind: c, llvm: {fast_math: [turbo]}}")
    assert isinstance(BACKENDS["llvm"], LLVMBackend)


def test_cortex_m_object_is_hard_float(tmp_path) -> None:
    """The 4-part triple gives the hard-float ABI (the 3-part one silently does not, and
    GNU ld then refuses to link the object with the runtime's hard-float objects)."""
    import shutil

    readelf = shutil.which("arm-none-eabi-readelf") or shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    t = load_target("cortex-m4")
    func, _, _ = W.matmul(4, 4, 4)
    obj = tmp_path / "k.o"
    obj.write_bytes(backend_for(t, backend="llvm").kernel(lower(func, target=t), "k")
                    .object_code)
    out = subprocess.run([readelf, "-A", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    assert "Tag_ABI_VFP_args: VFP registers" in out and "Tag_CPU_name: \"cortex-m4\"" in out


def test_bundle_with_llvm_kernel_objects(tmp_path) -> None:
    """kiln compile --backend llvm: the kernels as objects next to the same C runtime,
    model and weights; built here (cc links the objects) and checked against the
    reference executor."""
    import toolchain

    pkg = toolchain.compile(toolchain.load("examples/lenet5.onnx"), "c-generic",
                            tmp_path / "b", backend="llvm")
    objs = pkg.metadata["kernel_objects"]
    assert objs and all((pkg.path / o).is_file() for o in objs)
    assert "int32_t lenet5_" not in (pkg.path / "src" / "kernels.c").read_text()
    assert all(o in (pkg.path / "Makefile").read_text() for o in objs)
    assert pkg.metadata["options"]["backend"] == "llvm"
    # kernels.h declares what the objects only read const, as the C kernels do: the call
    # sequence passes the weights and inputs without dropping const (-Wcast-qual)
    assert "const float* restrict" in (pkg.path / "src" / "kernels.h").read_text()
    res = subprocess.run(["cc", "-std=c99", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                          "-Wcast-qual", f"-I{pkg.path / 'include'}",
                          f"-I{pkg.path / 'runtime'}", str(pkg.path / "src" / "lenet5.c")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert toolchain.run(pkg, check=True).ok


def test_cortex_m4_bundle_with_llvm_kernels_runs_on_qemu(tmp_path) -> None:
    import shutil

    if not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")):
        pytest.skip("needs gcc-arm-none-eabi, picolibc-arm-none-eabi and qemu-system-arm")
    from toolchain.boards.build import compile_board
    from toolchain.boards.qemu import run_on_qemu
    from toolchain.bundle.check import compare, reference_outputs
    from toolchain.bundle.host import read_metadata

    out, report = compile_board("examples/lenet5.onnx", "qemu-mps2-an386", tmp_path / "m4",
                                backend="llvm")
    assert report is not None and report["flash"]["kernels"]["text"] > 0  # the .o files
    meta = read_metadata(out)
    feeds = {t["name"]: np.random.default_rng(0).standard_normal(t["shape"]).astype("float32")
             for t in meta["inputs"]}
    run = run_on_qemu(out, feeds)
    rows = compare(run.outputs, reference_outputs(meta, feeds, "examples/lenet5.onnx"), 1e-4)
    assert rows and all(r["ok"] for r in rows), rows


def _tensorized_matmul(intrinsic: str) -> tuple[Schedule, tuple]:
    func, inputs, ref = W.matmul(8, 12, 8)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(sch.get_block("C"), ko)
    sch.tensorize(ii, intrinsic)
    return sch, (func, inputs, ref)


def test_tensor_intrinsic_with_llvm_impl() -> None:
    """c-generic's fma_f32_4x4 declares an llvm_impl (LLVM IR, llvm.fmuladd.v4f32): a kernel
    tensorized with it builds through LLVM and agrees with the C build to the bit."""
    from toolchain.intrinsics import load_intrinsics

    (name,) = [n for n in load_intrinsics("c-generic") if n.endswith("fma_f32_4x4")]
    sch, (_, inputs, ref) = _tensorized_matmul(name)
    mod = build(sch, "c-generic", backend="llvm")
    assert "define linkonce_odr i32 @kiln_fma_f32_4x4_" in mod.get_source()
    assert "@llvm.fmuladd.v4f32" in mod.get_source()
    args = inputs()
    mod(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5, atol=1e-5)
    c_args = inputs()
    build(sch, "c-generic")(*c_args)
    np.testing.assert_array_equal(args[-1], c_args[-1])


def test_tensor_intrinsic_without_llvm_impl_is_refused() -> None:
    from toolchain.intrinsics import load_intrinsics

    spec = dict(load_target("c-generic").intrinsics["fma_f32_4x4"])
    t = parse_target(
        "name: noir\nkind: c\nintrinsics:\n  mm4:\n"
        f"    behaviour: '{spec['behaviour']}'\n    extents: {{i: 4, j: 4, k: 4}}\n"
        "    dtypes: {A: float32, B: float32, C: float32}\n    function: kiln_noir_mm4\n"
        "    impl: |\n      (void)A; (void)B; (void)C;\n")
    (name,) = load_intrinsics(t)
    sch, _ = _tensorized_matmul(name)
    with pytest.raises(UnsupportedError, match=r"tensor intrinsic noir\.mm4, which declares "
                                                r"no llvm_impl"):
        build(sch, t, backend="llvm")


def test_cortex_m4_smlad_intrinsic_maps_to_llvm_arm_smlad(tmp_path) -> None:
    """cortex-m4's smlad_i16_4x2 declares an llvm_impl calling llvm.arm.smlad: a kernel
    tensorized with it compiles to SMLAD instructions in the Thumb object."""
    import shutil

    from toolchain.intrinsics import load_intrinsics

    t = load_target("cortex-m4")
    (name,) = [n for n in load_intrinsics(t) if n.endswith("smlad_i16_4x2")]
    A = te.placeholder((16,), "int16", name="A")
    B = te.placeholder((8, 16), "int16", name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((8,), lambda j: te.sum(te.cast(A[k], "int32") * te.cast(B[j, k], "int32"),
                                         axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    j, kk = sch.get_loops(sch.get_block("C"))
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(kk, [None, 2])
    sch.reorder(jo, ko, ji, ki)
    sch.decompose_reduction(sch.get_block("C"), ko)
    sch.tensorize(ji, name)
    art = backend_for(t, backend="llvm").kernel(lower(sch.mod, target=t), "k")
    assert "@llvm.arm.smlad" in art.llvm_ir
    objdump = shutil.which("arm-none-eabi-objdump")
    if objdump is None:
        pytest.skip("no arm-none-eabi-objdump")
    (tmp_path / "k.o").write_bytes(art.object_code)
    asm = subprocess.run([objdump, "-d", str(tmp_path / "k.o")], capture_output=True,
                         text=True, check=True).stdout
    assert asm.count("smlad") >= 4, asm


def _asm_target(name: str, extends: str) -> tuple:
    """A descriptor whose 4x4 multiply-add intrinsic's llvm_impl starts with inline asm
    (a no-op comment) and then does the fma_f32_4x4 work by a call of its own body."""
    from toolchain.intrinsics import load_intrinsics

    spec = dict(load_target("c-generic").intrinsics["fma_f32_4x4"])
    body = spec["llvm_impl"].replace("ret i32 0",
                                     'call void asm sideeffect "# kiln", ""()\nret i32 0')
    lines = "\n".join("      " + ln for ln in body.splitlines())
    impl = "\n".join("      " + ln for ln in spec["impl"].splitlines())
    t = parse_target(
        f"name: {name}\nkind: c\nextends: {extends}\nintrinsics:\n  mm4:\n"
        f"    behaviour: '{spec['behaviour']}'\n    extents: {{i: 4, j: 4, k: 4}}\n"
        "    dtypes: {A: float32, B: float32, C: float32}\n"
        f"    function: kiln_{name.replace('-', '_')}_mm4\n"
        f"    impl: |\n{impl}\n    llvm_impl: |\n{lines}\n")
    (intrin,) = [n for n in load_intrinsics(t) if n.endswith(".mm4")]
    return t, intrin


def test_inline_asm_in_llvm_impl_host_and_cross() -> None:
    """Inline assembly in an llvm_impl builds for the host (its assembler is registered);
    for another triple llvmlite has no assembler, and LLVM would abort the process when
    emitting the object: a BuildError names the function instead."""
    t, intrin = _asm_target("asm-host", "c-generic")
    sch, (_, inputs, ref) = _tensorized_matmul(intrin)
    args = inputs()
    build(sch, t, backend="llvm")(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5, atol=1e-5)
    t, intrin = _asm_target("asm-m4", "cortex-m4")
    sch, _ = _tensorized_matmul(intrin)
    with pytest.raises(BuildError, match=r"kiln_asm_m4_mm4_\w+ uses inline assembly, which "
                                         r"llvmlite cannot assemble for thumbv7em"):
        backend_for(t, backend="llvm").kernel(lower(sch.mod, target=t), "k")

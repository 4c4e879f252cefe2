"""What makes the LLVM backend's builds cheaper (docs/llvm.md, "Build time") changes no
result: a pure expression is emitted once per region, only where its value dominates the
use; integer constants are typed directly; ``llvm.opt_level`` picks O2 or O3; one target
machine per machine and process makes the objects a fresh one makes.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from toolchain.codegen import llvm_target
from toolchain.codegen.llvm import LLVMCodegen
from toolchain.codegen.llvm_target import (
    emit_object,
    machine_for,
    optimize,
    quiet_remarks,
    shared_target_machine,
)
from toolchain.driver import build
from toolchain.errors import TargetError
from toolchain.target import load_target, parse_target
from toolchain.tir import ir

RNG = np.random.default_rng(5)


def _func(body: ir.Stmt, *bufs: ir.Buffer, scalars: tuple[ir.Var, ...] = ()) -> ir.PrimFunc:
    return ir.PrimFunc((*bufs, *scalars), body)


def test_a_repeated_index_expression_is_emitted_once_per_region() -> None:
    """The same index object in four stores (as an unrolled register tile repeats it):
    one multiply in the IR, and no ``sext`` of a constant."""
    n = ir.Var("n")
    A, B = ir.Buffer("A", (64,), "float32"), ir.Buffer("B", (64,), "float32")
    row = n * 7
    body = ir.SeqStmt(tuple(B.store(A[row + k] * 2.0, [row + k]) for k in range(4)))
    text = LLVMCodegen().generate(_func(body, A, B, scalars=(n,)), "tile").ir
    assert text.count("mul nsw i32") == 1
    assert "sext i32 " not in text.replace('sext i32 %', '')
    mod = build(_func(body, A, B, scalars=(n,)), backend="llvm")
    a, b = RNG.standard_normal(64).astype("float32"), np.zeros(64, "float32")
    mod(a, b, 3)
    np.testing.assert_array_equal(b[21:25], a[21:25] * 2)
    assert not b[:21].any() and not b[25:].any()


def test_an_expression_that_reads_memory_is_evaluated_at_each_use() -> None:
    """``A[i] + 1`` stored into A, then into B: B gets the new A[i] + 1 (a load is never
    reused across a store)."""
    i = ir.Var("i")
    A, B = ir.Buffer("A", (8,), "int32"), ir.Buffer("B", (8,), "int32")
    e = A[i] + 1
    body = ir.For(i, 0, 8, "serial", ir.SeqStmt((A.store(e, [i]), B.store(e, [i]))))
    a, b = np.arange(8, dtype="int32"), np.zeros(8, "int32")
    build(_func(body, A, B), backend="llvm")(a, b)
    np.testing.assert_array_equal(a, np.arange(8) + 1)
    np.testing.assert_array_equal(b, np.arange(8) + 2)


def test_values_do_not_leak_out_of_loops_branches_and_bindings() -> None:
    """The same expression objects in two sibling loops over the same variable, inside
    and after a branch, and under two bindings of one variable: each use gets the value
    of its own region (LLVM's verifier rejects a value that does not dominate its use, a
    stale binding gives wrong numbers)."""
    i, n, v = ir.Var("i"), ir.Var("n"), ir.Var("v")
    B = ir.Buffer("B", (16,), "int32")
    e, f, g = i * 3 + n, n * 5, v * 2
    body = ir.SeqStmt((
        ir.For(i, 0, 4, "serial", B.store(e, [i])),
        ir.For(i, 0, 4, "serial", B.store(e + 100, [i + 4])),
        ir.IfThenElse(n > 0, B.store(f, [8]), B.store(f + 1, [9])),
        B.store(f + 2, [10]),
        ir.LetStmt(v, n + 1, B.store(g, [11])),
        ir.LetStmt(v, n + 2, B.store(g, [12])),
    ))
    mod = build(_func(body, B, scalars=(n,)), backend="llvm")
    for nv in (3, -2):
        b = np.zeros(16, "int32")
        mod(b, nv)
        want = [k * 3 + nv for k in range(4)] + [k * 3 + nv + 100 for k in range(4)]
        want += [nv * 5 if nv > 0 else 0, 0 if nv > 0 else nv * 5 + 1, nv * 5 + 2,
                 (nv + 1) * 2, (nv + 2) * 2, 0, 0, 0]
        np.testing.assert_array_equal(b, want)


def test_a_variable_bound_again_inside_its_binding_gets_the_inner_value() -> None:
    """``let v = n + 1 in (B[0] = v * 2; let v = n + 2 in B[1] = v * 2)`` with one ``v``
    and one ``v * 2`` object: the inner store uses the inner binding."""
    n, v = ir.Var("n"), ir.Var("v")
    B = ir.Buffer("B", (2,), "int32")
    g = v * 2
    body = ir.LetStmt(v, n + 1, ir.SeqStmt((B.store(g, [0]),
                                            ir.LetStmt(v, n + 2, B.store(g, [1])))))
    b = np.zeros(2, "int32")
    build(_func(body, B, scalars=(n,)), backend="llvm")(b, 5)
    np.testing.assert_array_equal(b, [12, 14])


def test_opt_level_key() -> None:
    """``llvm.opt_level``: 3 unless a descriptor says 2 (the x86 ones do); part of the
    object cache key; anything else is refused with the file and the key."""
    assert machine_for(load_target("cortex-m4")).opt_level == 3
    m = machine_for(load_target("x86_64-avx2"))
    assert m.opt_level == 2
    o3 = machine_for(parse_target("{name: s, kind: c, llvm: {cpu: x86-64-v3, opt_level: 3}}"))
    assert o3.key() != m.key() and o3.key().replace("O3", "O2") == m.key()
    # both levels vectorize the loop the schedule left scalar
    i = ir.Var("i")
    A, B = ir.Buffer("A", (256,), "float32"), ir.Buffer("B", (256,), "float32")
    body = ir.For(i, 0, 256, "serial", B.store(A[i] * 3.0, [i]))
    text = LLVMCodegen(m).generate(_func(body, A, B), "scale").ir
    for machine in (m, o3):
        assert re.search(r"vmulps\t.*%ymm", _asm(text, machine))
    for bad in ("1", "4", "true", "'2'"):
        with pytest.raises(TargetError, match="llvm.opt_level"):
            parse_target(f"{{name: s, kind: c, llvm: {{opt_level: {bad}}}}}")


def test_a_shared_target_machine_emits_the_objects_a_fresh_one_does(monkeypatch) -> None:
    """:func:`emit_object` reuses one LLVM target machine per machine (and JIT flag) for
    every kernel of a process; each object is byte for byte the one a target machine made
    for it alone would give, whatever was emitted before with the shared one (other
    kernels, other machines of the same triple, the JIT's code model)."""
    i = ir.Var("i")
    A, B = ir.Buffer("A", (16,), "float32"), ir.Buffer("B", (16,), "float32")
    scale = _func(ir.For(i, 0, 16, "serial", B.store(A[i] * 3.0, [i])), A, B)
    shift = _func(ir.For(i, 0, 16, "serial", B.store(A[i] + B[i], [i])), A, B)
    machines = [machine_for(load_target(t)) for t in ("cortex-m4", "x86_64-avx2", "c-generic")]
    texts = [(LLVMCodegen(m).generate(f, n).ir, m) for m in machines
             for f, n in ((scale, "scale"), (shift, "shift"))]
    assert shared_target_machine(machines[0]) is shared_target_machine(
        machine_for(load_target("cortex-m4")))
    shared = [emit_object(t, m) for t, m in texts]
    emit_object(texts[0][0], machines[0], jit=True)
    again = [emit_object(t, m) for t, m in reversed(texts)][::-1]
    monkeypatch.setattr(llvm_target, "shared_target_machine",
                        lambda m, jit=False: m.target_machine(jit=jit))
    fresh = [emit_object(t, m) for t, m in texts]
    assert shared == again == fresh
    assert len(set(fresh)) == len(fresh)


def test_llvm_output_is_passed_on_when_the_quieted_call_raises(capfd) -> None:
    """:func:`quiet_remarks` (around parsing, optimisation and emission) drops LLVM's
    remarks and passes on anything else LLVM printed, also when the call raised."""

    with pytest.raises(RuntimeError, match="failed"):
        with quiet_remarks():
            os.write(2, b"remark: loop not vectorized\nLLVM ERROR: something else\n")
            raise RuntimeError("failed")
    err = capfd.readouterr().err
    assert "LLVM ERROR: something else" in err and "remark" not in err


def _asm(text: str, machine) -> str:  # type: ignore[no-untyped-def]
    mod, tm = optimize(text, machine)
    return tm.emit_assembly(mod)


def _benchmark_backends():  # type: ignore[no-untyped-def]
    """``benchmarks/backends.py`` as a module (it is a script, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "backends.py"
    spec = importlib.util.spec_from_file_location("kiln_bench_backends", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmarks_pipeline_variants_build_correct_kernels(tmp_path, monkeypatch
                                                                ) -> None:
    """``benchmarks/backends.py --variants`` times kernels built through other LLVM
    pipelines (docs/llvm.md, "Build time"): each variant's kernel computes what the
    descriptor's does (a strided loop left to LLVM, a reduction), bad names are refused."""
    from toolchain.target import host_target
    from toolchain.tir.transform import lower

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    bench = _benchmark_backends()
    i, k = ir.Var("i"), ir.Var("k")
    A, B = ir.Buffer("A", (1024,), "float32"), ir.Buffer("B", (64,), "float32")
    body = ir.For(i, 0, 64, "serial", ir.SeqStmt((
        B.store(ir.FloatImm(0.0, "float32"), [i]),
        ir.For(k, 0, 8, "serial", B.store(B[i] + A[i * 2 + k * 128] * 1.5, [i])))))
    func = _func(body, A, B)
    a = RNG.standard_normal(1024).astype("float32")
    want = np.array([sum(a[j * 2 + kk * 128] * np.float32(1.5) for kk in range(8))
                     for j in range(64)], "float32")
    for name in ("O1-cg1", "O2-novec-noslp-nounroll", "min", "min-cg0"):
        v = bench.parse_variant(name)
        mod = bench.variant_build(lower(func), func, host_target(), v)
        b = np.zeros(64, "float32")
        mod(a, b)
        np.testing.assert_allclose(b, want, rtol=1e-5, err_msg=name)
    for bad in ("O4", "O2-cg5", "O2-fast"):
        with pytest.raises(SystemExit, match="--variants"):
            bench.parse_variant(bad)

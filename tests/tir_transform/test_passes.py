"""Each lowering pass on small cases: the IR before/after, and the built C still matches numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tir import workloads as W
from tests.tir_transform.helpers import build_and_check, count, loops
from toolchain import te
from toolchain.tir import ir
from toolchain.tir import transform as T
from toolchain.tir.schedule import Schedule


def _blocks_lowered(func: ir.PrimFunc) -> ir.PrimFunc:
    return T.lower_blocks(T.lower_init_block(func))


def test_lower_init_block_guards_first_reduce_iteration():
    func = W.row_sum(4, 8)[0]
    text = str(T.lower_init_block(func))
    assert "T.init()" not in text
    assert "if vk == 0:" in text
    assert "B[vi] = T.float32(0.0)" in text


def test_lower_blocks_removes_blocks_and_binds_vars():
    func = _blocks_lowered(W.row_sum(4, 8)[0])
    text = str(func)
    assert "T.block" not in text and "vi" not in text
    assert count(func, ir.Block) == 0
    assert "if k == 0:" in text and "B[i] = B[i] + A[i, k]" in text


def test_lower_blocks_predicate_becomes_guard():
    wl = W.row_sum(10, 4)
    sch = Schedule(wl[0])
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    text = str(_blocks_lowered(sch.mod))
    assert "if i_0 * 4 + i_1 < 10:" in text
    build_and_check(sch, wl)


def test_lower_blocks_alloc_buffers_and_storage_align_strides():
    wl = W.elementwise_chain(4, 6)
    sch = Schedule(wl[0])
    sch.storage_align(sch.get_block("B"), 0, axis=0, factor=8, offset=1)
    func = _blocks_lowered(sch.mod)
    allocs = [n for n in _collect(func, ir.Allocate)]
    names = {a.buffer.name: a.buffer for a in allocs}
    assert set(names) == {"B", "C"}
    assert [s.value for s in names["B"].strides] == [9, 1]
    flat = T.flatten_buffer(func)
    assert "B[i * 9 + j]" in str(flat)
    build_and_check(sch, wl)


def _collect(node, cls):
    from toolchain.tir.functor import post_order_visit

    out = []
    post_order_visit(node, lambda x: out.append(x) if isinstance(x, cls) else None)
    return out


def test_compact_buffer_allocation_shrinks_tile_and_moves_it_into_the_loop():
    wl = W.matmul(32, 32, 32)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 8])
    sch.reorder(io, jo, k, ii, ji)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, jo)
    func = T.compact_buffer_allocation(_blocks_lowered(sch.mod))
    text = str(func)
    assert 'C_local = T.allocate((4, 8), "float32", scope="local")' in text
    # allocated inside the tile loop, never inside the reduction loop that carries it
    (jo_loop,) = [f for f in loops(func) if f.loop_var.name == "j_0"]
    assert isinstance(jo_loop.body, ir.Allocate)
    (k_loop,) = [f for f in loops(func) if f.loop_var.name == "k"]
    assert k_loop.annotations["carried"] == ("C_local",)
    build_and_check(sch, wl)


def test_compact_keeps_full_buffer_when_region_is_not_constant():
    wl = W.elementwise_chain(4, 6)
    func = T.compact_buffer_allocation(_blocks_lowered(wl[0]))
    assert 'T.allocate((4, 6), "float32")' in str(func)


def test_flatten_buffer_uses_row_major_strides():
    wl = W.matmul(4, 6, 5)
    func = T.flatten_buffer(_blocks_lowered(wl[0]))
    text = str(func)
    assert 'A: T.Buffer((20,), "float32")' in text
    assert "C[i * 6 + j] = C[i * 6 + j] + A[i * 5 + k] * B[k * 6 + j]" in text
    build_and_check(wl[0], wl)


def test_vectorize_loop_makes_ramps_and_broadcasts():
    A = te.placeholder((8, 16), name="A")
    s = te.placeholder((8,), name="s")
    B = te.compute((8, 16), lambda i, j: A[i, j] * s[i], name="B")
    func = te.create_prim_func([A, s, B])
    sch = Schedule(func)
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    low = T.vectorize_loop(T.flatten_buffer(_blocks_lowered(sch.mod)))
    text = str(low)
    assert ("B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] * T.Broadcast(s[i], 16)"
            in text)
    assert count(low, ir.Ramp) == 2
    mod = build_and_check(sch, (func, lambda: [np.random.rand(8, 16).astype("float32"),
                                               np.random.rand(8).astype("float32"),
                                               np.zeros((8, 16), "float32")],
                                lambda a, sv, b: a * sv[:, None]))
    assert "float32x16_splat" in mod.get_source()


def test_vectorize_if_then_else_on_an_outer_condition():
    """Padding (a condition on the outer loop only): the inner loop still becomes vectors,
    under C's ?: so that the load of a padded row is never made (it would read outside A,
    which the sanitizer flags); a condition that varies by lane keeps the scalar loop."""
    A = te.placeholder((6, 16), name="A")
    P = te.compute((8, 16), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < 7), A[i - 1, j], te.const(0.0)),
        name="P")
    func = te.create_prim_func([A, P])
    sch = Schedule(func)
    _, j = sch.get_loops(sch.get_block("P"))
    sch.vectorize(j)
    low = T.lower(sch)
    assert count(low, ir.Ramp) >= 2 and not any(f.annotations.get("pragma_simd")
                                                for f in loops(low))
    mod = build_and_check(sch, (func, lambda: [np.random.rand(6, 16).astype("float32"),
                                               np.zeros((8, 16), "float32")],
                                lambda a, p: np.pad(a, ((1, 1), (0, 0)))))
    assert "? (float32x16)" in mod.get_source()
    Q = te.compute((6, 16), lambda i, j: te.if_then_else(j < 8, A[i, j], te.const(0.0)),
                   name="Q")
    sch = Schedule(te.create_prim_func([A, Q]))
    _, j = sch.get_loops(sch.get_block("Q"))
    sch.vectorize(j)
    assert count(T.lower(sch), ir.Ramp) == 0  # lane-dependent condition: scalar loop


def test_vectorize_loop_falls_back_to_simd_pragma():
    wl = W.elementwise_chain(4, 16)
    sch = Schedule(wl[0])
    _, j = sch.get_loops(sch.get_block("D"))
    sch.vectorize(j)
    low = T.lower(sch)
    (f,) = [f for f in loops(low) if f.annotations.get("pragma_simd")]
    assert "Call" in f.annotations["vectorize_fallback"]
    mod = build_and_check(sch, wl)
    assert "#pragma omp simd" in mod.get_source()
    assert "-fopenmp-simd" in mod.build_info["flags"]


def test_vectorize_non_power_of_two_falls_back():
    wl = W.elementwise_chain(4, 6)
    sch = Schedule(wl[0])
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    low = T.lower(sch)
    assert count(low, ir.Ramp) == 0
    build_and_check(sch, wl)


def test_unroll_loop_explicit_and_small():
    wl = W.row_sum(4, 12)
    sch = Schedule(wl[0])
    i, k = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(k, [None, 3])
    sch.unroll(ki)
    low = T.lower(sch)
    text = str(low)
    assert [f.loop_var.name for f in loops(low)] == ["k_0", "i"] or \
        {f.loop_var.name for f in loops(low)} == {"i", "k_0"}
    assert "k_0 * 3 + 2" in text
    build_and_check(sch, wl)


def test_unroll_symbolic_extent_becomes_pragma():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.unroll(i)
    low = T.lower(sch)
    (f,) = loops(low)
    assert f.annotations.get("pragma_unroll") == 1
    from toolchain.driver import build

    mod = build(sch, extra_flags=["-Wall", "-Wextra", "-Werror"])
    assert "#pragma GCC unroll" in mod.get_source()
    a = np.arange(5, dtype="float32")
    b = np.zeros(5, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_inject_virtual_thread_interleaves_copies():
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [2, None])
    sch.reorder(io, ii, j, k)
    sch.bind(io, "vthread")
    func = _blocks_lowered(sch.mod)
    low = T.inject_virtual_thread(func)
    assert all(f.kind != "thread_binding" for f in loops(low))
    text = str(low)
    # the two virtual threads run side by side inside the shared k loop
    assert "C[i_1, j] = C[i_1, j] + A[i_1, k] * B[k, j]" in text
    assert "C[8 + i_1, j] = C[8 + i_1, j] + A[8 + i_1, k] * B[k, j]" in text or \
        "C[i_1 + 8, j] = C[i_1 + 8, j] + A[i_1 + 8, k] * B[k, j]" in text
    build_and_check(sch, wl)


def test_inject_virtual_thread_expands_local_allocation():
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 2])
    sch.reorder(io, j, ii, k)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, j)
    sch.bind(ii, "vthread")
    low = T.lower(sch)
    assert "thread_binding" not in str(low)
    build_and_check(sch, wl)


def test_inject_virtual_thread_keeps_instructions_whole_and_groups_stages():
    """Loops annotated ``instruction`` are copied whole (one instruction per thread), and
    consecutive ones of the same stage are interleaved as a unit: thread 0's two loads,
    thread 1's two loads, then each thread's compute."""
    from toolchain.tir.transform.inject_virtual_thread import INSTRUCTION

    a, b, c = (ir.Buffer(n, (8,), "int32") for n in "ABC")
    vt, r = ir.Var("vt", "int32"), ir.Var("r", "int32")

    def nest(stage: str, buf: ir.Buffer, value: ir.PrimExpr) -> ir.For:
        return ir.For(r, 0, 4, "serial", buf.store(value, [vt * 4 + r]),
                      annotations={INSTRUCTION: stage})

    body = ir.seq(nest("load", a, ir.IntImm(1)), nest("load", b, ir.IntImm(2)),
                  nest("compute", c, a[vt * 4 + r] + b[vt * 4 + r]))
    func = ir.PrimFunc((a, b, c), ir.For(vt, 0, 2, "thread_binding", body,
                                          thread_tag="vthread"))
    low = T.inject_virtual_thread(func)
    order = [(s.annotations[INSTRUCTION], str(s.body.buffer.name), str(s.body.indices[0]))
             for s in low.body.seq]
    assert [o[:2] for o in order] == [("load", "A"), ("load", "B"), ("load", "A"),
                                      ("load", "B"), ("compute", "C"), ("compute", "C")]
    assert [o[2] for o in order] == ["r", "r", "r + 4", "r + 4", "r", "r + 4"]


def test_storage_rewrite_shares_dead_buffers():
    A = te.placeholder((64,), name="A")
    t1 = te.compute((64,), lambda i: A[i] + 1.0, name="T1")
    t2 = te.compute((64,), lambda i: t1[i] * 2.0, name="T2")
    t3 = te.compute((64,), lambda i: t2[i] - 3.0, name="T3")
    B = te.compute((64,), lambda i: t3[i] * t3[i], name="B")
    func = te.create_prim_func([A, B])
    before = T.flatten_buffer(_blocks_lowered(func))
    after = T.storage_rewrite(before)
    assert count(before, ir.Allocate) == 3
    assert count(after, ir.Allocate) == 2
    assert "T1[i_2] = T2[i_2] - T.float32(3.0)" in str(after)
    def ref(a, b):
        return (((a + 1) * 2 - 3) ** 2)
    build_and_check(func, (func, lambda: [np.random.rand(64).astype("float32"),
                                          np.zeros(64, "float32")], ref))


def test_simplify_elides_proven_guards_and_unit_loops():
    wl = W.row_sum(8, 8)
    sch = Schedule(wl[0])
    i, k = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 1])
    func = T.flatten_buffer(_blocks_lowered(sch.mod))
    out = T.simplify(func)
    assert {f.loop_var.name for f in loops(out)} == {"i_0", "k"}
    guard = ir.IfThenElse(ir.Var("q") < 1, ir.Evaluate(ir.IntImm(0)))
    x = ir.Var("x")
    f2 = func.with_body(ir.For(x, 0, 4, "serial", ir.IfThenElse(x < 4, ir.seq(
        ir.BufferStore(func.buffers[1], ir.FloatImm(1.0), (x,)), guard))))
    text = str(T.simplify(f2))
    assert "if x < 4" not in text and "if q < 1" in text
    build_and_check(sch, wl)


def test_remove_noop_drops_empty_loops_and_unused_allocations():
    A = ir.Buffer("A", (4,), "float32")
    X = ir.Buffer("X", (4,), "float32", "local")
    i, j = ir.Var("i"), ir.Var("j")
    body = ir.Allocate(X, ir.seq(
        ir.For(i, 0, 0, "serial", A.store(1.0, [i])),
        ir.For(j, 0, 4, "serial", ir.Evaluate(ir.IntImm(0))),
        ir.IfThenElse(i < 2, ir.Evaluate(ir.IntImm(0))),
        A.store(2.0, [0])))
    f = ir.PrimFunc((A,), body)
    out = T.remove_noop(f)
    assert str(out.body) == "A[0] = T.float32(2.0)"
    from toolchain.driver import build

    a = np.zeros(4, "float32")
    build(f, extra_flags=["-Wall", "-Wextra", "-Werror"])(a)
    assert a.tolist() == [2.0, 0.0, 0.0, 0.0]


def test_lower_rejects_unknown_phase_and_bad_pass():
    from toolchain.errors import OptionError

    with pytest.raises(OptionError, match="unknown phase"):
        T.lower(W.row_sum()[0], passes={7: []})
    with pytest.raises(OptionError, match="is not callable"):
        T.lower(W.row_sum()[0], passes={1: ["simplify"]})
    with pytest.raises(OptionError, match="passes maps a phase number to a list of passes"):
        T.lower(W.row_sum()[0], passes=[T.simplify])  # a list, not {phase: [...]}


def test_lower_trace_records_every_pass():
    trace: list = []
    T.lower(W.row_sum()[0], trace=trace)
    names = [n for n, _ in trace]
    assert names[:3] == ["lower_thread_allreduce", "lower_init_block", "lower_blocks"]
    assert names[-1] == "remove_noop"
    assert len(names) == sum(len(p) for p in T.PHASES.values())


def test_lower_stops_after_the_named_pass():
    from toolchain.errors import OptionError

    full: list = []
    T.lower(W.row_sum()[0], trace=full)
    trace: list = []
    out = T.lower(W.row_sum()[0], trace=trace, stop_after=T.storage_rewrite)
    names = [n for n, _ in full]
    assert [n for n, _ in trace] == names[:names.index("storage_rewrite") + 1]
    assert out is trace[-1][1]
    with pytest.raises(OptionError, match="not a built-in pass"):
        T.lower(W.row_sum()[0], stop_after=lambda f: f)


def test_a_lowering_stopped_early_is_resumed_by_the_whole_lowering_of_that_function(
        monkeypatch):
    """The GPU GEMM search lowers its chosen kernel up to ``storage_rewrite`` and the bundle
    compiler then lowers the same function in full: that lowering runs only the passes
    after ``storage_rewrite`` (for the same target, with no extra passes or trace), and
    gives what a lowering from the start gives."""
    from toolchain.target import load_target
    from toolchain.tir.transform import pipeline

    ran: list[str] = []

    def recorded(fn):
        def run(f, **kw):
            ran.append(fn.__name__)
            return fn(f, **kw)
        run.__name__ = fn.__name__
        return run

    phases = {k: tuple(map(recorded, fns)) for k, fns in pipeline.PHASES.items()}
    wrapped = {fn.__name__: fn for fns in phases.values() for fn in fns}
    monkeypatch.setattr(pipeline, "PHASES", phases)
    monkeypatch.setattr(pipeline, "TARGET_PASSES",
                        tuple(wrapped[fn.__name__] for fn in pipeline.TARGET_PASSES))
    every = [fn.__name__ for fns in phases.values() for fn in fns]
    first = every[:every.index("storage_rewrite") + 1]
    fresh = str(T.lower(W.matmul_relu()[0]))
    func = W.matmul_relu()[0]
    ran.clear()
    T.lower(func, stop_after=wrapped["storage_rewrite"])
    assert ran == first
    ran.clear()
    assert str(T.lower(func)) == fresh
    assert ran == every[len(first):]  # resumed
    for kw in ({"passes": {max(phases): [lambda f: f]}}, {"trace": []}):
        ran.clear()
        assert str(T.lower(func, **kw)) == fresh
        assert ran == every  # extra passes, a trace: from the start
    c = load_target("c-generic")
    ran.clear()
    assert str(T.lower(func, target=c)) == str(T.lower(W.matmul_relu()[0], target=c))
    assert ran[:len(first)] == first  # another target: from the start


@pytest.mark.parametrize("make", [W.matmul_relu, W.conv2d, W.row_sum, W.elementwise_chain])
def test_lowered_ir_runs_in_the_reference_interpreter(make):
    """Lowering alone (no C compiler) keeps the meaning: the interpreter agrees with numpy."""
    from toolchain.tir.interpreter import run

    wl = make()
    sch = Schedule(wl[0])
    last = sch.get_child_blocks(sch.get_block("root"))[-1]
    loops_ = sch.get_loops(last)
    sch.split(loops_[-1], [None, 4])
    args = wl[1]()
    run(T.lower(sch), *[a.reshape(-1) for a in args])
    np.testing.assert_allclose(args[-1], wl[2](*args), rtol=1e-4, atol=1e-4)


def test_compact_leaves_buffers_passed_by_pointer_alone():
    X = ir.Buffer("X", (16, 16), "float32", "local")
    B = ir.Buffer("B", (16,), "float32")
    i = ir.Var("i")
    addr = ir.Call("handle", "tir.address_of", [X[i, 0]])
    body = ir.Allocate(X, ir.For(i, 0, 4, "serial", ir.seq(
        ir.Evaluate(ir.Call("int32", "fill_row", [addr])), B.store(X[i, 0], [i]))))
    out = T.compact_buffer_allocation(ir.PrimFunc((B,), body))
    assert 'X = T.allocate((16, 16), "float32", scope="local")' in str(out)


def test_auto_unroll_max_step_pragma():
    wl = W.matmul(8, 8, 8)
    sch = Schedule(wl[0])
    i, j, k = sch.get_loops(sch.get_block("C"))
    ko, ki = sch.split(k, [None, 4])
    jo, ji = sch.split(j, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    sch.pragma(i, "auto_unroll_max_step", 16)
    low = T.lower(sch)
    # ji * ki * (guarded init + update) = 16 statements: unrolled; the ko nest (32) is not
    assert sorted(f.loop_var.name for f in loops(low)) == ["i", "j_0", "k_0"]
    build_and_check(sch, wl)


def test_lower_blocks_alone_still_guards_init():
    wl = W.row_sum(4, 8)
    assert "if k == 0:" in str(T.lower_blocks(wl[0]))

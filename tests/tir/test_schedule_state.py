"""ScheduleState: the public state under Schedule that every primitive and default schedule
uses (replacing the function, handle look-ups, consumed/removed records, copies, rollback),
and a guard that nothing outside schedule.py reaches into a schedule's private state."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.tir import workloads as W
from toolchain import te
from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.schedule import BlockRV, LoopRV, Schedule, ScheduleState, loops
from toolchain.tir.schedule import state as st


def _grid(m: int, n: int) -> ir.PrimFunc:
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    return te.create_prim_func([A, B])


def test_schedule_is_a_front_over_its_state() -> None:
    sch = Schedule(_grid(8, 8), target="cuda-sm80")
    assert isinstance(sch.state, ScheduleState)
    assert sch.mod is sch.state.func and sch.func is sch.state.func
    assert sch.target is sch.state.target and sch.target.name == "cuda-sm80"


def test_replace_installs_the_new_function() -> None:
    sch = Schedule(_grid(8, 8))
    new = st.with_root_allocs(sch.mod, add=(ir.Buffer("T", (8,)),))
    sch.state.replace(new)
    assert sch.mod is new
    with pytest.raises(ScheduleError, match="ScheduleState.replace expects a PrimFunc, got str"):
        sch.state.replace("not a function")  # type: ignore[arg-type]
    assert sch.mod is new


def test_update_replaces_statements_by_id() -> None:
    state = ScheduleState(_grid(8, 8))
    f, _ = state.get_loop(LoopRV(st.loops_of(state.get_block("B")[1])[0].loop_var))
    state.update({id(f): replace(f, kind="parallel")})
    assert "for i in T.parallel(8):" in str(state.func)


def test_get_loop_and_get_block_return_the_node_and_its_ancestors() -> None:
    sch = Schedule(_grid(8, 4))
    b = sch.get_block("B")
    i, j = sch.get_loops(b)
    f, path = sch.state.get_loop(j)
    assert f.loop_var is j.var and path[-1].loop_var is i.var
    r, bpath = sch.state.get_block(b)
    assert r.block.name_hint == "B" and bpath[-1] is f
    assert sch.state.get_block("B")[0] is r  # a name works too


def test_wrong_handle_kinds_are_refused() -> None:
    state = ScheduleState(_grid(8, 8))
    with pytest.raises(ScheduleError, match=r"expected a loop handle \(from get_loops/split/"
                                            r"fuse\), got BlockRV\('B'\)"):
        state.get_loop(BlockRV("B"))  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match=r"expected a block handle \(from get_block\), got 3"):
        state.get_block(3)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="no block named 'C'; blocks: B"):
        state.get_block("C")


def test_a_state_checks_the_function_like_schedule() -> None:
    with pytest.raises(ScheduleError, match="expects a PrimFunc"):
        ScheduleState("f")  # type: ignore[arg-type]
    f = _grid(4, 4)
    lowered = f.with_body(f.body.block.body)
    with pytest.raises(ScheduleError, match="has no root block"):
        ScheduleState(lowered)


def test_consumed_loop_message_names_the_primitive_and_step() -> None:
    sch = Schedule(_grid(64, 64))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[None, 32])
    assert sch.state.consumed_by(i.var) == "split(i, factors=[None, 32]) at step 3"
    with pytest.raises(ScheduleError) as e:
        sch.state.get_loop(i)
    assert str(e.value) == ("loop handle i was consumed by split(i, factors=[None, 32]) at "
                            "step 3; use the new loops returned by it")


def test_consumed_record_is_by_var_identity() -> None:
    state = ScheduleState(_grid(8, 8))
    i = ir.Var("i")
    with state.applying("fuse(i, j) at step 4"):
        state.consume_loop(i)
    assert state.consumed_by(i) == "fuse(i, j) at step 4"
    assert state.consumed_by(ir.Var("i")) is None
    with pytest.raises(ScheduleError, match="loop i is not in this function"):
        state.get_loop(LoopRV(ir.Var("i")))


def test_removed_block_message_names_the_primitive_and_step() -> None:
    sch = Schedule(W.elementwise_chain()[0])
    b = sch.get_block("B")
    sch.compute_inline(b)
    assert sch.state.removed_by("B") == "compute_inline(B) at step 2"
    with pytest.raises(ScheduleError) as e:
        sch.state.get_block(b)
    assert str(e.value) == "block handle 'B' was removed by compute_inline(B) at step 2"


def test_records_made_outside_a_primitive_still_read_well() -> None:
    state = ScheduleState(_grid(8, 8))
    assert state.current == ""
    state.remove_block("B")
    assert state.removed_by("B") == "an earlier primitive"


def test_fresh_block_name_avoids_every_block_name() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    assert sch.state.fresh_block_name("C_init") == "C_init"
    assert sch.state.fresh_block_name("C") == "C_1"
    sch.decompose_reduction(sch.get_block("C"), sch.get_loops(sch.get_block("C"))[2])
    assert sch.state.fresh_block_name("C_init") == "C_init_1"


def test_applying_names_the_current_primitive_then_clears_it() -> None:
    state = ScheduleState(_grid(8, 8))
    with state.applying("outer"):
        assert state.current == "outer"
        with state.applying("inner"):
            assert state.current == "inner"
        assert state.current == "outer"
    assert state.current == ""


def test_applying_rolls_everything_back_on_error() -> None:
    state = ScheduleState(_grid(8, 8))
    before = state.func
    i = LoopRV(st.loops_of(state.get_block("B")[1])[0].loop_var)
    with pytest.raises(ScheduleError, match="refused"):
        with state.applying("split(i) at step 1"):
            loops.split(state, i, [None, 4])
            state.remove_block("B")
            raise ScheduleError("refused")
    assert state.func is before
    assert state.consumed_by(i.var) is None and state.removed_by("B") is None
    assert state.current == ""
    state.get_loop(i)  # the handle is valid again


def test_failed_primitive_leaves_schedule_state_and_trace_unchanged() -> None:
    # bind changes the loop first, then the target's thread limit refuses it
    sch = Schedule(_grid(4, 2048), target="cuda-sm80")
    i, j = sch.get_loops(sch.get_block("B"))
    before = sch.mod
    with pytest.raises(ScheduleError, match="2048 threads per block"):
        sch.bind(j, "threadIdx.x")
    assert sch.mod is before and len(sch.trace) == 2 and sch.state.current == ""
    with pytest.raises(ScheduleError, match="multiply to 8 but loop j has extent 2048"):
        sch.split(j, [2, 4])
    assert sch.mod is before and sch.state.consumed_by(j.var) is None
    sch.split(j, [None, 1024])  # the handles still work


def test_copy_is_independent() -> None:
    sch = Schedule(_grid(64, 64))
    i, j = sch.get_loops(sch.get_block("B"))
    other = sch.copy()
    assert other.state is not sch.state and other.mod is sch.mod
    io, ii = other.split(i, factors=[None, 8])
    other.parallel(io)
    assert other.state.consumed_by(i.var) is not None
    assert sch.state.consumed_by(i.var) is None
    assert sch.state.get_loop(i)[0].extent.value == 64  # the original still has loop i
    assert len(sch.trace) == 2 and len(other.trace) == 4
    sch.fuse(i, j)  # and can go its own way
    assert "i_j_fused" in str(sch.mod) and "i_j_fused" not in str(other.mod)
    assert str(other.trace.apply_to(_grid(64, 64)).mod) == str(other.mod)


def test_state_copy_is_independent() -> None:
    state = ScheduleState(_grid(8, 8))
    other = state.copy()
    i = LoopRV(st.loops_of(other.get_block("B")[1])[0].loop_var)
    with other.applying("split(i) at step 1"):
        loops.split(other, i, [None, 4])
    assert other.func is not state.func
    assert other.consumed_by(i.var) and state.consumed_by(i.var) is None
    state.get_loop(i)


def test_primitives_run_on_a_bare_state() -> None:
    wl = W.matmul(16, 16, 16)
    state = ScheduleState(wl[0])
    c = BlockRV("C")
    i, j, k = (LoopRV(f.loop_var) for f in st.loops_of(state.get_block(c)[1]))
    with state.applying("split"):
        io, ii = loops.split(state, i, [None, 4])
    with state.applying("reorder"):
        loops.reorder(state, io, j, k, ii)
    sch = Schedule(wl[0])
    ci, cj, ck = sch.get_loops(sch.get_block("C"))
    cio, cii = sch.split(ci, [None, 4])
    sch.reorder(cio, cj, ck, cii)
    assert str(state.func) == str(sch.mod)
    W.check(state.func, wl)


# --------------------------------------------------------------------------- no private access
_ROOT = Path(__file__).resolve().parents[2] / "toolchain"
_FRONT = _ROOT / "tir" / "schedule" / "schedule.py"
_PRIVATE = [
    (re.compile(r"\bsch\._\w"), "sch._<name>: use the public Schedule / sch.state API"),
    (re.compile(r"(?<!\bself)\._func\b"), "._func: read .mod / .state.func"),
    (re.compile(r"\.state\._\w"), "state._<name>: use the public ScheduleState API"),
]


def test_the_private_access_patterns_catch_what_they_should() -> None:
    def hits(line: str) -> bool:
        return any(p.search(line) for p, _ in _PRIVATE)

    assert hits("    f, _ = sch._loop(loops[-1])") and hits("x = other._func.body")
    assert hits("sch.state._consumed.clear()")
    assert not hits("        self._func = func") and not hits("f = sch.get(loop)")


def test_nothing_outside_schedule_py_reaches_into_schedule_private_state() -> None:
    found = []
    for path in sorted(_ROOT.rglob("*.py")):
        if path == _FRONT:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, why in _PRIVATE:
                if pattern.search(line):
                    found.append(f"{path.relative_to(_ROOT.parent)}:{n}: {why}: "
                                 f"{line.strip()}")
    assert not found, "private schedule state used:\n" + "\n".join(found)


def test_schedule_modules_import_no_private_names_from_each_other() -> None:
    bad = re.compile(r"from toolchain\.[\w.]+ import .*\b_\w|\bst\._\w")
    found = [f"{p.name}:{n}: {line.strip()}"
             for p in sorted((_ROOT / "tir" / "schedule").glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert not found, "\n".join(found)


# --------------------------------------------------------------------------- replace_stmts
def _three_stages() -> ir.PrimFunc:
    A = te.placeholder((8, 4), name="A")
    B = te.compute((8, 4), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 4), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((8, 4), lambda i, j: C[i, j] - B[i, j], name="D")
    return te.create_prim_func([A, D])


def _same_tree(a: ir.Stmt | None, b: ir.Stmt | None) -> bool:
    """The same statement objects where either is an old one, equal new ones elsewhere."""
    if a is b:
        return True
    if type(a) is not type(b) or a is None:
        return False
    kids_a, kids_b = st.children(a), st.children(b)
    return (len(kids_a) == len(kids_b) and str(a) == str(b)
            and all(_same_tree(x, y) for x, y in zip(kids_a, kids_b, strict=True)))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times replace_stmts fell back to the walk over the whole function."""
    calls: list[int] = []
    whole = st.replace_in

    def counted(s: ir.Stmt, mapping: dict) -> ir.Stmt:
        calls.append(len(mapping))
        return whole(s, mapping)

    monkeypatch.setattr(st, "replace_in", counted)
    return calls


def test_replace_stmts_rebuilds_only_the_ancestors_like_the_walk(walks: list[int]) -> None:
    f = _three_stages()
    (rb, pb), (rc, pc), (rd, pd) = (st.find_block(f, n) for n in "BCD")
    ib, jc = st.loops_of(pb)[0], st.loops_of(pc)[1]
    mapping = {id(ib): replace(ib, kind="parallel"),  # a loop
               id(jc): replace(jc, kind="unrolled"),  # a loop in another nest
               id(rd.block): replace(rd.block, annotations={"k": 1}),  # a block
               id(rb): None}  # under the replaced loop ib: the walk never reaches it
    new = st.replace_stmts(f, mapping)
    assert walks == []
    ref = st.replace_stmts_by_walk(f, mapping)
    assert str(new) == str(ref) and _same_tree(new.body, ref.body)
    assert new is not f and new.params is f.params
    assert "for i in T.parallel(8):" in str(new) and "T.unroll(4)" in str(new)
    assert st.find_block(new, "B")[0] is rb  # under the replaced loop: the same object
    # the root block (found without the index) with a nest under it: the nest is not
    # reached; then a removal from a sequence
    top = st.exclusive_nest_top(rc, pc)
    root = st.root_block(f)
    mapping = {id(top): None, id(root): replace(root, annotations={"k": 2})}
    new = st.replace_stmts(f, mapping)
    assert walks == [4]  # only replace_stmts_by_walk's above
    assert str(new) == str(st.replace_stmts_by_walk(f, mapping))
    assert st.block_names(new) == ["B", "C", "D"]
    gone = st.replace_stmts(f, {id(top): None})
    assert walks == [4, 2]
    assert st.block_names(gone) == ["B", "D"]
    assert str(gone) == str(st.replace_stmts_by_walk(f, {id(top): None}))


def _shared_loop_func() -> tuple[ir.PrimFunc, ir.For]:
    """The same For object twice under the root block (no block of its own)."""
    A = ir.Buffer("A", (4,), "float32")
    i = ir.Var("i")
    loop = ir.For(i, 0, 4, "serial", ir.BufferStore(A, ir.convert(1.0, "float32"), (i,)))
    root = ir.Block("root", (), (), (), ir.seq(loop, loop))
    return ir.PrimFunc((A,), ir.BlockRealize((), ir.IntImm(1, "bool"), root)), loop


def test_replace_stmts_falls_back_for_a_shared_statement(walks: list[int]) -> None:
    f, loop = _shared_loop_func()
    new = st.replace_stmts(f, {id(loop): replace(loop, kind="unrolled")})
    assert walks == [1]  # the walk, which replaces it at both places
    assert str(new).count("T.unroll(4)") == 2
    assert st.root_index(f, loop) == 0  # the first item holding it, as a walk finds it


def test_replace_stmts_falls_back_for_what_the_index_does_not_hold(walks: list[int]) -> None:
    f = _three_stages()
    rb, _ = st.find_block(f, "B")
    store = rb.block.body  # a BufferStore: not in the index
    other = ir.BufferStore(store.buffer, ir.convert(0.0, "float32"), store.indices)
    new = st.replace_stmts(f, {id(store): other})
    assert walks == [1] and st.find_block(new, "B")[0].block.body is other
    stranger = _grid(2, 2).body  # not in f at all: nothing changes
    assert str(st.replace_stmts(f, {id(stranger): None})) == str(f) and walks == [1, 1]
    # None where the parent is no sequence: as the walk leaves it
    _, pb = st.find_block(f, "B")
    inner = st.loops_of(pb)[1]
    new = st.replace_stmts(f, {id(inner): None})
    assert len(walks) == 3
    assert str(new) == str(st.replace_stmts_by_walk(f, {id(inner): None}))


def test_readers_writers_and_root_index_agree_with_a_walk() -> None:
    sch = Schedule(_three_stages())
    sch.compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("D"))[0])
    f = sch.mod
    blocks = [(n, p) for n, p in st.walk(f.body)
              if isinstance(n, ir.BlockRealize) and n.block.name_hint != "root"]
    for buf in [b for r, _ in blocks for b in (x.buffer for x in r.block.writes)]:
        for skip in (None, blocks[0][0].block):
            assert st.readers(f, buf, skip) == [
                (n, p) for n, p in blocks if n.block is not skip
                and any(x.buffer is buf for x in n.block.reads)]
            assert st.writers(f, buf, skip) == [
                (n, p) for n, p in blocks if n.block is not skip
                and any(x.buffer is buf for x in n.block.writes)]
    items = st.root_items(f)
    for n, _ in st.walk(f.body):
        if n is f.body or n is st.root_block(f) or n is st.root_block(f).body:
            continue
        assert st.root_index(f, n) == next(
            k for k, item in enumerate(items) if any(x is n for x, _ in st.walk(item)))

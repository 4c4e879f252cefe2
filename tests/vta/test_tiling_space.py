"""The accelerator's tilings as search spaces (toolchain/vta/tiling.py): the default point is
the compiler's search, traces replay, invalid points are refused before anything is built,
a trace skips the search."""

from __future__ import annotations

import numpy as np
import pytest

import toolchain.vta.compile as vcompile
from toolchain.autotune.apply import applying, declared, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.vta.compile import compile_conv2d, compile_dense
from toolchain.vta.fsim import run_fsim
from toolchain.vta.tiling import CONV, DENSE, tiles_of

RNG = np.random.default_rng(3)
W_DENSE = RNG.integers(-128, 128, (96, 64), dtype=np.int8)        # K 6 blocks, N 4 blocks
X_DENSE = RNG.integers(-128, 128, (16, 96), dtype=np.int8)
W_CONV = RNG.integers(-128, 128, (32, 32, 3, 3), dtype=np.int8)
X_CONV = RNG.integers(-128, 128, (32, 8, 8), dtype=np.int8)


def _dense(**kw):
    return compile_dense(W_DENSE, 16, 9, layer="fc", **kw)


def _conv(**kw):
    return compile_conv2d(W_CONV, 8, 8, 10, pad=1, layer="conv", **kw)


def _same(a, b) -> bool:
    return a.program.insn_bytes == b.program.insn_bytes and \
        np.array_equal(a.program.dram, b.program.dram)


@pytest.mark.parametrize("make", [_dense, _conv])
def test_the_default_point_is_the_search_and_replays_it_byte_for_byte(make) -> None:
    with declared() as seen:
        searched = make()
    space = searched.space
    assert space is not None and [s.workload for s in seen] == [space.workload]
    assert space.kind in (DENSE, CONV) and space.default() == searched.point
    assert space.is_valid(space.default())
    # the trace round-trips through JSON and replays the same program
    trace = space.trace(space.default())
    assert Trace.from_json(trace.to_json()) == trace
    with forcing({space.workload: trace}):
        forced = make()
    assert forced.space is None and _same(forced, searched)
    tiles, vt = tiles_of(space, space.default())
    assert _same(make(tiles=tiles, vthreads=vt), searched)


def test_every_valid_point_of_a_small_space_builds_a_correct_program() -> None:
    space = _dense().space
    ref = np.clip((X_DENSE.astype(np.int32) @ W_DENSE.astype(np.int32)) >> 9, -128, 127)
    points = space.valid_points()
    assert 20 < len(points) < space.size
    for p in points[::16]:
        with forcing({space.workload: space.trace(p)}):
            layer = _dense()
        assert layer.point == space.canonical(p)
        out = layer.read_output(run_fsim(layer.program, layer.image(X_DENSE), tokens=True).dram)
        np.testing.assert_array_equal(out, ref, err_msg=str(space.trace(p)))


@pytest.mark.parametrize(("change", "why"), [
    ({"tm": 16, "tk": 6, "vthreads": 4}, "virtual threads split"),
    ({"tm": 3}, "tm=3 is not one of [1, 2, 4, 8, 16]"),
    ({"vthreads": 5}, "vthreads=5 is not one of"),
    ({"split": "k"}, "split='k' is not one of"),
])
def test_invalid_dense_points_are_refused_before_anything_is_built(change, why,
                                                                   monkeypatch) -> None:
    space = _dense().space
    point = {**space.default(), **change}
    with pytest.raises(InvalidPoint, match=why.replace("[", r"\[").replace("]", r"\]")):
        space.check(point)
    built = []
    monkeypatch.setattr(vcompile, "lower_dense", lambda *a: built.append(a))
    with pytest.raises(InvalidPoint, match="breaks"), \
            forcing({space.workload: Trace(space.kind, tuple(point.items()))}):
        _dense()
    assert not built


def test_buffer_overflows_are_refused_with_the_buffer_named() -> None:
    from toolchain.vta.config import VTAConfig
    from toolchain.vta.schedule import DenseShape
    from toolchain.vta.tiling import dense_space

    space = dense_space(DenseShape(64, 1024, 1024), VTAConfig(), "int8", None)
    over = {**space.default(), "tm": 64, "tk": 64, "tn": 32, "vthreads": 1}
    problems = " ".join(space.problems(over))
    assert "INP buffer (2048 rows)" in problems and "WGT buffer (1024 rows)" in problems
    assert "ACC buffer" not in problems
    acc = {**over, "tk": 1, "vthreads": 2, "split": "n", "tn": 32}
    assert [m for m in space.problems(acc) if "ACC" in m] == [
        "vthreads x a tile's accumulator rows fit the ACC buffer (2048 rows)"]
    assert "resident weights (4096 rows) fit the WGT buffer (1024 rows)" in \
        space.problems({**space.default(), "resident": True})


def test_a_record_skips_the_search_and_changes_the_program(monkeypatch) -> None:
    default = _dense()
    space = default.space
    other = next(p for p in space.valid_points() if p != space.default()
                 and p["vthreads"] == 2)
    timed = []
    monkeypatch.setattr(vcompile, "program_cost", lambda prog: timed.append(prog) or 0)
    with applying({space.workload: space.trace(other)}) as applied:
        tuned = _dense()
    assert not timed, "a compile whose record decides the tiling runs no search"
    assert list(applied) == [space.workload] and tuned.point == space.canonical(other)
    assert not _same(tuned, default)
    ref = default.read_output(run_fsim(default.program, default.image(X_DENSE)).dram)
    out = tuned.read_output(run_fsim(tuned.program, tuned.image(X_DENSE), tokens=True).dram)
    np.testing.assert_array_equal(out, ref)


def test_a_record_that_is_no_longer_valid_is_warned_and_the_search_runs() -> None:
    default = _dense()
    space = default.space
    bad = Trace(space.kind, (("tm", 5),))
    with pytest.warns(UserWarning, match="tuning record not applied"), \
            applying({space.workload: bad}) as applied:
        again = _dense()
    assert not applied and _same(again, default) and again.space is not None


@pytest.mark.parametrize("make", [_dense, _conv])
def test_the_search_keeps_the_candidate_with_the_lowest_cost_per_instruction_included(
        monkeypatch, make) -> None:
    """The default search ranks candidates by the cycle model plus INSN_CYCLES an
    instruction (what each instruction costs the RTL beyond its modelled work), not by the
    plain model: the kept program is the cheapest of the candidates on that cost."""
    from toolchain.vta.timing import INSN_CYCLES, estimate_cycles, program_cost

    seen = []
    monkeypatch.setattr(vcompile, "program_cost",
                        lambda prog: seen.append(prog) or program_cost(prog))
    vcompile.CHOSEN.clear()  # the search itself, not the point it chose before
    done = make()
    assert len(seen) > 1
    costs = [estimate_cycles(p) + INSN_CYCLES * len(p.insns) for p in seen]
    assert estimate_cycles(done.program) + INSN_CYCLES * len(done.program.insns) == min(costs)


@pytest.mark.parametrize("make", [_dense, _conv])
def test_a_layer_compiled_again_builds_the_point_its_search_chose_once(monkeypatch,
                                                                       make) -> None:
    """``CHOSEN``: the default search is a function of the layer's inputs and target, so
    the same layer compiled again in the process builds the chosen point alone, to the
    same program; other weights, another requantization or a forced point search (or
    build) anew, and the search after a ``clear()`` chooses the same point."""
    from toolchain.vta.timing import program_cost

    built = []
    monkeypatch.setattr(vcompile, "program_cost",
                        lambda prog: built.append(prog) or program_cost(prog))
    vcompile.CHOSEN.clear()
    first = make()
    assert len(built) > 1
    built.clear()
    with declared() as seen:
        again = make()
    assert built == [] and _same(again, first) and again.point == first.point
    assert [s.workload for s in seen] == [first.space.workload]  # still declared
    vcompile.CHOSEN.clear()
    assert _same(make(), first) and len(built) > 1


@pytest.mark.parametrize("change", [{"weight": "reversed"}, {"shift": 9},
                                    {"target": "renamed"}, {"layer": "conv2"}])
def test_a_layer_with_other_inputs_is_searched_anew(monkeypatch, tmp_path, change) -> None:
    """... by its weights, shift, layer name, and target (here one equal to ``vta`` but
    for its name: the workload key is the same)."""
    from toolchain.target import load_target
    from toolchain.vta.timing import program_cost

    if change.get("target") == "renamed":
        path = tmp_path / "vta-renamed.yaml"
        path.write_text("name: vta-renamed\nkind: vta\nextends: vta\n")
        change = {"target": load_target(str(path))}

    built = []
    monkeypatch.setattr(vcompile, "program_cost",
                        lambda prog: built.append(prog) or program_cost(prog))
    small = np.random.default_rng(4).integers(-128, 128, (16, 16, 1, 1), dtype=np.int8)
    args = {"weight": small, "h": 4, "w": 4, "shift": 10, "layer": "conv"}
    if change.get("weight") == "reversed":
        change = {"weight": small[::-1].copy()}
    vcompile.CHOSEN.clear()
    compile_conv2d(**args)
    assert len(built) > 1
    built.clear()
    compile_conv2d(**{**args, **change})
    assert len(built) > 1

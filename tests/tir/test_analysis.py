"""Block access regions (``toolchain/tir/analysis.py``): the regions of sums of Vars read off
their linear forms are what simplifying and proving give."""

from __future__ import annotations

import random

from toolchain.tir import arith, ir
from toolchain.tir.analysis import access_regions, clip_region, union_region
from toolchain.tir.schedule.compute_location import refresh_regions
from toolchain.tir.structural import structural_equal

I, J, K = ir.Var("i"), ir.Var("j"), ir.Var("k")
RANGES = {I: ir.Range(0, 4), J: ir.Range(1, 3), K: ir.Range(0, 1)}


def _random_sum(rng: random.Random, depth: int = 3) -> ir.PrimExpr:
    """A random tree of Vars and constants under ``+``, ``-`` and ``*`` by a constant."""
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([I, J, K, ir.IntImm(rng.randint(-3, 3))])
    a = _random_sum(rng, depth - 1)
    op = rng.choice(["add", "sub", "mul", "rmul"])
    if op == "mul":
        return a * rng.randint(-2, 3)
    if op == "rmul":
        return ir.Mul(ir.IntImm(rng.randint(-2, 3)), a)
    b = _random_sum(rng, depth - 1)
    return a + b if op == "add" else a - b


def _long_union(column: list[ir.PrimExpr]) -> ir.Range:
    """One dimension of a region the long way: simplify, constant offsets, else bounds."""
    exprs = []
    for e in column:
        s = arith.simplify(e)
        if not any(structural_equal(s, x) for x in exprs):
            exprs.append(s)
    first = exprs[0]
    offs = [arith.simplify(e - first) for e in exprs]
    if all(isinstance(d, ir.IntImm) for d in offs):
        lo, hi = min(d.value for d in offs), max(d.value for d in offs)
        return ir.Range(arith.simplify(first + lo), hi - lo + 1)
    return None  # the bounds: the same code either way


def test_union_of_sums_of_vars_is_what_simplifying_gives() -> None:
    rng = random.Random(7)
    buf = ir.Buffer("A", (64,))
    checked = 0
    for _ in range(400):
        column = [_random_sum(rng) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.5:  # constant offsets of one sum
            column = [column[0] + rng.randint(-2, 2) for _ in range(rng.randint(1, 3))]
        want = _long_union(column)
        if want is None:
            continue
        got = union_region(buf, [(e,) for e in column], RANGES).region[0]
        assert structural_equal(got.min, want.min), (column, got.min, want.min)
        assert structural_equal(got.extent, want.extent), (column, got, want)
        checked += 1
    assert checked > 200


def test_union_of_a_division_is_what_simplifying_gives() -> None:
    rng = random.Random(5)
    buf = ir.Buffer("A", (64,))
    for _ in range(300):
        x, c = _random_sum(rng), rng.randint(1, 16)
        e = ir.FloorDiv(x, c) if rng.random() < 0.5 else ir.FloorMod(x, c)
        want = _long_union([e])
        got = union_region(buf, [(e,)], RANGES).region[0]
        assert structural_equal(got.min, want.min), (e, got.min, want.min)
        assert structural_equal(got.extent, want.extent), (e, got, want)


def test_clip_of_sums_of_vars_is_what_proving_gives() -> None:
    rng = random.Random(11)
    kept = clipped = 0
    for _ in range(300):
        start, ext = _random_sum(rng), rng.randint(1, 3)
        dim = rng.randint(1, 12)
        buf = ir.Buffer("A", (dim,))
        rg = ir.Range(start, ext)
        got = clip_region(ir.BufferRegion(buf, (rg,)), RANGES).region[0]
        end = start + ext
        if arith.prove(start >= 0, RANGES) and arith.prove(end <= dim, RANGES):
            want, kept = rg, kept + 1
        else:
            lo = arith.simplify(ir.Max(start, 0), RANGES)
            hi = arith.simplify(ir.Min(end, dim), RANGES)
            want, clipped = ir.Range(lo, arith.simplify(hi - lo, RANGES)), clipped + 1
        assert structural_equal(got.min, want.min) and structural_equal(
            got.extent, want.extent), (start, ext, dim, got, want)
    assert kept > 30 and clipped > 30


def test_a_reduction_output_is_not_a_read() -> None:
    a, c = ir.Buffer("A", (8, 8)), ir.Buffer("C", (8,))
    vi, vk = ir.Var("vi"), ir.Var("vk")
    ivs = (ir.IterVar(vi, ir.Range(0, 8), "spatial"), ir.IterVar(vk, ir.Range(0, 8), "reduce"))
    body = c.store(c[vi] + a[vi, vk], [vi])
    blk = refresh_regions(ir.Block("C", ivs, (), (), body, c.store(0.0, [vi])))
    assert [str(r) for r in blk.reads] == ["A[vi, vk]"]
    assert [str(r) for r in blk.writes] == ["C[vi]"]
    reads, _ = access_regions(body, {iv.var: iv.dom for iv in ivs})
    assert [str(r) for r in reads] == ["C[vi]", "A[vi, vk]"]  # without the flag: both

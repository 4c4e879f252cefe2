"""Features of a lowered loop program: what the cost model sees of a kernel.

:func:`extract` walks a lowered :class:`~toolchain.tir.ir.PrimFunc` (flat buffers,
unrolled and vectorized loops already expanded) and describes each **loop nest** — the
statements under one innermost loop — by

* its loops: trip count, depth, parallel / unrolled / annotated loops, the innermost
  and the parallel extents;
* its work: arithmetic operations per iteration and in total, vector lanes;
* each **buffer access** (the store and the loads, by buffer): element bytes, scope
  (register tile or memory), the stride of the innermost loop (0: reused, 1:
  contiguous), the bytes touched by the innermost 1, 2, 3 and 4 loop levels and by the
  whole nest, and the reuse (iterations per distinct element).

The nests with the most work are concatenated (heaviest first, zero-padded to
:data:`NESTS`) after a few totals into one vector of :data:`LENGTH` numbers (log-scaled
counts), so kernels of any shape compare in the same space — the model learns across
workloads of one kind (transfer).

>>> from toolchain import te
>>> from toolchain.tir.transform.pipeline import lower
>>> A = te.placeholder((64, 64), name="A")
>>> B = te.compute((64, 64), lambda i, j: A[j, i] * 2.0, name="B")
>>> f = extract(lower(te.create_prim_func([A, B])))
>>> len(f) == LENGTH, bool(f[0] > 0)
(True, True)
>>> print(describe(lower(te.create_prim_func([A, B]))))  # doctest: +NORMALIZE_WHITESPACE
nest 1: trip 4096 depth 2 ops/iter 1 lanes 1
  B (global, 4 B) stride 1, touched 256/16384/16384 B, reuse 1.0
  A (global, 4 B) stride 64, touched 256/16384/16384 B, reuse 1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.tir import ir

#: nests described in the vector (the heaviest), accesses per nest
NESTS = 4
ACCESSES = 4
_LOOP_F = 11
_ACCESS_F = 11
_TOTALS = 6
#: length of the feature vector
LENGTH = _TOTALS + NESTS * (_LOOP_F + ACCESSES * _ACCESS_F)


class _Unknown(Exception):
    pass


def _eval(e: ir.PrimExpr, env: dict[ir.Var, int]) -> int:
    """An index expression's value with loop variables bound (others 0)."""
    if isinstance(e, ir.IntImm):
        return int(e.value)
    if isinstance(e, ir.Var):
        return env.get(e, 0)
    if isinstance(e, ir.Ramp):
        return _eval(e.base, env)
    if isinstance(e, ir.Broadcast | ir.Cast):
        return _eval(e.value, env)
    if isinstance(e, ir.BinaryOp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if isinstance(e, ir.Add):
            return a + b
        if isinstance(e, ir.Sub):
            return a - b
        if isinstance(e, ir.Mul):
            return a * b
        if isinstance(e, ir.FloorDiv | ir.Div) and b:
            return a // b
        if isinstance(e, ir.FloorMod | ir.Mod) and b:
            return a % b
        if isinstance(e, ir.Min):
            return min(a, b)
        if isinstance(e, ir.Max):
            return max(a, b)
    raise _Unknown


@dataclass
class _Access:
    buffer: ir.Buffer
    index: ir.PrimExpr
    lanes: int
    is_store: bool


@dataclass
class _Nest:
    loops: tuple[ir.For, ...]
    ops: int = 0
    lanes: int = 1
    accesses: dict[str, list[_Access]] = field(default_factory=dict)

    @property
    def trip(self) -> int:
        return math.prod(_extent(f) for f in self.loops)


def _extent(f: ir.For) -> int:
    return int(f.extent.value) if isinstance(f.extent, ir.IntImm) else 16


class _Walker:
    def __init__(self) -> None:
        self.nests: dict[int, _Nest] = {}
        self.alloc_bytes = {"local": 0, "global": 0}

    def stmt(self, s: ir.Stmt | None, loops: tuple[ir.For, ...]) -> None:
        if s is None:
            return
        if isinstance(s, ir.For):
            self.stmt(s.body, (*loops, s))
        elif isinstance(s, ir.SeqStmt):
            for x in s.seq:
                self.stmt(x, loops)
        elif isinstance(s, ir.IfThenElse):
            self.stmt(s.then_case, loops)
            self.stmt(s.else_case, loops)
        elif isinstance(s, ir.Allocate):
            n = math.prod(int(d.value) if isinstance(d, ir.IntImm) else 1
                          for d in s.buffer.shape)
            scope = "local" if s.buffer.scope == "local" else "global"
            self.alloc_bytes[scope] += n * max(1, ir.bits_of(s.buffer.dtype) // 8)
            self.stmt(s.body, loops)
        elif isinstance(s, ir.LetStmt | ir.AttrStmt):
            self.stmt(s.body, loops)
        elif isinstance(s, ir.BufferStore):
            nest = self.nests.setdefault(id(loops[-1]) if loops else 0, _Nest(loops))
            lanes = ir.lanes_of(s.value.dtype) if s.value.dtype else 1
            nest.lanes = max(nest.lanes, lanes)
            self._access(nest, _Access(s.buffer, s.indices[0] if s.indices else ir.IntImm(0),
                                       lanes, True))
            self.expr(s.value, nest)
            for i in s.indices:
                self.expr(i, nest, index=True)
        elif isinstance(s, ir.Evaluate):
            nest = self.nests.setdefault(id(loops[-1]) if loops else 0, _Nest(loops))
            self.expr(s.value, nest)
        elif isinstance(s, ir.BlockRealize | ir.Block):
            self.stmt(getattr(s, "block", None) or getattr(s, "body", None), loops)

    def _access(self, nest: _Nest, a: _Access) -> None:
        nest.accesses.setdefault(a.buffer.name, []).append(a)

    def expr(self, e: Any, nest: _Nest, index: bool = False) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, ir.BufferLoad):
                lanes = ir.lanes_of(x.dtype) if x.dtype else 1
                self._access(nest, _Access(x.buffer, x.indices[0] if x.indices
                                           else ir.IntImm(0), lanes, False))
                stack.extend(x.indices)
                continue
            if isinstance(x, ir.BinaryOp):
                if not index and ir.is_float(ir.element_of(x.dtype) if x.dtype else "int32"):
                    nest.ops += ir.lanes_of(x.dtype)
                stack.extend((x.a, x.b))
            elif isinstance(x, ir.Call):
                nest.ops += 1
                stack.extend(x.args)
            elif isinstance(x, ir.Select):
                stack.extend((x.condition, x.true_value, x.false_value))
            elif isinstance(x, ir.Broadcast | ir.Cast | ir.Not):
                stack.append(getattr(x, "value", None) or getattr(x, "a", None))
            elif isinstance(x, ir.Ramp):
                stack.append(x.base)


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _coefficients(a: _Access, loops: tuple[ir.For, ...]) -> list[int | None]:
    try:
        base = _eval(a.index, {})
    except _Unknown:
        return [None] * len(loops)
    out: list[int | None] = []
    for f in loops:
        try:
            out.append(_eval(a.index, {f.loop_var: 1}) - base)
        except _Unknown:
            out.append(None)
    return out


def _access_features(accs: list[_Access], loops: tuple[ir.For, ...]) -> tuple[list[float],
                                                                             dict[str, Any]]:
    a = accs[0]
    elem = max(1, ir.bits_of(a.buffer.dtype) // 8) * max(x.lanes for x in accs)
    coef = _coefficients(a, loops)
    inner = coef[-1] if coef else 0
    exts = [_extent(f) for f in loops]
    touched = []
    for level in range(1, 5):
        sub = list(zip(exts[-level:], coef[-level:], strict=True)) if loops else []
        touched.append(elem * math.prod(e for e, c in sub if c != 0))
    whole = elem * math.prod(e for e, c in zip(exts, coef, strict=True) if c != 0)
    trip = math.prod(exts)
    reuse = trip * elem / max(1, whole)
    local = a.buffer.scope == "local"
    vec = [1.0 if local else 0.0, 1.0 if any(x.is_store for x in accs) else 0.0, _log(elem),
           _log(abs(inner)) if inner is not None else -1.0,
           1.0 if inner == 0 else 0.0, 1.0 if inner == 1 else 0.0,
           *(_log(t) for t in touched), _log(reuse)]
    info = {"name": a.buffer.name, "scope": "local" if local else "global", "elem": elem,
            "stride": inner, "touched": touched[:2] + [whole], "reuse": reuse}
    return vec + [0.0] * (_ACCESS_F - len(vec)), info


def _nest_features(n: _Nest) -> tuple[list[float], list[dict[str, Any]]]:
    loops = n.loops
    kinds = [str(f.kind) for f in loops]
    par = [_extent(f) for f in loops if f.kind == ir.ForKind.PARALLEL]
    vec = [_log(n.trip), float(len(loops)), float(len(par)), _log(math.prod(par) if par else 0),
           float(sum(k == ir.ForKind.UNROLLED for k in kinds)),
           float(sum(bool(f.annotations) for f in loops)),
           _log(_extent(loops[-1]) if loops else 1), _log(n.ops), _log(n.ops * n.trip),
           float(n.lanes), float(len(n.accesses))]
    # the store first, then loads by bytes touched (most first)
    groups = sorted(n.accesses.values(), key=lambda g: (
        not any(x.is_store for x in g), -len(g)))[:ACCESSES]
    infos = []
    for g in groups:
        f, info = _access_features(g, loops)
        vec += f
        infos.append(info)
    vec += [0.0] * (_LOOP_F + ACCESSES * _ACCESS_F - len(vec))
    return vec, infos


def _nests(func: ir.PrimFunc) -> tuple[list[_Nest], dict[str, int]]:
    w = _Walker()
    w.stmt(func.body, ())
    # copies of one nest made by unrolling an outer loop (same loops, same buffers) are one
    # nest with their work added up
    merged: dict[tuple, _Nest] = {}
    for n in w.nests.values():
        sig = (tuple((_extent(f), str(f.kind)) for f in n.loops), tuple(sorted(n.accesses)))
        m = merged.get(sig)
        if m is None:
            merged[sig] = n
        else:
            m.ops += n.ops
            for k, v in n.accesses.items():
                m.accesses[k].extend(v)
    nests = sorted(merged.values(), key=lambda n: -(n.trip * (n.ops + len(n.accesses))))
    return nests, w.alloc_bytes


def extract(func: ir.PrimFunc) -> np.ndarray:
    """The feature vector (length :data:`LENGTH`, float32) of a lowered function."""
    nests, alloc = _nests(func)
    total_ops = sum(n.ops * n.trip for n in nests)
    vec = [_log(total_ops), float(len(nests)), _log(sum(n.trip for n in nests)),
           _log(alloc["local"]), _log(alloc["global"]),
           float(max((n.lanes for n in nests), default=1))]
    for n in nests[:NESTS]:
        vec += _nest_features(n)[0]
    vec += [0.0] * (LENGTH - len(vec))
    return np.asarray(vec, np.float32)


def describe(func: ir.PrimFunc, nests: int = NESTS) -> str:
    """The heaviest loop nests' features in words (what :func:`extract` encodes)."""
    lines = []
    for i, n in enumerate(_nests(func)[0][:nests], 1):
        lines.append(f"nest {i}: trip {n.trip} depth {len(n.loops)} ops/iter {n.ops} "
                     f"lanes {n.lanes}")
        for a in _nest_features(n)[1]:
            t = a["touched"]
            lines.append(f"  {a['name']} ({a['scope']}, {a['elem']} B) stride {a['stride']}, "
                         f"touched {t[0]}/{t[1]}/{t[2]} B, reuse {a['reuse']:.1f}")
    return "\n".join(lines)

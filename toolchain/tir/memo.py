"""The memo of the arithmetic analyses: :func:`~toolchain.tir.arith.simplify`,
``bound_exprs``, ``relax``, ``prove`` and ``disprove`` are pure functions of an expression's
structure and of the ranges of the Vars it reaches, and unrolled, flattened code asks the
same questions again and again (ResNet-18 asks about 10 k distinct ones, MobileNetV2 about
15 k). Their answers are kept here by :func:`memo_key`; Kiln's compile clears them after
each model (``toolchain.bundle.compiler``), so nothing carries from one compile to the
next.

>>> from toolchain.tir import ir
>>> i = ir.Var("i")
>>> calls = []
>>> def count():
...     calls.append(1)
...     return "answer"
>>> a = memoised("demo", i + 1, None, count)
>>> b = memoised("demo", i + 1, None, count)
>>> a[1], b[1], len(calls)
('answer', 'answer', 1)
>>> clear_cache()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolchain.tir import ir
from toolchain.tir.structural import expr_key

#: key -> (input, result); cleared when it grows past :data:`MEMO_LIMIT` entries (each
#: entry keeps its input alive, see ``expr_key``)
MEMO: dict[Any, tuple[Any, Any]] = {}
MEMO_LIMIT = 1 << 15  # ResNet-18 needs ~10 k, MobileNetV2 ~15 k


def memoised(tag: str, e: ir.PrimExpr, ranges: Mapping[ir.Var, ir.Range] | None,
             compute: Callable[[], Any]) -> tuple[Any, Any]:
    """``(the expression first asked about, its answer)`` for question ``tag`` about
    ``e`` under ``ranges``: remembered, or ``compute()`` now and remembered."""
    key = memo_key(tag, e, ranges)
    hit = MEMO.get(key)
    if hit is None:
        hit = (e, compute())
        if len(MEMO) >= MEMO_LIMIT:
            MEMO.clear()
        MEMO[key] = hit
    return hit


def remember(key: Any, e: ir.PrimExpr, answer: Any) -> tuple[Any, Any]:
    """Keep ``(e, answer)`` under ``key`` (a :func:`memo_key` not in :data:`MEMO`) and
    return it: :func:`memoised`'s second half, for callers that look the key up
    themselves (``arith.simplify``, without a closure per call)."""
    hit = (e, answer)
    if len(MEMO) >= MEMO_LIMIT:
        MEMO.clear()
    MEMO[key] = hit
    return hit


def memo_key(tag: str, e: ir.PrimExpr, ranges: Mapping[ir.Var, ir.Range] | None) -> Any:
    """``(tag, structural key of e, ranges of the Vars e depends on)``.

    Only the ranges of Vars reachable from ``e`` (through the ranges' own bounds too) can
    change the answer, so unrelated loops in scope do not split the memo.
    """
    k, found = key_and_vars(e)
    if not ranges or not found:
        return tag, k
    sig = []
    get = _RANGE_KEYS.get
    for v in found:  # each Var once (``key_and_vars``)
        r = ranges.get(v)
        if r is not None:
            rk = get(id(r))
            if rk is None or rk[0] is not r:
                rk = _range_key(r)
            if rk[3]:  # bounds with Vars of their own: the walk below
                return tag, k, _reached(found, ranges)
            sig.append((v, rk[1], rk[2]))
    return tag, k, tuple(sig)


def _reached(found: tuple[ir.Var, ...], ranges: Mapping[ir.Var, ir.Range]) -> tuple:
    """``(v, key of its min, key of its extent)`` for each ranged Var reachable from
    ``found``, through the ranges' bounds too, in the order met."""
    queue = list(found)
    sig = []
    seen: set[ir.Var] = set()
    n = 0
    while n < len(queue):
        v = queue[n]
        n += 1
        if v in seen:
            continue
        seen.add(v)
        r = ranges.get(v)
        if r is not None:
            _, kmin, kext, more = _range_key(r)
            sig.append((v, kmin, kext))
            queue += more
    return tuple(sig)


#: ``id(range) -> (range, key of its min, key of its extent, their Vars)``: a loop's range
#: is in scope of every expression of its body, so its bounds are keyed once (the entry
#: holds the range, so the id stays its own; cleared with the memo)
_RANGE_KEYS: dict[int, tuple[ir.Range, Any, Any, tuple[ir.Var, ...]]] = {}


def _range_key(r: ir.Range) -> tuple[ir.Range, Any, Any, tuple[ir.Var, ...]]:
    """The entry of ``r`` in ``_RANGE_KEYS``, made now."""
    # the bounds' keys and Vars as ``expr_key`` gives them, remembered on them
    kmin, vmin = known_key(r.min) or key_and_vars(r.min)
    kext, vext = known_key(r.extent) or key_and_vars(r.extent)
    known = (r, kmin, kext, vmin + vext)
    if len(_RANGE_KEYS) >= MEMO_LIMIT:
        _RANGE_KEYS.clear()
    _RANGE_KEYS[id(r)] = known
    return known


def key_and_vars(e: ir.PrimExpr) -> tuple[Any, tuple[ir.Var, ...]]:
    """``expr_key(e)`` and the Vars it met (each once, in first-use order), remembered on
    ``e`` (immutable, like :func:`term_key`): the memo asks for the keys of the same
    expressions again and again (every hit walked the whole expression before)."""
    known = e.__dict__.get("_expr_key")
    if known is None:
        if isinstance(e, ir.BinaryOp):
            # a new ``x >= 0`` or ``a - b`` around expressions keyed already: two look-ups,
            # not a walk of both (a fresh tree is walked once, as ``expr_key`` does)
            ka, kb = known_key(e.a), known_key(e.b)
            if ka is not None and kb is not None:
                va, vb = ka[1], kb[1]
                vs = va if not vb else vb if not va else tuple(dict.fromkeys(va + vb))
                known = ((type(e), ka[0], kb[0], e.dtype), vs)
        if known is None:
            found: list[ir.Var] = []
            known = (expr_key(e, found), tuple(dict.fromkeys(found)))
        object.__setattr__(e, "_expr_key", known)
    return known


def known_key(e: ir.PrimExpr) -> tuple[Any, tuple[ir.Var, ...]] | None:
    """What :func:`key_and_vars` gives ``e`` if it is at hand: a Var or an integer
    constant (keyed as ``expr_key`` keys them), or an expression that remembers it."""
    t = type(e)
    if t is ir.Var:
        return e, (e,)
    if t is ir.IntImm:
        return ("i", e.value, e.dtype), ()
    return e.__dict__.get("_expr_key")


def clear_cache() -> None:
    """Forget every memoised result (they are pure, so this only frees memory).

    >>> clear_cache()
    """
    MEMO.clear()
    _RANGE_KEYS.clear()


__all__ = ["MEMO", "MEMO_LIMIT", "clear_cache", "key_and_vars", "known_key", "memo_key",
           "memoised", "remember"]

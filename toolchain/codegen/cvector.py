"""Vector expressions the GCC/Clang vector extensions have no operator for.

:class:`~toolchain.codegen.cstyle.CStyleRenderer` renders ``+ - * /`` and comparisons of
vector values as C operators. What C lacks is written here, in GNU C that gcc and clang
compile to single vector instructions:

* **masks** — a comparison of two ``float32x16`` values is an ``int32x16`` of ``-1``/``0``
  lanes; ``And``/``Or``/``Not`` of conditions are ``& | ~`` of masks; a broadcast scalar
  condition is a splat of ``-1`` or ``0``; a mask of other lane width is converted
  (``__builtin_convertvector`` keeps ``-1``);
* **select** — ``(vt)((m & (it)a) | (~m & (it)b))`` (a C cast between vector types of the
  same size reinterprets the bits); C's ``?:`` takes no vectors;
* **min / max** — a select on ``a < b`` / ``a > b`` (like the scalar helpers: a NaN in
  ``b`` is returned);
* **reinterpret** (``Call(dtype, "reinterpret", (x,))``) — the bits of ``x`` as ``dtype``
  of the same size: a vector cast, or a union for scalars;
* **math calls on vectors** — a lane loop over the scalar function (``kiln_fast_expf``
  for float32 ``exp``), which the C compiler vectorizes once the function is inlined.

Before (a vectorized loop body, lowered)::

    B[i*16:i*16+16] = T.max(A[i*16:i*16+16], T.Broadcast(0.0, 16))

after::

    *(float32x16_u*)(B + i * 16) = __extension__ ({ float32x16 va = *(float32x16_u*)(A
      + i * 16); float32x16 vb = float32x16_splat(0.0f); (float32x16)(((int32x16)(va > vb)
      & (int32x16)va) | (~(int32x16)(va > vb) & (int32x16)vb)); });

>>> from toolchain.codegen.c import CRenderer
>>> from toolchain.tir import ir
>>> r = CRenderer(); r.reset()
>>> x = ir.Broadcast(ir.FloatImm(1.0), 4)
>>> reinterpret(r, ir.Call("int32x4", "reinterpret", (x,)))
'(int32x4)(float32x4_splat(1.0f))'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.errors import UnsupportedError
from toolchain.tir import ir

if TYPE_CHECKING:
    from toolchain.codegen.cstyle import CStyleRenderer

_COMPARE = (ir.LT, ir.LE, ir.GT, ir.GE, ir.EQ, ir.NE)


def _int_type(r: CStyleRenderer, bits: int, lanes: int) -> str:
    return r.ctype(f"int{bits}x{lanes}")


def mask(r: CStyleRenderer, cond: ir.PrimExpr, bits: int) -> str:
    """C expression of a lane mask (``int<bits>x<lanes>``, -1 where ``cond`` holds)."""
    lanes = ir.lanes_of(cond.dtype)
    it = _int_type(r, bits, lanes)
    if isinstance(cond, _COMPARE):
        text = f"({r.expr(cond)})"
        own = ir.bits_of(ir.element_of(cond.a.dtype))
        return text if own == bits else f"__builtin_convertvector({text}, {it})"
    if isinstance(cond, (ir.And, ir.Or)):
        op = "&" if isinstance(cond, ir.And) else "|"
        return f"({mask(r, cond.a, bits)} {op} {mask(r, cond.b, bits)})"
    if isinstance(cond, ir.Not):
        return f"(~{mask(r, cond.a, bits)})"
    if isinstance(cond, ir.Broadcast):
        return f"{it}_splat(({r.expr(cond.value)}) ? -1 : 0)"
    raise UnsupportedError(
        f"{r.dialect} code generation: vector condition {cond} is not a comparison, a logic "
        "of comparisons or a broadcast; compute it as a comparison (or keep the loop scalar)")


def _blend(vt: str, it: str, m: str, a: str, b: str) -> str:
    return f"({vt})((({it}){m} & ({it}){a}) | (~({it}){m} & ({it}){b}))"


def select(r: CStyleRenderer, e: ir.Select) -> str:
    """``Select`` of vectors (``tir.if_then_else`` too) as a mask blend."""
    lanes, elem = ir.lanes_of(e.dtype), ir.element_of(e.dtype)
    vt, it = r.ctype(e.dtype), _int_type(r, ir.bits_of(elem), lanes)
    m, a, b = (r.names.fresh(n) for n in ("vm", "va", "vb"))
    t, f = (r.expr(_widen(v, lanes)) for v in (e.true_value, e.false_value))
    cond = mask(r, _widen(e.condition, lanes), ir.bits_of(elem))
    return (f"__extension__ ({{ {it} {m} = {cond}; "
            f"{vt} {a} = {t}; {vt} {b} = {f}; {_blend(vt, it, m, a, b)}; }})")


def minmax(r: CStyleRenderer, e: ir.Min | ir.Max) -> str:
    """Vector ``Min`` / ``Max`` as a select on ``a < b`` / ``a > b``."""
    lanes, elem = ir.lanes_of(e.dtype), ir.element_of(e.dtype)
    vt, it = r.ctype(e.dtype), _int_type(r, ir.bits_of(elem), lanes)
    a, b = r.names.fresh("va"), r.names.fresh("vb")
    op = "<" if isinstance(e, ir.Min) else ">"
    cmp = f"({a} {op} {b})"  # an integer vector of the same lane width
    return (f"__extension__ ({{ {vt} {a} = {r.expr(_widen(e.a, lanes))}; {vt} {b} = "
            f"{r.expr(_widen(e.b, lanes))}; {_blend(vt, it, cmp, a, b)}; }})")


def reinterpret(r: CStyleRenderer, e: ir.Call) -> str:
    """The bits of ``e.args[0]`` as ``e.dtype`` (same total size)."""
    (x,) = e.args
    src, dst = x.dtype, e.dtype
    size = (ir.bits_of(ir.element_of(src)) * ir.lanes_of(src),
            ir.bits_of(ir.element_of(dst)) * ir.lanes_of(dst))
    if size[0] != size[1]:
        raise UnsupportedError(f"{r.dialect} code generation: reinterpret {src} -> {dst} "
                               f"changes the size ({size[0]} -> {size[1]} bits); cast "
                               "between types of the same size")
    if ir.lanes_of(src) > 1 or ir.lanes_of(dst) > 1:
        return f"({r.ctype(dst)})({r.expr(x)})"
    u = r.names.fresh("bits")
    return (f"__extension__ ({{ union {{ {r.ctype(src)} s; {r.ctype(dst)} d; }} {u}; "
            f"{u}.s = {r.expr(x)}; {u}.d; }})")


def lane_call(r: CStyleRenderer, e: ir.Call, scalar_fn: str) -> str:
    """A math call on vectors: ``scalar_fn`` applied lane by lane in a loop the C compiler
    vectorizes (``scalar_fn`` is the float32 / float64 function or helper name)."""
    lanes = ir.lanes_of(e.dtype)
    vt = r.ctype(e.dtype)
    temps = [r.names.fresh("vx") for _ in e.args]
    out, k = r.names.fresh("vr"), r.names.fresh("lane")
    decls = " ".join(f"{r.ctype(ir.with_lanes(a.dtype, lanes))} {t} = "
                     f"{r.expr(_widen(a, lanes))};" for t, a in zip(temps, e.args, strict=True))
    call = f"{scalar_fn}({', '.join(f'{t}[{k}]' for t in temps)})"
    return (f"__extension__ ({{ {decls} {vt} {out}; for (int {k} = 0; {k} < {lanes}; ++{k}) "
            f"{out}[{k}] = {call}; {out}; }})")


def _widen(v: ir.PrimExpr, lanes: int) -> ir.PrimExpr:
    return v if ir.lanes_of(v.dtype) == lanes else ir.Broadcast(v, lanes)

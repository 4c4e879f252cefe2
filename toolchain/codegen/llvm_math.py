"""Math intrinsics in LLVM IR: the LLVM intrinsic of each TIR math op, and the branch-free
float32 ``exp`` / ``erf`` / ``tanh`` / ``sigmoid`` of :mod:`.fastmath` built from IR.

The meaning of every op is :mod:`.math_intrinsics`'s table. Where LLVM has an intrinsic
(``llvm.exp``, ``llvm.sqrt``, ``llvm.fabs``, ``llvm.nearbyint`` for ``round``...) it is
called for scalars and vectors alike (LLVM lowers it to an instruction or to a libm call);
float32 ``exp erf tanh sigmoid`` are the C backend's polynomial helpers, written here with
the same coefficients (:data:`~toolchain.codegen.fastmath.EXP_COEFFS`...) as straight-line
IR on any number of lanes, so a vectorized loop stays vectorized and both backends agree
to the last bit where the C compiler does not contract differently. ``erf`` (no LLVM
intrinsic) of float64 calls libm's ``erf`` lane by lane.

>>> LLVM_INTRINSICS["round"], LLVM_INTRINSICS["sqrt"]
('llvm.nearbyint', 'llvm.sqrt')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llvmlite import ir as ll

from toolchain.codegen.fastmath import (
    ERF_DEN,
    ERF_NUM,
    EXP_COEFFS,
    LN2_HI,
    LN2_LO,
    TANH_SMALL,
)
from toolchain.tir.dtype import element_of, lanes_of, with_lanes

#: TIR math op -> LLVM intrinsic (overloaded on the float type, scalar or vector)
LLVM_INTRINSICS: dict[str, str] = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "log10": "llvm.log10", "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
    "ceil": "llvm.ceil", "trunc": "llvm.trunc", "sin": "llvm.sin", "cos": "llvm.cos",
    "tan": "llvm.tan", "tanh": "llvm.tanh", "pow": "llvm.pow", "round": "llvm.nearbyint",
    "fma": "llvm.fma",
}
#: TIR math op -> libm function (float64 name; float32 appends ``f``) where LLVM has no
#: intrinsic
LIBM_ONLY: dict[str, str] = {
    "erf": "erf", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
    "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "expm1": "expm1",
    "log1p": "log1p",
}
#: float32 ops built from IR (the C backend's fast-math helpers)
FAST_F32 = ("exp", "erf", "tanh", "sigmoid")


def type_suffix(t: ll.Type) -> str:
    """The overload suffix of an LLVM type (``f32``, ``v8f32``, ``i64``)."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ll.FloatType):
        return "f32"
    if isinstance(t, ll.DoubleType):
        return "f64"
    if isinstance(t, ll.HalfType):
        return "f16"
    if isinstance(t, ll.IntType):
        return f"i{t.width}"
    raise TypeError(f"no intrinsic suffix for LLVM type {t}")


def intrinsic(module: ll.Module, name: str, ret: ll.Type, args: Sequence[ll.Type]
              ) -> ll.Function:
    """``declare`` (once) the overloaded intrinsic ``name`` for type ``ret``."""
    full = f"{name}.{type_suffix(ret)}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ll.Function(module, ll.FunctionType(ret, list(args)), name=full)
    return fn


def external(module: ll.Module, name: str, ret: ll.Type, args: Sequence[ll.Type]
             ) -> ll.Function:
    """``declare`` (once) the C function ``name``."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ll.Function(module, ll.FunctionType(ret, list(args)), name=name)
    return fn


def splat(t: ll.Type, value: float | int) -> ll.Constant:
    """A constant of type ``t`` (every lane ``value`` for a vector type)."""
    if isinstance(t, ll.VectorType):
        return ll.Constant(t, [ll.Constant(t.element, value)] * t.count)
    return ll.Constant(t, value)


def int_like(t: ll.Type) -> ll.Type:
    """i32 (or a vector of i32) with the lanes of float type ``t``."""
    return ll.VectorType(ll.IntType(32), t.count) if isinstance(t, ll.VectorType) else \
        ll.IntType(32)


class FastMath:
    """Builds the float32 fast-math functions at a builder's position (any lane count)."""

    def __init__(self, b: ll.IRBuilder, module: ll.Module, flags: Sequence[str] = ()) -> None:
        """``flags``: the fast-math flags the target allows (``contract`` lets the
        polynomials use FMAs, as GCC contracts the C helpers)."""
        self.b, self.module, self.flags = b, module, tuple(flags)

    def _f(self, inst: ll.Instruction) -> ll.Instruction:
        inst.flags.extend(self.flags)
        return inst

    def fadd(self, x: ll.Value, y: ll.Value) -> ll.Value:
        return self._f(self.b.fadd(x, y))

    def fsub(self, x: ll.Value, y: ll.Value) -> ll.Value:
        return self._f(self.b.fsub(x, y))

    def fmul(self, x: ll.Value, y: ll.Value) -> ll.Value:
        return self._f(self.b.fmul(x, y))

    def fdiv(self, x: ll.Value, y: ll.Value) -> ll.Value:
        return self._f(self.b.fdiv(x, y))

    def _bits(self, x: ll.Value) -> ll.Value:
        return self.b.bitcast(x, int_like(x.type))

    def _float(self, u: ll.Value, t: ll.Type) -> ll.Value:
        return self.b.bitcast(u, t)

    def _clamp_bits(self, bits: ll.Value, limit: int) -> ll.Value:
        """|x| clamped to the float whose bits are ``limit`` (NaN passes), sign kept."""
        b, it = self.b, bits.type
        ax = b.and_(bits, splat(it, 0x7FFFFFFF))
        big = b.and_(b.icmp_unsigned(">", ax, splat(it, limit)),
                     b.icmp_unsigned("<=", ax, splat(it, 0x7F800000)))
        clamped = b.or_(b.and_(bits, splat(it, 0x80000000)), splat(it, limit))
        return b.select(big, clamped, bits)

    def _horner(self, coeffs: Sequence[float], z: ll.Value) -> ll.Value:
        t = z.type
        p = splat(t, coeffs[-1])
        for c in reversed(coeffs[:-1]):
            p = self.fadd(self.fmul(p, z), splat(t, c))
        return p

    def exp(self, x: ll.Value) -> ll.Value:
        """``kiln_fast_expf``: 2^n e^r, e^r by a degree-6 polynomial."""
        b, t = self.b, x.type
        it = int_like(t)
        y = self._float(self._clamp_bits(self._bits(x), 0x42D00000), t)
        tt = self.fadd(self.fmul(y, splat(t, 1.44269504088896341)), splat(t, 12582912.0))
        n = self.fsub(tt, splat(t, 12582912.0))
        r = self.fsub(self.fsub(y, self.fmul(n, splat(t, LN2_HI))),
                      self.fmul(n, splat(t, LN2_LO)))
        p = self._horner(EXP_COEFFS, r)
        k = b.sub(self._bits(tt), splat(it, 0x4B400000))
        k1 = b.sdiv(k, splat(it, 2))
        s1 = self._float(b.shl(b.add(k1, splat(it, 127)), splat(it, 23)), t)
        s2 = self._float(b.shl(b.add(b.sub(k, k1), splat(it, 127)), splat(it, 23)), t)
        return self.fmul(self.fmul(p, s1), s2)

    def erf(self, x: ll.Value) -> ll.Value:
        """``kiln_fast_erff``: x N(x^2) / D(x^2) on |x| <= 4, clamped to +-1."""
        t = x.type
        y = self._float(self._clamp_bits(self._bits(x), 0x40800000), t)
        z = self.fmul(y, y)
        q = self.fdiv(self.fmul(y, self._horner(ERF_NUM, z)), self._horner(ERF_DEN, z))
        return self._float(self._clamp_bits(self._bits(q), 0x3F800000), t)

    def tanh(self, x: ll.Value) -> ll.Value:
        """``kiln_fast_tanhf``: x P(x^2) below 0.625, else 1 - 2 / (exp(2|x|) + 1)."""
        b, t = self.b, x.type
        it = int_like(t)
        bits = self._bits(x)
        ax = b.and_(bits, splat(it, 0x7FFFFFFF))
        a = self._float(b.select(b.icmp_unsigned(">", ax, splat(it, 0x41200000)),
                                 splat(it, 0x41200000), ax), t)
        p = self._horner(TANH_SMALL, self.fmul(x, x))
        e = self.exp(self.fmul(splat(t, 2.0), a))
        one_minus = self.fsub(splat(t, 1.0),
                              self.fdiv(splat(t, 2.0), self.fadd(e, splat(t, 1.0))))
        big = self._float(b.or_(self._bits(one_minus), b.and_(bits, splat(it, 0x80000000))),
                          t)
        small = b.or_(b.icmp_unsigned("<", ax, splat(it, 0x3F200000)),
                      b.icmp_unsigned(">", ax, splat(it, 0x7F800000)))
        return b.select(small, self.fmul(x, p), big)

    def sigmoid(self, x: ll.Value, fabs: Callable[[ll.Value], ll.Value]) -> ll.Value:
        """``kiln_fast_sigmoidf``: 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|)."""
        b, t = self.b, x.type
        e = self.exp(self.fsub(splat(t, -0.0), fabs(x)))
        s = self.fdiv(splat(t, 1.0), self.fadd(splat(t, 1.0), e))
        neg = b.icmp_signed("<", self._bits(x), splat(int_like(t), 0))
        return b.select(neg, self.fmul(e, s), s)


class MathCalls:
    """The math calls of :class:`~toolchain.codegen.llvm.LLVMCodegen` (a mixin: it uses
    the generator's builder ``b``, ``module``, ``fast_math``, ``flag``, ``cast`` and
    ``vtype``)."""

    b: ll.IRBuilder
    module: ll.Module
    fast_math: tuple[str, ...]

    def flag(self, inst: Any) -> ll.Value:  # pragma: no cover - defined by the generator
        raise NotImplementedError

    def cast(self, v: ll.Value, src: str, dst: str) -> ll.Value:  # pragma: no cover
        raise NotImplementedError

    def vtype(self, dtype: str) -> ll.Type:  # pragma: no cover
        raise NotImplementedError

    def math(self, op: str, dtype: str, args: list[ll.Value]) -> ll.Value:
        """Math intrinsic ``op`` on values of float dtype ``dtype`` (scalar or vector)."""
        b, t = self.b, args[0].type
        elem = element_of(dtype)
        if elem == "float16":
            # as the C backend: promote, compute in double, round back
            wide = with_lanes("float64", lanes_of(dtype))
            r = self.math(op, wide, [self.cast(a, dtype, wide) for a in args])
            return self.cast(r, wide, dtype)
        if elem == "float32" and op in FAST_F32:
            fm = FastMath(b, self.module, self.fast_math)
            if op == "sigmoid":
                return fm.sigmoid(args[0], lambda x: self.math("fabs", dtype, [x]))
            return getattr(fm, op)(args[0])
        if op == "sigmoid":
            one = splat(t, 1.0)
            e = self.math("exp", dtype, [self.flag(b.fsub(splat(t, -0.0), args[0]))])
            return self.flag(b.fdiv(one, self.flag(b.fadd(one, e))))
        if op == "rsqrt":
            return self.flag(b.fdiv(splat(t, 1.0), self.math("sqrt", dtype, args)))
        if op == "fmod":
            return b.frem(args[0], args[1])
        if op == "pow" and elem == "float32":
            # kiln_fast_powf: x * x when the exponent is 2 (exactly powf(x, 2))
            sq = self.flag(b.fmul(args[0], args[0]))
            two = b.fcmp_ordered("==", args[1], splat(t, 2.0))
            return b.select(two, sq, self.call_intrinsic("pow", t, args))
        if op in LIBM_ONLY:
            name = LIBM_ONLY[op] + ("f" if elem == "float32" else "")
            st = self.vtype(elem)
            fn = external(self.module, name, st, [st] * len(args))
            if not isinstance(t, ll.VectorType):
                return b.call(fn, args)
            out = ll.Constant(t, ll.Undefined)
            for k in range(t.count):
                lane = [b.extract_element(a, ll.Constant(ll.IntType(32), k)) for a in args]
                out = b.insert_element(out, b.call(fn, lane), ll.Constant(ll.IntType(32), k))
            return out
        return self.call_intrinsic(op, t, args)

    def call_intrinsic(self, op: str, t: ll.Type, args: list[ll.Value]) -> ll.Value:
        """The LLVM intrinsic of ``op`` on type ``t``, with the target's fast-math flags."""
        fn = intrinsic(self.module, LLVM_INTRINSICS[op], t, [t] * len(args))
        return self.b.call(fn, args, fastmath=self.fast_math)


__all__ = ["FAST_F32", "LIBM_ONLY", "LLVM_INTRINSICS", "FastMath", "MathCalls", "external",
           "int_like", "intrinsic", "splat", "type_suffix"]

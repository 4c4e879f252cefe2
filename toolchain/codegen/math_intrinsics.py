"""The table of TIR math intrinsics: what each ``Call`` op means and its C spelling.

``ir.Call(dtype, op, args)`` with an ``op`` below is a math intrinsic. Every backend agrees
with the meaning written here: the reference interpreter
(:mod:`toolchain.tir.interpreter`, numpy) and the C-family renderer
(:mod:`toolchain.codegen.cstyle`). float32 calls the ``f`` variant (``expf``); float64 and
float16 call the double function (float16 is promoted and the result converted back,
which rounds once more).

* ``round`` -> ``nearbyint`` / ``nearbyintf``: nearest integer, **halves to even** (ONNX
  ``Round``, ``numpy.round``). Not C's ``round``, which takes halves away from zero.
* ``sigmoid`` -> helper ``kiln_sigmoid`` / ``kiln_sigmoidf``: ``1 / (1 + exp(-x))``.
* ``rsqrt`` -> ``1.0 / sqrt(x)``.
* ``isnan`` -> the ``isnan`` macro (``bool`` result).
* ``exp exp2 log log2 log10 sqrt tanh erf fabs pow floor ceil trunc sin cos tan fmod
  asin acos atan sinh cosh asinh acosh atanh expm1 log1p`` ->
  the C99 ``<math.h>`` function of the same name.

``nearbyint`` rounds in the current floating-point rounding mode without raising the
inexact exception; generated code never changes the mode, so it is round-to-nearest-even.

The C dialect spells float32 ``exp erf tanh sigmoid pow`` (and ``min``/``max`` in SIMD
loops) as the vectorizable helpers of :mod:`toolchain.codegen.fastmath` (relative error
below 4e-7; ``pow(x, 2)`` exact) unless ``fast_math`` is off (CUDA keeps its own
functions). ``reinterpret`` (``Call(dtype, "reinterpret", (x,))``: the bits of ``x`` as a
type of the same size) is rendered by :mod:`toolchain.codegen.cvector`; it is not a math
function and has no row here.

>>> INTRINSICS["round"].c_function("float32"), INTRINSICS["exp"].c_function("float64")
('nearbyintf', 'exp')
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MathIntrinsic:
    """One row of the table (see the module docstring)."""

    op: str
    #: the C function for float64 (float32 appends ``f``); empty when rendered specially
    c_name: str
    semantics: str
    arity: int = 1

    def c_function(self, dtype: str) -> str:
        """The C function for a scalar ``dtype`` (``expf`` for float32)."""
        return self.c_name + ("f" if dtype == "float32" else "")


_SAME = [("exp", "e to the power x"), ("exp2", "2 to the power x"),
         ("log", "natural logarithm"), ("log2", "base-2 logarithm"),
         ("log10", "base-10 logarithm"), ("sqrt", "square root"),
         ("tanh", "hyperbolic tangent"), ("erf", "error function"),
         ("fabs", "absolute value"), ("floor", "largest integer <= x"),
         ("ceil", "smallest integer >= x"), ("trunc", "integer part, towards zero"),
         ("sin", "sine"), ("cos", "cosine"), ("tan", "tangent"), ("asin", "arc sine"),
         ("acos", "arc cosine"), ("atan", "arc tangent"), ("sinh", "hyperbolic sine"),
         ("cosh", "hyperbolic cosine"), ("asinh", "inverse hyperbolic sine"),
         ("acosh", "inverse hyperbolic cosine"), ("atanh", "inverse hyperbolic tangent"),
         ("expm1", "exp(x) - 1, exact near 0"), ("log1p", "log(1 + x), exact near 0")]

INTRINSICS: dict[str, MathIntrinsic] = {
    **{op: MathIntrinsic(op, op, text) for op, text in _SAME},
    "pow": MathIntrinsic("pow", "pow", "x to the power y", 2),
    "fmod": MathIntrinsic("fmod", "fmod", "remainder of x / y with the sign of x", 2),
    "round": MathIntrinsic(
        "round", "nearbyint",
        "nearest integer, rounding half to even (ONNX Round, numpy.round); C's round() "
        "rounds halves away from zero and is not used"),
    "sigmoid": MathIntrinsic("sigmoid", "", "1 / (1 + exp(-x)), a renderer helper"),
    "rsqrt": MathIntrinsic("rsqrt", "", "1 / sqrt(x)"),
    "isnan": MathIntrinsic("isnan", "isnan", "x is NaN (bool result; a C macro)"),
}

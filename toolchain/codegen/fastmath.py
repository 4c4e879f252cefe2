"""Vectorizable float32 ``exp``, ``erf``, ``tanh`` and ``sigmoid`` for the C renderer.

glibc's ``expf`` / ``erff`` / ``tanhf`` are opaque scalar calls: a loop that calls them
is never vectorized, and a GELU over 16k floats took 170 us. The C dialect therefore
renders float32 ``exp erf tanh sigmoid`` intrinsics as calls of small ``static inline``
functions (``templates/c/fastmath.c.j2``) written from multiply-adds, compares, selects and
float <-> int bit casts only, which gcc and clang inline and vectorize like any arithmetic:

* ``kiln_fast_expf``: ``2^n e^r`` with ``n = rint(x / ln 2)`` (the 1.5 * 2^23 trick),
  ``e^r`` by a degree-6 polynomial, ``2^n`` from exponent bits in two halves (correct down
  to the denormals and up to ``inf``); relative error below 2e-7 over the float range;
* ``kiln_fast_erff``: ``x P(x^2)`` below 0.9, ``1 - exp(-x^2) R(1 / (1 + |x|/2))`` above;
* ``kiln_fast_tanhf``: ``x P(x^2)`` below 0.625, ``1 - 2 / (exp(2|x|) + 1)`` above;
* ``kiln_fast_sigmoidf``: ``1 / (1 + exp(-x))``;
* ``kiln_fast_powf``: ``x * x`` when the exponent is 2 (exactly ``powf(x, 2)``), else
  ``powf``: an exponent read from a constant tensor is loop-invariant, so gcc unswitches
  the loop on it and vectorizes the squaring (``ReduceMean((a - b) ** 2)``).

NaN propagates, ``+-inf`` give the limits. The coefficients below were fitted offline
(iteratively reweighted least squares on Chebyshev nodes, numpy float64, then rounded to
float32) against ``math.exp`` / ``math.erf`` / ``math.tanh``; ``tests/codegen/test_fastmath.py``
checks every function against numpy over the whole float range.

>>> needed({"fast_erf"})
['fast_exp', 'fast_erf']
>>> "kiln_fast_expf" in render_fastmath(["fast_exp"])
True
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"

#: math intrinsic -> helper kind (float32 only; other dtypes call libm)
FAST_OPS: dict[str, str] = {"exp": "fast_exp", "erf": "fast_erf", "tanh": "fast_tanh",
                            "sigmoid": "fast_sigmoid", "pow": "fast_pow"}
#: helper kind -> C function name
FUNCTIONS: dict[str, str] = {
    "fast_exp": "kiln_fast_expf", "fast_erf": "kiln_fast_erff", "fast_tanh": "kiln_fast_tanhf",
    "fast_sigmoid": "kiln_fast_sigmoidf", "fast_pow": "kiln_fast_powf",
    "bitcast_i32": "kiln_bitcast_i32f",
    "bitcast_f32": "kiln_bitcast_f32i",
}
#: kinds each kind calls (defined before it)
_DEPENDS = {"fast_erf": ("fast_exp",), "fast_tanh": ("fast_exp",),
            "fast_sigmoid": ("fast_exp",)}
#: definition order
_ORDER = ("bitcast_i32", "bitcast_f32", "fast_exp", "fast_erf", "fast_tanh", "fast_sigmoid",
          "fast_pow")

#: e^r = sum c_k r^k on |r| <= ln(2)/2 (relative error 1.9e-9 before float rounding)
EXP_COEFFS = (1.0, 1.0, 0.49999991059303284, 0.16666419804096222, 0.041668228805065155,
              0.008374822326004505, 0.0013836767757311463)
#: ln 2 = hi + lo, hi with few mantissa bits so ``n * hi`` is exact
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
#: erf(x) / x = sum c_k z^k, z = x^2 <= 0.81 (relative error 3.4e-10)
ERF_SMALL = (1.128379225730896, -0.37612634897232056, 0.11283706873655319,
             -0.02686002105474472, 0.005202602129429579, -0.0008160794386640191,
             8.447792060906067e-05)
#: erfc(x) e^(x^2) = sum c_k t^k, t = 1 / (1 + x/2), 0.9 <= x <= 4 (erf error 1.4e-10)
ERF_LARGE = (0.001662721741013229, 0.26108333468437195, 0.3920327126979828,
             -0.05626459792256355, 0.6296618580818176, -0.22840580344200134)
#: tanh(x) / x = sum c_k z^k, z = x^2 <= 0.390625 (relative error 3.9e-9)
TANH_SMALL = (1.0, -0.3333325982093811, 0.13331127166748047, -0.05372104421257973,
              0.020590920001268387, -0.005659916903823614)


def _lit(v: float) -> str:
    text = repr(float(v))
    return ("(" + text + "f)") if v < 0 else text + "f"


def needed(kinds: Iterable[str]) -> list[str]:
    """``kinds`` plus the kinds they call, in definition order (unknown kinds dropped).

    >>> needed(["fast_sigmoid", "min"])
    ['fast_exp', 'fast_sigmoid']
    """
    want = set(kinds)
    for k in list(want):
        want.update(_DEPENDS.get(k, ()))
    return [k for k in _ORDER if k in want]


def render_fastmath(kinds: Iterable[str], qualifier: str = "static inline") -> str:
    """C definitions of the fast-math helper ``kinds`` and their dependencies ("" when
    none is a fast-math kind)."""
    order = needed(kinds)
    if not order:
        return ""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    coeffs = {"exp": [_lit(v) for v in EXP_COEFFS], "ln2_hi": _lit(LN2_HI),
              "ln2_lo": _lit(LN2_LO), "erf_small": [_lit(v) for v in ERF_SMALL],
              "erf_large": [_lit(v) for v in ERF_LARGE],
              "tanh_small": [_lit(v) for v in TANH_SMALL]}
    return env.get_template("c/fastmath.c.j2").render(
        kinds=set(order), qualifier=qualifier, c=coeffs).strip("\n")

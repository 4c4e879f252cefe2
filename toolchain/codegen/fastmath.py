"""Vectorizable float32 ``exp``, ``erf``, ``tanh`` and ``sigmoid`` for the C renderer.

glibc's ``expf`` / ``erff`` / ``tanhf`` are opaque scalar calls: a loop that calls them
is never vectorized, and a GELU over 16k floats took 170 us. The C dialect therefore
renders float32 ``exp erf tanh sigmoid`` intrinsics as calls of small ``static inline``
functions (``templates/c/fastmath.c.j2``) written from multiply-adds, compares, selects and
float <-> int bit casts only, which gcc and clang inline and vectorize like any arithmetic:

* ``kiln_fast_expf``: ``2^n e^r`` with ``n = rint(x / ln 2)`` (the 1.5 * 2^23 trick),
  ``e^r`` by a degree-6 polynomial, ``2^n`` from exponent bits in two halves (correct down
  to the denormals and up to ``inf``); relative error below 2e-7 over the float range;
* ``kiln_fast_erff``: ``x N(x^2) / D(x^2)`` on ``|x| <= 4`` (1 beyond), no exp;
* ``kiln_fast_tanhf``: ``x P(x^2)`` below 0.625, ``1 - 2 / (exp(2|x|) + 1)`` above;
* ``kiln_fast_sigmoidf``: ``1 / (1 + exp(-x))``;
* ``kiln_fast_powf``: ``x * x`` when the exponent is 2 (exactly ``powf(x, 2)``), else
  ``powf``: an exponent read from a constant tensor is loop-invariant, so gcc unswitches
  the loop on it and vectorizes the squaring (``ReduceMean((a - b) ** 2)``);
* ``kiln_fast_maxf`` / ``kiln_fast_minf`` (in SIMD loops only): ``a > b ? a : b`` /
  ``a < b ? a : b`` (the results of the plain helpers, NaN in ``b`` returned), on x86
  without AVX-512 as a blend of bit masks: there gcc does not vectorize a loop in which a
  float select feeds more arithmetic (``max(x, 0) * s + b``), since the compare may trap.

NaN propagates, ``+-inf`` give the limits. The coefficients below were fitted offline
(iteratively reweighted least squares on Chebyshev nodes, linearised for the rational,
numpy float64, then rounded to float32) against ``math.exp`` / ``math.erf`` /
``math.tanh``; ``tests/codegen/test_fastmath.py`` checks every function against numpy over
the whole float range.

>>> needed({"fast_tanh"})
['fast_exp', 'fast_tanh']
>>> "kiln_fast_expf" in render_fastmath(["fast_exp"])
True
"""

from __future__ import annotations

import functools
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
    "fast_max": "kiln_fast_maxf", "fast_min": "kiln_fast_minf",
}
#: the other names the template defines (types, bit casts, the select): kept clear of
#: kernel entry names too
SUPPORT_NAMES = ("kiln_f32_bits", "kiln_f32_as_u32", "kiln_u32_as_f32", "kiln_select_f32",
                 "kiln_select_f32_if")
#: kinds each kind calls (defined before it)
_DEPENDS = {"fast_tanh": ("fast_exp",),
            "fast_sigmoid": ("fast_exp",)}
#: definition order
_ORDER = ("fast_max", "fast_min", "fast_exp", "fast_erf", "fast_tanh", "fast_sigmoid",
          "fast_pow")

#: e^r = sum c_k r^k on |r| <= ln(2)/2 (relative error 1.9e-9 before float rounding)
EXP_COEFFS = (1.0, 1.0, 0.49999991059303284, 0.16666419804096222, 0.041668228805065155,
              0.008374822326004505, 0.0013836767757311463)
#: ln 2 = hi + lo, hi with few mantissa bits so ``n * hi`` is exact
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
#: erf(x) / x = N(z) / D(z), z = x^2 <= 16: a (5, 5) rational (relative error 2.8e-8)
ERF_NUM = (1.1283791065216064, 0.19346046447753906, 0.053093116730451584,
           0.003880671923980117, 0.0002846668066922575, 1.9893591343134176e-06)
ERF_DEN = (1.0, 0.5047823786735535, 0.1153174489736557, 0.015201427973806858,
           0.0011852449970319867, 3.74525880033616e-05)
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


@functools.cache
def _templates() -> jinja2.Environment:
    """The jinja2 environment of ``fastmath.c.j2``, made once: a fresh one compiled the
    template again for every bundle (some 7 ms of each compile)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                              lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def render_fastmath(kinds: Iterable[str], qualifier: str = "static inline") -> str:
    """C definitions of the fast-math helper ``kinds`` and their dependencies ("" when
    none is a fast-math kind)."""
    order = needed(kinds)
    if not order:
        return ""
    env = _templates()
    coeffs = {"exp": [_lit(v) for v in EXP_COEFFS], "ln2_hi": _lit(LN2_HI),
              "ln2_lo": _lit(LN2_LO), "erf_num": [_lit(v) for v in ERF_NUM],
              "erf_den": [_lit(v) for v in ERF_DEN],
              "tanh_small": [_lit(v) for v in TANH_SMALL]}
    return env.get_template("c/fastmath.c.j2").render(
        kinds=set(order), qualifier=qualifier, c=coeffs).strip("\n")

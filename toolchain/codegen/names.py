"""C identifiers for names from models and schedules: sanitised, never reserved, unique.

A buffer or variable name reaches the generated C as an identifier. It must not be a C
keyword, and it must not hide anything the generated code (or a header it includes) may
use: a ``<math.h>`` function a float16/float64 kernel calls (``tanh``, ``erf``), a macro
(``NAN``, ``isnan``, ``M_PI``, ``SIZE_MAX``), a ``<stdint.h>``/``<stddef.h>`` type, ``main``,
the renderer's own helpers (prefix ``kiln_``) and vector types (``float32x8``), CUDA's
built-in variables, and every identifier C reserves for the implementation (``__x``,
``_Foo``). :func:`is_reserved` says whether a name is one of those; :func:`sanitize` turns
any string into a valid identifier that is not; :class:`Namer` makes them unique.

Every C name Kiln derives from a model or schedule name goes through these two: the
renderer's, the bundle's (:mod:`toolchain.bundle.names`: 40 characters at most, a hash keeps
long names apart) and the kernel and placeholder names the schedules give TE (keyword
arguments of :func:`sanitize` keep each caller's older conventions, so that no bundle
changed when they were merged).

>>> sanitize("conv 1/w"), sanitize("tanh"), sanitize("_Foo"), sanitize("NAN")
('conv_1_w', 'v_tanh', 'v_Foo', 'v_NAN')
>>> n = Namer()
>>> n(object(), "tanh"), n(object(), "v_tanh"), n(object(), "x"), n(object(), "x")
('v_tanh', 'v_tanh_1', 'x', 'x_1')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

#: C89 .. C23 keywords, GNU spellings the compiler accepts in gnu11, and stdbool's macros
C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Alignas _Alignof _Atomic _BitInt _Bool _Complex _Decimal32
_Decimal64 _Decimal128 _Generic _Imaginary _Noreturn _Static_assert _Thread_local alignas
alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual asm
complex imaginary
""".split())

#: standard <math.h> functions (each also with an ``f`` and an ``l`` suffix) and macros
_MATH_FUNCS = """
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1
fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10
log1p log2 logb lrint lround modf nan nearbyint nextafter nexttoward pow remainder remquo
rint round roundeven scalbln scalbn sin sinh sqrt tan tanh tgamma trunc
""".split()
_MATH_MACROS = """
isnan isinf isfinite isnormal signbit fpclassify isgreater isgreaterequal isless islessequal
islessgreater isunordered issignaling NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL FP_NAN
FP_INFINITE FP_ZERO FP_SUBNORMAL FP_NORMAL FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMAL FP_ILOGB0
FP_ILOGBNAN MATH_ERRNO MATH_ERREXCEPT math_errhandling float_t double_t M_E M_LOG2E M_LOG10E
M_LN2 M_LN10 M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI M_SQRT2 M_SQRT1_2 signgam
""".split()

#: <stdint.h>, <stddef.h>, <stdbool.h> names, the <stdlib.h> names generated code may
#: use (memory, abort), and names of the program and the CUDA/fp16 headers
_LIBC = """
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t int_least8_t int_least16_t
int_least32_t int_least64_t uint_least8_t uint_least16_t uint_least32_t uint_least64_t
int_fast8_t int_fast16_t int_fast32_t int_fast64_t uint_fast8_t uint_fast16_t uint_fast32_t
uint_fast64_t intptr_t uintptr_t intmax_t uintmax_t size_t ssize_t ptrdiff_t wchar_t wint_t
max_align_t nullptr_t NULL offsetof unreachable INTPTR_MIN INTPTR_MAX UINTPTR_MAX INTMAX_MIN
INTMAX_MAX UINTMAX_MAX PTRDIFF_MIN PTRDIFF_MAX SIZE_MAX SIG_ATOMIC_MIN SIG_ATOMIC_MAX
WCHAR_MIN WCHAR_MAX WINT_MIN WINT_MAX INTMAX_C UINTMAX_C CHAR_BIT
__bool_true_false_are_defined EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX abs labs llabs
malloc calloc realloc free aligned_alloc posix_memalign abort exit errno main
threadIdx blockIdx blockDim gridDim warpSize half half2 nv_bfloat16
""".split()

_INT_LIMITS = [f"{p}{k}{b}_{m}" for p in ("", "U") for k in ("INT", "INT_LEAST", "INT_FAST")
               for b in (8, 16, 32, 64) for m in ("MIN", "MAX")]
_INT_CONST = [f"{p}INT{b}_C" for p in ("", "U") for b in (8, 16, 32, 64)]

RESERVED = frozenset(
    C_KEYWORDS | set(_MATH_MACROS) | set(_LIBC) | set(_INT_LIMITS) | set(_INT_CONST)
    | {f + s for f in _MATH_FUNCS for s in ("", "f", "l")})

#: prefix of every helper the renderer defines (``kiln_min_float``, ``kiln_alloc``) and of
#: the entry points (``kiln_<name>``)
HELPER_PREFIX = "kiln_"

# vector types the renderer defines (float32x8, float32x8_u, float32x8_splat) and the
# SIMD types of the intrinsic headers a target prelude may include (int8x16_t, __m512)
_VECTOR_TYPE = re.compile(
    r"(?:u?int|b?float|bool|poly|mfloat)\d*x\d+(?:x\d+)?(?:_t|_u|_splat)?")


def is_reserved(name: str) -> bool:
    """Whether ``name`` must not be used as an identifier in generated C.

    >>> [is_reserved(n) for n in ("erf", "erff", "M_PI", "__x", "_Foo", "_foo", "kiln_a", "x")]
    [True, True, True, True, True, False, True, False]
    """
    return (name in RESERVED or name.startswith(("__", HELPER_PREFIX))
            or (len(name) > 1 and name[0] == "_" and name[1].isupper())
            or _VECTOR_TYPE.fullmatch(name) is not None)


#: :func:`sanitize` keywords for the names the schedules give TE placeholders and kernels:
#: Unicode letters kept, ``v_`` before a leading digit and for ``""``, reserved names left
#: as they are (the renderer sanitises buffer names again; kernels reach C with a prefix)
TE_NAMES = MappingProxyType({"unicode": True, "lead": "v_", "empty": "v_", "reserved": False})


def sanitize(name: str, *, unicode: bool = False, lead: str = "_", empty: str = "v",
             reserved: bool = True, limit: int | None = None) -> str:
    """A C identifier for ``name`` (deterministic) that :func:`is_reserved` accepts.

    Characters outside ``[0-9A-Za-z_]`` become ``_``; a leading digit gets a ``_``; a
    reserved result gets the prefix ``v_`` (leading underscores dropped) until it is free.

    >>> sanitize("3x3"), sanitize("int"), sanitize("kiln_x"), sanitize("")
    ('_3x3', 'v_int', 'v_kiln_x', 'v')

    The keywords change one rule each:

    * ``unicode``: keep every Unicode letter and digit (Python's ``\\w``), not only ASCII;
    * ``lead``: what goes before a leading digit; ``empty``: the name of ``""``;
    * ``reserved=False``: no ``v_`` prefix for reserved names (names that reach C only with a
      prefix, or through the renderer, which sanitises again);
    * ``limit``: a longer result keeps its first ``limit - 9`` characters, then ``_`` and 8
      hex digits of the sha256 of ``name``, so that long names stay apart.

    The schedules name TE placeholders and kernels with :data:`TE_NAMES`:

    >>> sanitize("9lives", **TE_NAMES), sanitize("", **TE_NAMES)
    ('v_9lives', 'v_')
    >>> sanitize("émile/int", unicode=True, reserved=False), sanitize("émile/int")
    ('émile_int', '_mile_int')
    >>> sanitize("layer1.0.conv1.weight" * 3, limit=24)
    'layer1_0_conv1__bdead721'
    """
    s = re.sub(r"\W" if unicode else r"[^0-9A-Za-z_]", "_", name) or empty
    if s[0].isdigit():
        s = lead + s
    while reserved and is_reserved(s):
        s = "v_" + s.lstrip("_")
    if limit is not None and len(s) > limit:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        s = f"{s[:limit - 9]}_{digest}"
    return s


class Namer:
    """Gives each object a unique C name in order of first use (``i``, ``i_1``, ...).

    Names are sanitised (:func:`sanitize`, with ``limit``); a numbered candidate that would
    be reserved (``kiln`` -> ``kiln_1``) is skipped too, unless ``check_numbered=False``.
    ``reserved`` names are never handed out. :meth:`fresh` gives a new name on every call,
    for things that are not objects.

    >>> n = Namer(limit=12, check_numbered=False)
    >>> n.fresh("x"), n.fresh("x", prefix="w_"), n.fresh("x"), n.fresh("kiln"), n.fresh("kiln")
    ('x', 'w_x', 'x_1', 'kiln', 'kiln_1')
    """

    def __init__(self, reserved: Iterable[str] = (), *, limit: int | None = None,
                 check_numbered: bool = True) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set(reserved)
        self.limit = limit
        self.check_numbered = check_numbered
        self._keep: list[Any] = []

    def __call__(self, obj: Any, hint: str) -> str:
        key = id(obj)
        if key not in self.names:
            self.names[key] = self.fresh(hint)
            self._keep.append(obj)  # ids stay unique while the object lives
        return self.names[key]

    def fresh(self, hint: str, prefix: str = "") -> str:
        """A new unique name for ``hint`` (after ``prefix``) that belongs to no object."""
        base = prefix + sanitize(hint, limit=self.limit)
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
            if self.check_numbered and is_reserved(name):
                # "kiln" -> "kiln_1" would enter the helper namespace
                base = name = "v_" + base.lstrip("_")
                n = 0
        self.used.add(name)
        return name

"""Winograd convolution F(2×2, 3×3) and F(4×4, 3×3) for 3×3, stride-1, dilation-1 convs.

Lavin & Gray (CVPR 2016): an ``m×m`` output tile of a 3×3 correlation is

    Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A

for an ``α×α`` input tile ``d`` (α = m + 2) and kernel ``g``. The kernel transform
``U = G g Gᵀ`` is done **at compile time** on the constant weights
(:func:`winograd_weight_transform`, numpy, float64 then cast); the compute here is

1. ``pad``        — zero padding, extended at the bottom/right so whole tiles fit;
2. ``input_tile`` — ``d[c, p, ε, ν]``: the α×α tile ``p`` of channel ``c``;
3. ``data_pack``  — ``V[ε, ν, c, p] = Σ Bᵀ[ε, a] d[c, p, a, b] B[b, ν]``;
4. ``bgemm``      — ``M[ε, ν, k, p] = Σ_c U[ε, ν, c, k] V[ε, ν, c, p]`` (α² batched GEMMs);
5. ``inverse``    — ``Y[k, p, i, j] = Σ Aᵀ[i, a] M[a, b, k, p] A[b, j]``;
6. ``conv2d_winograd`` — scatter the tiles back to ``[N, K, OH, OW]`` (partial tiles are
   cut off).

Multiplications per output: 16/4 = 4 (F(2,3)) and 36/16 = 2.25 (F(4,3)) instead of 9.
F(4,3) uses the points 0, ±1, ±2, ∞ and is less accurate (entries up to 8 in Aᵀ, 1/24 in
G): measured errors are in ``docs/topi.md``.

Example::

    >>> import numpy as np
    >>> from toolchain import te
    >>> w = np.ones((8, 4, 3, 3), np.float32)
    >>> U = winograd_weight_transform(w, 2); U.shape
    (4, 4, 4, 8)
    >>> x = te.placeholder((1, 4, 9, 9), name="x"); u = te.placeholder(U.shape, name="u")
    >>> [d.value for d in conv2d_winograd_nchw(x, u, 2, padding=1).shape]
    [1, 8, 9, 9]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import normalize_padding, pad_spatial
from toolchain.topi.utils import const_matrix, const_shape

Expr = ir.PrimExpr

#: (Aᵀ, G, Bᵀ) per output tile size m (Lavin & Gray, CVPR 2016)
_MATRICES: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (
        np.array([[1, 1, 1, 0],
                  [0, 1, -1, -1]], np.float64),
        np.array([[1, 0, 0],
                  [0.5, 0.5, 0.5],
                  [0.5, -0.5, 0.5],
                  [0, 0, 1]], np.float64),
        np.array([[1, 0, -1, 0],
                  [0, 1, 1, 0],
                  [0, -1, 1, 0],
                  [0, 1, 0, -1]], np.float64),
    ),
    4: (
        np.array([[1, 1, 1, 1, 1, 0],
                  [0, 1, -1, 2, -2, 0],
                  [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], np.float64),
        np.array([[1 / 4, 0, 0],
                  [-1 / 6, -1 / 6, -1 / 6],
                  [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6],
                  [0, 0, 1]], np.float64),
        np.array([[4, 0, -5, 0, 1, 0],
                  [0, -4, -4, 1, 1, 0],
                  [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0],
                  [0, 4, 0, -5, 0, 1]], np.float64),
    ),
}


#: F(4×4, 3×3) with the points 0, 1, −1, 1/2, −2, ∞ (``points="half"``): the same
#: multiplications, a denser Bᵀ (26 non-zeros against 22) and smaller entries in Aᵀ and G,
#: so the float32 error is about 2.5× smaller (Barabasz et al., "Error analysis and
#: improving the accuracy of Winograd convolution for DNNs", 2020; measured in
#: ``docs/tuning.md``). Aᵀ[i, j] = p_j^i, G[j, k] = p_j^k / Π_{l≠j}(p_j − p_l), Bᵀ solves
#: Aᵀ[(G g) ⊙ (Bᵀ d)] = the correlation of d and g.
_F4_HALF: tuple[np.ndarray, np.ndarray, np.ndarray] = (
    np.array([[1, 1, 1, 1, 1, 0],
              [0, 1, -1, 1 / 2, -2, 0],
              [0, 1, 1, 1 / 4, 4, 0],
              [0, 1, -1, 1 / 8, -8, 1]], np.float64),
    np.array([[1, 0, 0],
              [1 / 3, 1 / 3, 1 / 3],
              [-1 / 3, 1 / 3, -1 / 3],
              [-16 / 15, -8 / 15, -4 / 15],
              [1 / 15, -2 / 15, 4 / 15],
              [0, 0, 1]], np.float64),
    np.array([[2, -3, -4, 3, 2, 0],
              [0, -2, 1, 5, 2, 0],
              [0, 2, -5, 1, 2, 0],
              [0, -4, -2, 4, 2, 0],
              [0, 1, -2, -1, 2, 0],
              [0, 2, -3, -4, 3, 2]], np.float64) / 2,
)

#: the interpolation points a Winograd tile can use: Lavin & Gray's (0, ±1, ±2 for F(4×4))
#: or, for F(4×4) only, 0, ±1, 1/2, −2
POINTS = ("lavin", "half")


def winograd_matrices(m: int, points: str = "lavin"
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Aᵀ, G, Bᵀ)`` for F(m×m, 3×3), m in {2, 4}, as float64 arrays; ``points``
    (:data:`POINTS`) picks F(4×4)'s interpolation points.

    >>> at, g, bt = winograd_matrices(4, "half")
    >>> d, w = np.arange(6.0), np.array([1.0, -2.0, 0.5])
    >>> np.allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"))
    True
    """
    if m not in _MATRICES:
        raise OptionError(f"winograd: tile size m = {m} is not supported (use 2 or 4)")
    if points not in POINTS or (points == "half" and m != 4):
        raise OptionError(f"winograd: points {points!r} are not offered for F({m}x{m}) "
                          f"(F(4x4) takes {', '.join(POINTS)}; F(2x2) lavin)")
    at, g, bt = _F4_HALF if points == "half" else _MATRICES[m]
    return at.copy(), g.copy(), bt.copy()


def winograd_weight_transform(weight: np.ndarray, m: int, points: str = "lavin"
                              ) -> np.ndarray:
    """Compile-time kernel transform: OIHW ``[K, C, 3, 3]`` → ``U[α, α, C, K]``,
    ``U[:, :, c, k] = G g[k, c] Gᵀ`` computed in float64, returned in the weight's dtype."""
    w = np.asarray(weight)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise OptionError(f"winograd: weights {list(w.shape)} must be [K, C, 3, 3]")
    _, g, _ = winograd_matrices(m, points)
    u = np.einsum("ai,kcij,bj->abck", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.astype(w.dtype))


def conv2d_winograd_nchw(data: te.Tensor, kernel_pack: te.Tensor, m: int,
                         padding: int | Sequence[int] = 0, out_dtype: str | None = None
                         ) -> te.Tensor:
    """Winograd F(m×m, 3×3) convolution, stride 1, dilation 1, groups 1.

    ``data`` is NCHW; ``kernel_pack`` is ``U[α, α, C, K]`` from
    :func:`winograd_weight_transform`. Returns NCHW ``[N, K, OH, OW]``.
    """
    at, _, bt = winograd_matrices(m)
    alpha = m + 2
    n, c, h, w = const_shape(data, "conv2d_winograd")
    a1, a2, ck, k = const_shape(kernel_pack, "conv2d_winograd")
    if (a1, a2, ck) != (alpha, alpha, c):
        raise OptionError(f"conv2d_winograd: kernel_pack {[a1, a2, ck, k]} must be "
                          f"[{alpha}, {alpha}, {c}, K] for F({m}x{m}, 3x3) on {c} channels; "
                          "make it with winograd_weight_transform(weights, m)")
    pt, pl, pb, pr = normalize_padding(padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    if oh <= 0 or ow <= 0:
        raise OptionError(f"conv2d_winograd: a 3x3 kernel does not fit the padded {h}x{w} "
                          "input")
    odt = out_dtype or data.dtype
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n * nh * nw
    # pad so that every tile (rows up to nh*m + 2) is inside the padded tensor
    padded = pad_spatial(data, (2, 3), (pt, pl), (nh * m + 2 - h - pt, nw * m + 2 - w - pl))

    def tile_pos(p: Expr) -> tuple[Expr, Expr, Expr]:
        return (te.floordiv(p, nh * nw), te.floormod(te.floordiv(p, nw), nh),
                te.floormod(p, nw))

    def tile_f(cc: Expr, p: Expr, eps: Expr, nu: Expr) -> Expr:
        b, th, tw = tile_pos(p)
        return padded[b, cc, th * m + eps, tw * m + nu]

    d = te.compute((c, tiles, alpha, alpha), tile_f, name="input_tile", tag="winograd")
    b_mat = const_matrix(bt.T, "B", odt)
    ra = te.reduce_axis((0, alpha), name="ra")
    rb = te.reduce_axis((0, alpha), name="rb")
    v = te.compute((alpha, alpha, c, tiles), lambda eps, nu, cc, p: te.sum(
        te.cast(d[cc, p, ra, rb], odt) * b_mat[ra, eps] * b_mat[rb, nu], axis=[ra, rb]),
        name="data_pack", tag="winograd")
    rc = te.reduce_axis((0, c), name="rc")
    mm = te.compute((alpha, alpha, k, tiles), lambda eps, nu, kk, p: te.sum(
        te.cast(kernel_pack[eps, nu, rc, kk], odt) * v[eps, nu, rc, p], axis=rc),
        name="bgemm", tag="winograd")
    a_mat = const_matrix(at.T, "A", odt)
    ra2 = te.reduce_axis((0, alpha), name="ra")
    rb2 = te.reduce_axis((0, alpha), name="rb")
    y = te.compute((k, tiles, m, m), lambda kk, p, vh, vw: te.sum(
        mm[ra2, rb2, kk, p] * a_mat[ra2, vh] * a_mat[rb2, vw], axis=[ra2, rb2]),
        name="inverse", tag="winograd")

    def out_f(b: Expr, kk: Expr, yy: Expr, xx: Expr) -> Expr:
        p = (b * nh + te.floordiv(yy, m)) * nw + te.floordiv(xx, m)
        return y[kk, p, te.floormod(yy, m), te.floormod(xx, m)]

    return te.compute((n, k, oh, ow), out_f, name="conv2d_winograd", tag="conv2d_winograd")

"""The tensor-core GEMM on Hopper's warpgroup MMA (``wgmma``, sm_90a): the ``.wgmma`` variant.

``WmmaTiles(wgmma=True)`` (label ``4x1w.1x8f.kf2.sb.p0.v8.wgmma``): the block's warps in
warpgroups of four consecutive ones (128 threads, ``threadIdx.x``), ``wy / 4`` of them
down (``threadIdx.z``) and ``wx`` across (``threadIdx.y``); each warpgroup computes a
``64 x 16 fn`` tile of C (``fm`` is 1: the four warps are its 16-row slices) with the
target's ``wgmma`` products, found by behaviour (:func:`wgmma_intrinsics`)::

    C[i, c, f] += A[d, i, e] * B[c, 8 * d + e, f]      (64 x N x 16 per d pair)

-- the operands read from shared memory in 8 x 16-byte "core matrices" through matrix
descriptors (``targets/cuda-sm90.yaml``), the accumulator in the 128 threads' registers
(``wgmma.accumulator``, lowered by :mod:`toolchain.tir.transform.mma_fragments`). The
shared tiles are not padded row-major tiles but the core-matrix layouts, made by
``transform_layout`` after the operand copies are placed:

- A (``BM x BK``) as ``[BK / 8][BM][8]``: the 8 halves of k ``8 q .. 8 q + 7`` of a row
  consecutive, the rows consecutive (K-major core matrices, no swizzle);
- B (``BK x BN``) as ``[BN / 8][BK][8]`` (MN-major core matrices: the ``.trans`` B);
- the accumulator (``BM x BN``) as ``[BM][BN / 8][8]`` (the behaviour's ``C[i, c, f]``);
- with ``t.pad`` (``p8``, ``p16``) each 8-wide slice of A and B ends ``pad`` halves after
  its rows (``storage_align`` on the slice axis: the stores of a fetch phase, rows of
  different slices, spread over the banks; the descriptors' offsets follow the strides);
  ``t.pad_b`` (``p16b8``: A 16 halves, B 8) gives B its own.

The fetches write 8 halves of one row at once (one 16-byte store: the core matrix's row);
every barrier of the kernel first orders the threads' shared stores for the async proxy
wgmma reads through (``ASYNC_PROXY``: ``fence.proxy.async.shared::cta`` before
``__syncthreads()``); the epilogue (the tail folded in) reads each thread's own registers:
rows ``(warpgroup, 4 warps, 2, 8)``, columns ``(warpgroup, N / 8, 4, 2)``, the thread
``32 w + 4 g + q`` (the ISA's layout). Kernels calling the products are built for sm_90a
(the intrinsics' ``arch_features``).

With ``t.in_flight`` (``.ov1``) the products overlap: the step's call is the target's
``in_flight`` product over the whole step (``fence``, the products, ``commit_group``,
``wait_group 1``: its own group keeps reading its stage while the kernel goes on to the
barrier and the next step's fetch; the previous step's is retired), the fetches run
``stages - 1 - in_flight`` steps ahead (``double_buffer(.., in_flight=)``: a fetch never
overwrites a stage an unretired group reads) and the lowering drains the last group after
the step loop (:mod:`toolchain.tir.transform.drain_wgmma`), before the epilogue reads the
registers.

With ``t.swizzle`` 128 (``.sw128``) the operand tiles are 128-byte swizzled instead
(``transform_layout(.., swizzle=128)``): A as ``[BK / 64][BM][64]``, B as ``[BN / 64][BK][64]``,
rows of 128 bytes whose 16-byte chunks the fetch stores XORed with the row's place in its
1024-byte atom (``flatten_buffer``), unpadded, the tiles on 1024-byte boundaries; the
products are the target's ``swizzle: 128`` ones (descriptors of layout type 1), kept
apart from the core-matrix ones (``WgmmaSet.swizzled``). A row is 64 halves, so a step is
64 of K (``kf`` 4: four k16 calls, each A 32 bytes further into the rows, or in flight one
k64 call) and a warpgroup 64 columns (``fn`` 4: the behaviour's output indices are single
loop variables, and N 128 splits B at 64)::

    C[i, c, f] += A[i, k] * B[k, 8 * c + f]      (64 x 64 x 16 or 64)

Not the default: it has not run on a GPU. ``benchmarks/cuda.py``'s ``SWEEP`` times it.

>>> from toolchain.target import load_target
>>> wg = wgmma_intrinsics(load_target("cuda-sm90"))
>>> wg.accumulator, wg.product(128, 32), wg.fill(128)
('wgmma.accumulator', 'cuda-sm90.wgmma_m64n128k32', 'cuda-sm90.wgmma_fill_64x128')
>>> wgmma_intrinsics(load_target("cuda-sm80")) is None
True
>>> wgmma_shared_bytes(WmmaTiles(4, 1, 1, 8, 2, double_buffer=False, wgmma=True))
12288
>>> wg.product(64, 16, swizzle=128)
'cuda-sm90.wgmma_m64n64k16_sw128'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolchain.errors import KilnError
from toolchain.intrinsics.behaviour import Const, parse_behaviour
from toolchain.schedules.gpu.generic import fold_tail
from toolchain.schedules.gpu.tensorcore import WmmaTiles, gemm_block, loops_under
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule.gpu import ASYNC_COPY, ASYNC_PROXY, DYNAMIC_SHARED_MEMORY

#: threads of a warpgroup, rows of its accumulator tile
WARPGROUP, ROWS = 128, 64
#: halves in a core matrix's row (16 bytes)
CORE = 8
#: the 128-byte swizzle (``WmmaTiles.swizzle``, the intrinsics' ``swizzle`` key) and the
#: halves in one of its rows: a swizzled tile is rows of 64 halves of K (A) or N (B)
SW128, SW_ROW = 128, 64


@dataclass(frozen=True)
class WgmmaSet:
    """A target's warpgroup MMA intrinsics: fills by N, products by (N, K)."""

    fills: tuple[tuple[int, str], ...]
    products: tuple[tuple[tuple[int, int], str], ...]
    accumulator: str
    #: the products left in flight: ``((n, k, groups left running), name)``
    in_flight: tuple[tuple[tuple[int, int, int], str], ...] = ()
    #: the products over 128-byte swizzled tiles (``swizzle: 128``):
    #: ``((n, k, groups left running), name)``
    swizzled: tuple[tuple[tuple[int, int, int], str], ...] = ()

    def fill(self, n: int) -> str | None:
        """The fill of a 64 x ``n`` accumulator, or None."""
        return dict(self.fills).get(n)

    def product(self, n: int, k: int, in_flight: int = 0, swizzle: int = 0) -> str | None:
        """The 64 x ``n`` x ``k`` product (``in_flight`` > 0: the one that leaves that
        many commit groups running; ``swizzle`` 128: over 128-byte swizzled tiles), or
        None."""
        if swizzle:
            return dict(self.swizzled).get((n, k, in_flight)) if swizzle == SW128 else None
        if in_flight:
            return dict(self.in_flight).get((n, k, in_flight))
        return dict(self.products).get((n, k))


def _index_terms(acc: Any) -> list[tuple[tuple[str, int], ...]]:
    """Each index of a behaviour's access as its sorted (variable, coefficient) terms (a
    constant index: ``()``)."""
    return [tuple(sorted(x.terms)) if not x.const else () for x in acc.index]


def _core_matrix_gemm(beh: Any) -> bool:
    """``C[i, c, f] += A[d, i, e] * B[c, 8 * d + e, f]`` exactly."""
    if not beh.accumulate or len(beh.inputs()) != 2:
        return False
    a, b = beh.inputs()
    out, ai, bi = _index_terms(beh.output), _index_terms(a), _index_terms(b)
    if len(out) != 3 or len(ai) != 3 or len(bi) != 3 or any(len(t) != 1 for t in out):
        return False
    (i, _), (c, _), (f, _) = (t[0] for t in out)
    d, e = ai[0][0][0] if ai[0] else "", ai[2][0][0] if ai[2] else ""
    return (ai == [((d, 1),), ((i, 1),), ((e, 1),)]
            and bi == [((c, 1),), tuple(sorted(((d, 8), (e, 1)))), ((f, 1),)]
            and len({i, c, f, d, e}) == 5)


def _swizzled_gemm(beh: Any) -> bool:
    """``C[i, c, f] += A[i, k] * B[k, 8 * c + f]`` exactly (the 128-byte swizzled tiles'
    logical layout: rows of 64 halves, K in A's and N in B's)."""
    if not beh.accumulate or len(beh.inputs()) != 2:
        return False
    a, b = beh.inputs()
    out, ai, bi = _index_terms(beh.output), _index_terms(a), _index_terms(b)
    if len(out) != 3 or len(ai) != 2 or len(bi) != 2 or any(len(t) != 1 for t in out):
        return False
    (i, _), (c, _), (f, _) = (t[0] for t in out)
    k = ai[1][0][0] if len(ai[1]) == 1 else ""
    return (ai == [((i, 1),), ((k, 1),)] and bi == [((k, 1),), tuple(sorted(((c, 8), (f, 1))))]
            and len({i, c, f, k}) == 4)


def wgmma_intrinsics(target: Target) -> WgmmaSet | None:
    """The target's warpgroup products (float16 x float16 -> float32, the core-matrix
    behaviour of the module docstring, 128 lanes) and fills (``C[i, c, f] = 0``) on one
    accumulator scope, found by behaviour; None where it declares none."""
    fills: dict[str, dict[int, str]] = {}
    products: dict[str, dict[tuple[int, int], str]] = {}
    flying: dict[str, dict[tuple[int, int, int], str]] = {}
    swizzled: dict[str, dict[tuple[int, int, int], str]] = {}
    for name, spec in target.intrinsics.items():
        if "instruction" in spec or int(spec.get("lanes", 1)) != WARPGROUP:
            continue
        beh = parse_behaviour(spec["behaviour"], name)
        scopes, dtypes = dict(spec.get("scopes", {})), dict(spec["dtypes"])
        ext = {str(k): int(v) for k, v in dict(spec["extents"]).items()}
        acc = str(scopes.get(beh.output.name, ""))
        if not acc.endswith("accumulator") or dtypes.get(beh.output.name) != "float32":
            continue
        if int(spec.get("swizzle", 0)):  # kept apart: only the .sw128 kernel calls them
            a, b = beh.inputs() if len(beh.inputs()) == 2 else (None, None)
            if (int(spec["swizzle"]) == SW128 and _swizzled_gemm(beh)
                    and (dtypes.get(a.name), dtypes.get(b.name)) == ("float16", "float16")):
                i, c, f = (x.terms[0][0] for x in beh.output.index)
                k = a.index[1].terms[0][0]
                if ext[i] == ROWS and ext[f] == CORE:
                    swizzled.setdefault(acc, {})[(ext[c] * CORE, ext[k],
                                                  int(spec.get("in_flight", 0)))] = \
                        target.intrinsic(name)
        elif not beh.accumulate and isinstance(beh.expr, Const) and beh.expr.value == 0:
            i, c, f = (x.terms[0][0] for x in beh.output.index) \
                if len(beh.output.index) == 3 else ("", "", "")
            if ext.get(i) == ROWS and ext.get(f) == CORE:
                fills.setdefault(acc, {})[ext[c] * CORE] = target.intrinsic(name)
        elif _core_matrix_gemm(beh):
            a, b = beh.inputs()
            if (dtypes.get(a.name), dtypes.get(b.name)) != ("float16", "float16"):
                continue
            i, c, f = (x.terms[0][0] for x in beh.output.index)
            d, e = a.index[0].terms[0][0], a.index[2].terms[0][0]
            g = int(spec.get("in_flight", 0))
            if ext[i] == ROWS and ext[f] == CORE and ext[e] == CORE and g:
                flying.setdefault(acc, {})[(ext[c] * CORE, ext[d] * CORE, g)] = \
                    target.intrinsic(name)
            elif ext[i] == ROWS and ext[f] == CORE and ext[e] == CORE:
                products.setdefault(acc, {})[(ext[c] * CORE, ext[d] * CORE)] = \
                    target.intrinsic(name)
    for acc, prods in products.items():
        if acc in fills:
            return WgmmaSet(tuple(sorted(fills[acc].items())), tuple(sorted(prods.items())),
                            acc, tuple(sorted(flying.get(acc, {}).items())),
                            tuple(sorted(swizzled.get(acc, {}).items())))
    return None


def wgmma_shared_bytes(t: WmmaTiles) -> int:
    """Shared memory of the ``.wgmma`` kernel with tiles ``t``: one or ``t.stages``
    copies of each float16 operand tile (core matrices, ``t.pads`` halves after each
    8-wide slice of A and B; no output tile)."""
    by, bx, bk = 16 * t.wy, 16 * t.fn * t.wx, 16 * t.kf
    halves = t.stages if t.double_buffer else 1
    if t.swizzle:  # rows of 64 halves, no padding (the XOR spreads the stores)
        return halves * (by * bk + bk * bx) * 2
    pa, pb = t.pads
    return halves * ((by * CORE + pa) * bk // CORE + (bk * CORE + pb) * bx // CORE) * 2


def check_tiles(t: WmmaTiles, wg: WgmmaSet) -> tuple[str, str, bool]:
    """``(fill, product, whole)`` for tiles ``t``: the product over the whole step of
    ``16 kf`` where the target declares it (``whole``), else the 16-deep one (called
    ``kf`` times a step; with ``t.swizzle``, the swizzled products);
    :class:`~toolchain.errors.KilnError` where ``t`` is no warpgroup tiling the target's
    products cover.

    >>> from toolchain.target import load_target
    >>> wg = wgmma_intrinsics(load_target("cuda-sm90"))
    >>> check_tiles(WmmaTiles(4, 1, 1, 4, 2, wgmma=True), wg)[1:]
    ('cuda-sm90.wgmma_m64n64k16', False)
    >>> check_tiles(WmmaTiles(4, 1, 1, 8, 2, stages=3, wgmma=True, in_flight=1), wg)[1:]
    ('cuda-sm90.wgmma_m64n128k32_pipe', True)
    """
    n = 16 * t.fn
    if t.wy % 4 or t.fm != 1:
        raise KilnError(f"wgmma: a warpgroup is 4 warps down of 16 rows each (wy a multiple "
                        f"of 4, fm 1), not {t.wy} x {t.fm}")
    for operand, pad in zip("AB", t.pads, strict=True):
        if pad % CORE or not 0 <= pad < 64:
            raise KilnError(f"wgmma: the padding between core-matrix slices is whole "
                            f"16-byte rows under 128 bytes (pad 0, 8, 16 ... 56 halves), not "
                            f"{pad} ({operand})")
    if t.swizzle:
        return _check_swizzled(t, wg, n)
    if t.in_flight:
        if not t.double_buffer or t.stages < t.in_flight + 2:
            raise KilnError(f"wgmma: {t.in_flight} group(s) of products in flight need "
                            f"double-buffered tiles of at least {t.in_flight + 2} stages (a "
                            f"stage for the fetch, one for each group still reading), not "
                            f"{t.stages if t.double_buffer else 1}")
        fill, whole = wg.fill(n), wg.product(n, 16 * t.kf, t.in_flight)
        if fill is None or whole is None:
            raise KilnError(f"wgmma: the target declares no 64 x {n} x {16 * t.kf} "
                            f"warpgroup product leaving {t.in_flight} group(s) in flight "
                            f"(one call a step: the groups are counted in steps)")
        return fill, whole, True
    fill, whole, k16 = wg.fill(n), wg.product(n, 16 * t.kf), wg.product(n, 16)
    if fill is None or (whole or k16) is None:
        raise KilnError(f"wgmma: the target declares no 64 x {n} warpgroup product and fill")
    return fill, whole or k16 or "", whole is not None


def _check_swizzled(t: WmmaTiles, wg: WgmmaSet, n: int) -> tuple[str, str, bool]:
    """:func:`check_tiles` for ``t.swizzle`` (the ``.sw128`` tiles): steps of 64 (``kf`` 4:
    one 128-byte row of K a step), warpgroups 64 wide (``fn`` 4: one row of N), no
    padding; the target's swizzled 64 x 64 x 16 product (four calls a step) or, in
    flight, its 64 x 64 x 64 one (one call a step)."""
    if t.swizzle != SW128:
        raise KilnError(f"wgmma: the swizzled tiles are 128-byte swizzled (swizzle 128), not "
                        f"{t.swizzle}")
    if t.kf != 4 or n != SW_ROW or any(t.pads):
        raise KilnError(f"wgmma: 128-byte swizzled tiles are rows of 64 halves: steps of 64 "
                        f"(kf 4) and warpgroups 64 wide (fn 4), unpadded; not kf {t.kf}, fn "
                        f"{t.fn}, pads {t.pads}")
    if t.in_flight and (not t.double_buffer or t.stages < t.in_flight + 2):
        raise KilnError(f"wgmma: {t.in_flight} group(s) of products in flight need "
                        f"double-buffered tiles of at least {t.in_flight + 2} stages, not "
                        f"{t.stages if t.double_buffer else 1}")
    k = 16 * t.kf if t.in_flight else 16
    fill, prod = wg.fill(n), wg.product(n, k, t.in_flight, SW128)
    if fill is None or prod is None:
        raise KilnError(f"wgmma: the target declares no 64 x {n} x {k} warpgroup product over "
                        f"128-byte swizzled tiles{' left in flight' if t.in_flight else ''}")
    return fill, prod, bool(t.in_flight)


def tile_gemm_wgmma(sch: Schedule, block: Any, target: Target, wg: WgmmaSet,
                    t: WmmaTiles) -> Schedule:
    """``sch`` (a copy) with the float16 GEMM block ``block`` on warpgroup MMA (see the
    module docstring). Raises :class:`~toolchain.errors.KilnError` where a step does not
    apply."""
    from toolchain.schedules.gpu.gemm import operand_buffer, stage_operand

    fill, product, whole = check_tiles(t, wg)
    n = 16 * t.fn
    sch, b, axes = gemm_block(sch, block, "tile_gemm_wgmma")
    wgy = t.wy // 4
    cf = sch.cache_write(b, 0, wg.accumulator)
    sch.set_dtype(b, 0, "float32")  # float32 sums in registers, rounded in the epilogue
    fold_tail(sch, cf)
    copies = [stage_operand(sch, b, operand_buffer(sch.get(b), x)) for x in (0, 1)]
    loops = sch.get_loops(b)
    others = [loops[i] for i in axes.others]
    by, gy, yi = sch.split(loops[axes.y], [None, wgy, ROWS])
    bx, gx, xc, xf = sch.split(loops[axes.x], [None, t.wx, n // CORE, CORE])
    if t.swizzle:  # (k) a row of 64 a step: one call, or four of 16
        ko, *ks, kk = sch.split(loops[axes.reduce[0]], [None, SW_ROW] if whole
                                else [None, SW_ROW // 16, 16])
        steps: tuple[Any, ...] = tuple(ks)
        inner: tuple[Any, ...] = (kk,)
    elif whole:
        ko, kd, ke = sch.split(loops[axes.reduce[0]], [None, 16 * t.kf // CORE, CORE])
        steps, inner = (), (kd, ke)
    else:
        ko, ks0, kd, ke = sch.split(loops[axes.reduce[0]], [None, t.kf, 2, CORE])
        steps, inner = (ks0,), (kd, ke)
    sch.reorder(*others, by, bx, ko, gy, gx, *steps, yi, xc, xf, *inner)
    if wgmma_shared_bytes(t) > (target.max_shared_memory_per_block or 48 * 1024):
        sch.annotate(bx, DYNAMIC_SHARED_MEMORY, 1)
    if t.async_copy:  # the operand tiles are read only after the step's barrier
        sch.annotate(bx, ASYNC_COPY, 1)
    sch.annotate(bx, ASYNC_PROXY, 1)  # wgmma reads shared memory through the async proxy
    bz = (sch.fuse(*others) if len(others) > 1 else others[0]) if others else None
    for s in copies:
        sch.compute_at(s, ko)
    sch.reverse_compute_at(cf, bx)
    # the core-matrix layouts (once the copies are placed: compute_at needs plain
    # indices): A [k / 8][m][8], B [n / 8][k][8], C [m][n / 8][8]
    # (.sw128: A [k / 64][m][64], B [n / 64][k][64], rows of 128 bytes swizzled)
    for blk, operand in ((copies[0], True), (copies[1], True), (b, False)):
        lead = sch.get(blk).writes[0].buffer.ndim - 2  # a batch's leading dimensions
        order = [1, 0, 2] if operand else [0, 1, 2]
        row = SW_ROW if operand and t.swizzle else CORE
        sch.transform_layout(blk, 0, factors=[[None]] * lead + [[None], [None, row]],
                             order=list(range(lead)) + [lead + k for k in order],
                             **({"swizzle": t.swizzle} if operand and t.swizzle else {}))
    for s, pad in zip(copies, t.pads, strict=True):
        if pad:  # the slices' stride off a multiple of 128 bytes: a fetch's rows spread
            nd = sch.get(s).writes[0].buffer.ndim  # over the banks (the descriptors'
            sch.storage_align(s, 0, axis=nd - 3, factor=64, offset=pad)  # offsets follow)
    if t.double_buffer and axes.extents[axes.reduce[0]] > 16 * t.kf:
        for s in copies:  # (in flight: the fetches run stages - 1 - in_flight ahead)
            if t.in_flight:
                sch.double_buffer(s, stages=t.stages, in_flight=t.in_flight)
            else:
                sch.double_buffer(s, stages=t.stages)
    names = {sch.get(gy).loop_var.name + "_init": "threadIdx.z",
             sch.get(gx).loop_var.name + "_init": "threadIdx.y"}
    init = sch.decompose_reduction(b, ko)
    init_loops = sch.get_loops(init)
    init_groups = [(lp, names[sch.get(lp).loop_var.name]) for lp in init_loops
                   if sch.get(lp).loop_var.name in names]
    sch.tensorize(init_loops[-3], fill)
    for lp in steps:
        sch.unroll(lp)
    sch.tensorize(yi, product)
    lanes = epilogue_loops(sch, cf, bx, t, n)
    for s in copies:
        spread_fetch(sch, s, ko, t)
    for loop, tag in (*init_groups, *lanes, (gy, "threadIdx.z"), (gx, "threadIdx.y"),
                      (by, "blockIdx.y"), (bx, "blockIdx.x")):
        sch.bind(loop, tag)
    if bz is not None:
        sch.bind(bz, "blockIdx.z")
    return sch


def epilogue_loops(sch: Schedule, cf: Any, bx: Any, t: WmmaTiles, n: int
                   ) -> list[tuple[Any, str]]:
    """Split the write-back ``cf`` (registers -> global, with the tail) under ``bx`` so
    that each thread reads the accumulator elements it holds: rows ``(warpgroup, warp,
    2, g)``, columns ``(warpgroup, n / 8, q, 2)``, thread ``32 warp + 4 g + q`` (the
    ISA's wgmma accumulator layout), the rest unrolled; returns the loops to bind."""
    ay, ax = loops_under(sch, cf, bx)
    sgy, sw, sh, sg = sch.split(ay, [t.wy // 4, 4, 2, 8])
    sgx, sc, sq, s2 = sch.split(ax, [t.wx, n // CORE, 4, 2])
    sch.reorder(sgy, sgx, sw, sg, sq, sc, sh, s2)
    lane = sch.fuse(sw, sg, sq)
    for lp in (sc, sh, s2):
        sch.unroll(lp)
    return [(sgy, "threadIdx.z"), (sgx, "threadIdx.y"), (lane, "threadIdx.x")]


def spread_fetch(sch: Schedule, s: Any, at: Any, t: WmmaTiles) -> None:
    """An operand fetch ``s`` under loop ``at`` over all the block's threads (warpgroups
    on threadIdx.z/y, their 128 threads on threadIdx.x), up to ``t.vector`` halves a
    thread at once (8: one core-matrix row, one 16-byte load and store; fewer where the
    tile does not split so over the threads: no guarded fetch)."""
    own = loops_under(sch, s, at)
    size = 1
    for lp in own:
        size *= ir.const_int(sch.get(lp).extent) or 1
    threads = t.wy // 4 * t.wx * WARPGROUP
    vec = t.vector  # the widest up to t.vector that splits the tile over the threads evenly
    while vec > 1 and size % (threads * vec):
        vec //= 2
    fused = sch.fuse(*own) if len(own) > 1 else own[0]
    parts = sch.split(fused, [None, t.wy // 4, t.wx, WARPGROUP] + ([vec] if vec > 1 else []))
    for lp, tag in zip(parts[1:4], ("threadIdx.z", "threadIdx.y", "threadIdx.x"),
                       strict=True):
        sch.bind(lp, tag)
    if vec > 1:
        sch.vectorize(parts[4])


__all__ = ["WgmmaSet", "check_tiles", "epilogue_loops", "spread_fetch", "tile_gemm_wgmma",
           "wgmma_intrinsics", "wgmma_shared_bytes"]

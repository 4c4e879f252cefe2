"""The tensor-core GEMM: float16 operands, float32 sums, ``wmma`` fragments.

Chosen by capability: :func:`tensor_core_intrinsics` looks through the target's declared
intrinsics for three behaviours -- zeroing an accumulator fragment (``C[i, j] = 0`` on a
``*accumulator`` scope), a float16 x float16 -> float32 multiply-accumulate into one
(``C[i, j] += A[i, k] * B[k, j]``) and the store of a fragment to shared memory
(``D[i, j] = C[i, j]``) -- never at the target's name. ``cuda-sm80`` / ``cuda-sm90``
declare them as ``wmma`` 16 x 16 x 16 (``targets/cuda-sm80.yaml``), and the same product
over a warp tile of 2 x 2, 4 x 2, 2 x 4 and 4 x 4 fragments (``wmma_f16_32x32x16`` ...:
one call loads each A and B fragment of a 16-deep slice once and makes ``fm * fn``
products; ``TensorCore.warp_mma``, found by the same behaviour with larger extents).

The kernel (:func:`tile_gemm_wmma`) for a block of ``wy x wx`` warps, each warp a
``16 fm x 16 fn`` tile of C (``fm x fn`` fragments), the reduction in steps of ``16 kf``
(the knobs: :class:`WmmaTiles`):

- ``C`` staged twice: ``C_shared`` (a float32 tile of the block, the element-wise tail
  folded into its write-back) filled from ``C_frag`` (``wmma.accumulator``, the warp's
  fragments); ``set_dtype(.., "float32")`` makes the sum float32;
- per step the block fetches the A and B tiles into shared memory (float16, two halves:
  the next step's fetched during this one's products), all its threads cooperating,
  ``vector`` halves a thread at once (8: one 16-byte load and store), into rows padded by
  ``pad`` halves (``storage_align``: the 8 rows a fragment load reads at once fall in 8
  different bank groups); then each warp makes ``kf`` warp-tile products (or, where the
  target declares none for ``fm x fn`` or ``warp_mma`` is off, ``fm * fn * kf``
  16 x 16 x 16 ones);
- at the end each warp stores its fragments to ``C_shared`` (tensorized), and all threads
  write the block's tile out with the tail.

Lanes: the warps are ``threadIdx.z`` (``wy``) and ``threadIdx.y`` (``wx``); ``threadIdx.x``
runs over the 32 lanes of a warp in the fetches and the write-back, and the fragment
operations, warp-collective, are made by every lane together (the SIMT emulation makes
each once per warp: :mod:`toolchain.tir.transform.simt`).

It applies where the shapes are multiples of the tiles (16 on every axis at least) and the
operands are plain row-major loads (``A[.., i, k]``, ``B[.., k, j]``); elsewhere
:func:`try_tile_wmma` returns None and the caller keeps the SIMT tiled kernel (which also
sums in float32 on float16 storage). Before (a float16 ``MatMul`` 64 x 32 x 64)::

    for i, j, k in T.grid(64, 64, 32):
        with T.block("C"): C[vi, vj] += A[vi, vk] * B[vk, vj]

after, abridged (tiles capped at 2 x 2 warps of 2 x 2 fragments, ``WmmaCaps(wy=2, wx=2,
fm=2, fn=2)``: one block of 2 x 2 warps, each 2 x 2 fragments: ``fm`` = ``fn`` = 2,
``kf`` = 2; the fetches and the fragments' fill and store left out; the default caps give
this shape one block of 2 x 1 warps of 2 x 4 fragments)::

    for k_0 in range(1):
        ... A_shared (64 x 32, rows of 40), B_shared (32 x 64, rows of 72) fetched by
            128 threads, 8 halves each at once ...
        for i_1 in T.thread_binding(2, thread="threadIdx.z"):
            for j_1 in T.thread_binding(2, thread="threadIdx.y"):
                for k_1 in T.unroll(2):
                    T.call_extern("int32", "kiln_wmma_f16_32x32x16",
                        T.address_of(A_shared[i_1 * 32, k_1 * 16]),
                        T.address_of(B_shared[k_1 * 16, j_1 * 32]),
                        T.address_of(C_frag[i_1 * 32, j_1 * 32]))

>>> from toolchain import te
>>> from toolchain.target import load_target
>>> from toolchain.tir.schedule import Schedule
>>> A = te.placeholder((64, 32), name="A", dtype="float16")
>>> B = te.placeholder((32, 64), name="B", dtype="float16")
>>> k = te.reduce_axis((0, 32), name="k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> t = load_target("cuda-sm80")
>>> tiles = choose_wmma_tiles(64, 64, 32, tensor_core_intrinsics(t), t,
...                           WmmaCaps(wy=2, wx=2, fm=2, fn=2))
>>> sch = try_tile_wmma(Schedule(te.create_prim_func([A, B, C]), t), "C", t, tiles)
>>> "kiln_wmma_f16_32x32x16" in str(sch.mod)
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from toolchain.errors import KilnError
from toolchain.inprocess import ByTarget
from toolchain.intrinsics.behaviour import Access, Const, parse_behaviour
from toolchain.schedules.gpu.generic import fold_tail
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule.gpu import ASYNC_COPY, DYNAMIC_SHARED_MEMORY


@dataclass(frozen=True)
class TensorCore:
    """A target's tensor-core intrinsics (registered names) and their tile."""

    fill: str
    mma: str
    store: str
    m: int
    n: int
    k: int
    accumulator: str  # the fragments' memory scope
    #: (fm, fn) -> the product over a warp tile of fm x fn fragments in one call (each
    #: operand fragment loaded once), where the target declares one
    warp_mma: tuple[tuple[tuple[int, int], str], ...] = ()

    def warp_product(self, fm: int, fn: int) -> str | None:
        """The intrinsic for an ``fm x fn``-fragment warp tile, or None."""
        return dict(self.warp_mma).get((fm, fn))


@dataclass(frozen=True)
class WmmaTiles:
    """``wy x wx`` warps per block, each a ``(fm m) x (fn n)`` tile of ``fm x fn``
    fragments; steps of ``kf k``."""

    wy: int
    wx: int
    fm: int
    fn: int
    kf: int
    #: the A and B tiles double-buffered (the next step fetched during this one's products)
    double_buffer: bool = True
    #: halves added to each row of the shared A and B tiles (0: none; 8 puts the 8 rows a
    #: fragment load reads at once in 8 different 16-byte bank groups); ``wgmma``: after
    #: each 8-wide slice of their core-matrix layouts
    pad: int = 0
    #: halves a thread fetches per access (8: one 16-byte load and store; 1: scalar)
    vector: int = 1
    #: one call for the warp's fm x fn fragments where the target declares that product
    #: (each operand fragment loaded once a k slice); False: one call per fragment
    warp_mma: bool = True
    #: the 16-byte operand fetches asynchronous (``cp.async`` on sm_80+: ASYNC_COPY), the
    #: step's barrier waiting for them; needs ``vector`` 2, 4 or 8
    async_copy: bool = False
    #: the products as ``mma.sync`` m16n8k16 on ``ldmatrix`` fragments, the accumulators
    #: in registers written out by the epilogue (no float32 shared tile):
    #: :mod:`toolchain.schedules.gpu.mma`; False: ``wmma``
    mma: bool = False
    #: copies of each operand tile with ``double_buffer`` (2; 3 or 4: the fetch of step
    #: ``k + stages - 1`` issued in step ``k``, a deeper ``cp.async`` pipeline)
    stages: int = 2
    #: the products as Hopper's warpgroup MMA (``wgmma``, sm_90a): warps in warpgroups of
    #: four down (``fm`` 1), core-matrix shared tiles, accumulators in registers:
    #: :mod:`toolchain.schedules.gpu.wgmma`
    wgmma: bool = False
    #: ``wgmma``: the commit groups a product call leaves running (``wgmma.wait_group
    #: N``: the step's products overlap the barrier and the next step's fetch), the
    #: fetches running ``stages - 1 - in_flight`` steps ahead; 0: each call waits for its
    #: own products
    in_flight: int = 0
    #: ``wgmma``: B's padding where it differs from A's (``pad`` then A's only; label
    #: ``p16b8``: A 16 halves, B 8); None: ``pad`` for both
    pad_b: int | None = None
    #: ``wgmma``: the operand tiles 128-byte swizzled (128; label ``.sw128``: rows of 64
    #: halves, ``kf`` 4 and ``fn`` 4, no padding), read through descriptors of layout
    #: type 1; 0: the core-matrix tiles
    swizzle: int = 0

    @property
    def pads(self) -> tuple[int, int]:
        """The A and B tiles' padding in halves: ``(pad, pad_b)``, ``pad_b`` defaulting
        to ``pad``.

        >>> WmmaTiles(4, 1, 1, 8, 2, pad=16, pad_b=8, wgmma=True).pads
        (16, 8)
        """
        return self.pad, self.pad if self.pad_b is None else self.pad_b

    def label(self) -> str:
        """A short name: ``4x2w.2x2f.kf2.db.p8.v8`` (warps, fragments a warp, step,
        double buffer or ``sb``, padding (``p16b8``: A's 16, B's 8), fetch width;
        ``.frag`` at the end: one product call per fragment; ``.async``: asynchronous
        fetches; ``.s3``: three stages of operand tiles; ``.ov1``: one group of products
        left in flight; ``.sw128``: 128-byte swizzled operand tiles; ``.mma``:
        ``mma.sync``; ``.wgmma``: warpgroup MMA).

        >>> WmmaTiles(4, 2, 2, 2, 2, pad=8, vector=8).label()
        '4x2w.2x2f.kf2.db.p8.v8'
        >>> WmmaTiles(8, 2, 1, 8, 2, pad=16, pad_b=8, vector=8, wgmma=True).label()
        '8x2w.1x8f.kf2.db.p16b8.v8.wgmma'
        """
        pad_b = f"b{self.pad_b}" if self.pad_b is not None else ""
        return (f"{self.wy}x{self.wx}w.{self.fm}x{self.fn}f.kf{self.kf}."
                f"{'db' if self.double_buffer else 'sb'}.p{self.pad}{pad_b}.v{self.vector}"
                f"{'' if self.warp_mma else '.frag'}{'.async' if self.async_copy else ''}"
                f"{f'.s{self.stages}' if self.stages != 2 else ''}"
                f"{f'.ov{self.in_flight}' if self.in_flight else ''}"
                f"{f'.sw{self.swizzle}' if self.swizzle else ''}{'.mma' if self.mma else ''}"
                f"{'.wgmma' if self.wgmma else ''}")


def tensor_core_intrinsics(target: Target) -> TensorCore | None:
    """The fill / multiply-accumulate / store intrinsics of ``target``, found by their
    declared behaviour, dtypes and scopes (None when it declares no such set): the
    accumulator scope whose fragments are stored to shared memory (``wmma``; the
    ``mma.sync`` set, stored by the kernel's epilogue from registers, is
    :func:`toolchain.schedules.gpu.mma.mma_intrinsics`).

    >>> from toolchain.target import load_target
    >>> tc = tensor_core_intrinsics(load_target("cuda-sm90"))
    >>> tc.mma, (tc.m, tc.n, tc.k)
    ('cuda-sm90.wmma_f16_16x16x16', (16, 16, 16))
    >>> tensor_core_intrinsics(load_target("c-generic")) is None
    True
    """
    for found in tensor_core_sets(target).values():
        if found.store:
            return found
    return None


#: :func:`tensor_core_sets`' answers by target (an equal descriptor finds them): each
#: descriptor's behaviours are parsed once a process instead of at every GEMM stage a
#: schedule tiles
TENSOR_CORE_SETS = ByTarget(limit=64)


def tensor_core_sets(target: Target) -> dict[str, TensorCore]:
    """Per accumulator scope, the fill, products and store (``""`` where there is none)
    that ``target`` declares on it, found by behaviour, dtypes and scopes; a scope without
    a fill or a float16 x float16 -> float32 product is left out. Remembered per target
    (:data:`TENSOR_CORE_SETS`); the target's intrinsics are registered at every call, as
    ``target.intrinsic`` did when the sets were found.

    >>> from toolchain.target import load_target
    >>> sorted(tensor_core_sets(load_target("cuda-sm80")))
    ['mma.accumulator', 'wmma.accumulator']
    """
    key = (target.name, target.source)
    sets = TENSOR_CORE_SETS.get(key, target)
    if sets is None:
        sets = _find_sets(target)
        TENSOR_CORE_SETS.put(key, target, sets)
    elif sets:
        from toolchain.intrinsics import load_intrinsics

        load_intrinsics(target)  # what Target.intrinsic does first
    return dict(sets)


def _find_sets(target: Target) -> dict[str, TensorCore]:
    fills: dict[str, str] = {}
    stores: dict[str, str] = {}
    products: dict[str, dict[tuple[int, int, int], str]] = {}  # scope -> shape -> name
    for name, spec in target.intrinsics.items():
        if "instruction" in spec:
            continue
        beh = parse_behaviour(spec["behaviour"], name)
        scopes, dtypes = dict(spec.get("scopes", {})), dict(spec["dtypes"])
        out = beh.output.name
        acc = next((str(v) for v in scopes.values() if str(v).endswith("accumulator")), None)
        if acc is None:
            continue
        ext = {str(k): int(v) for k, v in dict(spec["extents"]).items()}
        if beh.accumulate and len(beh.inputs()) == 2 and len(ext) == 3:
            a, b = beh.inputs()
            if (dtypes.get(a.name), dtypes.get(b.name), dtypes.get(out)) == (
                    "float16", "float16", "float32") and _is_gemm(beh):
                shape = tuple(ext[v.terms[0][0]] for v in (a.index[0], b.index[1], a.index[1]))
                products.setdefault(acc, {})[shape] = name
        elif not beh.accumulate and isinstance(beh.expr, Const) and beh.expr.value == 0:
            fills[acc] = name
        elif (not beh.accumulate and isinstance(beh.expr, Access)
              and scopes.get(out) == "shared" and dtypes.get(out) == "float32"):
            stores[acc] = name
    sets = {}
    for scope, prods in products.items():
        if scope not in fills:
            continue
        m, n, k = min(prods, key=lambda sh: sh[0] * sh[1] * sh[2])  # the fragment's
        warp = tuple(sorted(((sm // m, sn // n), target.intrinsic(name))
                            for (sm, sn, sk), name in prods.items()
                            if sk == k and sm % m == 0 and sn % n == 0 and (sm, sn) != (m, n)))
        store = stores.get(scope)
        sets[scope] = TensorCore(target.intrinsic(fills[scope]),
                                 target.intrinsic(prods[(m, n, k)]),
                                 target.intrinsic(store) if store else "", m, n, k, scope, warp)
    return sets


def _is_gemm(beh: Any) -> bool:
    """``C[i, j] += A[i, k] * B[k, j]`` exactly (row-major operands)."""
    a, b = beh.inputs()
    idx = [tuple(t.terms for t in x.index) for x in (beh.output, a, b)]
    if any(len(i) != 2 or any(len(t) != 1 or t[0][1] != 1 for t in i) for i in idx):
        return False
    (ci, cj), (ai, ak), (bk, bj) = ([t[0][0] for t in i] for i in idx)
    return ci == ai and cj == bj and ak == bk and len({ci, cj, ak}) == 3


def wmma_shared_bytes(t: WmmaTiles, tc: TensorCore) -> int:
    """Shared memory of the kernel with tiles ``t``: the block's float32 output tile and
    one or two halves (double buffer) of each padded float16 operand tile."""
    by, bx, bk = t.wy * t.fm * tc.m, t.wx * t.fn * tc.n, t.kf * tc.k
    halves = t.stages if t.double_buffer else 1
    return by * bx * 4 + halves * (by * (bk + t.pad) + bk * (bx + t.pad)) * 2


def fetch_vector(t: WmmaTiles, tc: TensorCore, warp: int, most: int = 8) -> int:
    """The widest fetch (8, 4, 2 or 1 halves a thread) that splits both operand tiles
    evenly over the block's threads."""
    threads = t.wy * t.wx * warp
    by, bx, bk = t.wy * t.fm * tc.m, t.wx * t.fn * tc.n, t.kf * tc.k
    v = most
    while v > 1 and ((by * bk) % (threads * v) or (bk * bx) % (threads * v)):
        v //= 2
    return v


@dataclass(frozen=True)
class WmmaCaps:
    """The largest tiles :func:`choose_wmma_tiles` starts from (each halved where it does
    not divide the shape), the padding of the shared rows, and whether the tiles may use
    the shared memory a block can opt in to (dynamic shared memory) or only the static
    amount."""

    wy: int = 4
    wx: int = 2
    fm: int = 2
    fn: int = 2
    kf: int = 2
    pad: int = 8
    optin: bool = False
    #: the operand fetches asynchronous (``WmmaTiles.async_copy``) where they are vectors
    async_copy: bool = False


#: the default tensor-core tiles' caps: 4 x 2 warps of 2 x 4 fragments (a 128 x 128 block
#: tile in the opt-in shared memory) fetched with ``cp.async``, the fastest of the 15 tile
#: variants ``benchmarks/cuda.py --gemm-sweep 4096`` measured on an H200 (2026-11-27:
#: 0.504 ms, 2.82x cuBLAS fp16's kernel; the 64 x 64 static-memory tiles 0.901 ms, 5.04x;
#: docs/tensor_cores.md)
DEFAULT_CAPS = WmmaCaps(wy=4, wx=2, fm=2, fn=4, optin=True, async_copy=True)


def choose_wmma_tiles(ext_y: int, ext_x: int, ext_k: int, tc: TensorCore,
                      target: Target, caps: WmmaCaps = DEFAULT_CAPS) -> WmmaTiles | None:
    """The largest tiles up to ``caps`` (:data:`DEFAULT_CAPS`: 4 x 2 warps, 2 x 4
    fragments a warp, 2 steps of ``k``, opt-in shared memory, ``cp.async``) that divide
    the shapes, then fewer warps on ``y``, on ``x``, fewer fragments, until the block's
    threads and shared memory (:func:`wmma_shared_bytes`; the opt-in amount where
    ``caps.optin``) fit the target's;
    operand rows padded by ``caps.pad`` halves and fetched 8 halves (16 bytes) a thread
    where the tiles split so (:func:`fetch_vector`); None when ``ext_y``, ``ext_x`` or
    ``ext_k`` is not a multiple of the fragment's.

    >>> from toolchain.target import load_target
    >>> t = load_target("cuda-sm80")
    >>> choose_wmma_tiles(4096, 4096, 4096, tensor_core_intrinsics(t), t).label()
    '4x2w.2x4f.kf2.db.p8.v8.async'
    >>> choose_wmma_tiles(48, 16, 16, tensor_core_intrinsics(t), t).label()
    '1x1w.1x1f.kf1.db.p8.v8.async'
    >>> small = WmmaCaps(wy=2, wx=2, fm=2, fn=2)  # 64 x 64, static shared memory
    >>> choose_wmma_tiles(4096, 4096, 4096, tensor_core_intrinsics(t), t, small).label()
    '2x2w.2x2f.kf2.db.p8.v8'
    """
    if ext_y % tc.m or ext_x % tc.n or ext_k % tc.k:
        return None
    warp = target.warp_size or 32
    most = target.max_threads_per_block or 1024

    def largest(total: int, unit: int, cap: int) -> int:
        f = cap
        while f > 1 and total % (unit * f):
            f //= 2
        return f

    smem = target.max_shared_memory_per_block or 48 * 1024
    if caps.optin and target.max_shared_memory_per_block_optin:
        smem = target.max_shared_memory_per_block_optin
    fm = largest(ext_y, tc.m, caps.fm)
    fn = largest(ext_x, tc.n, caps.fn)
    t = WmmaTiles(largest(ext_y, tc.m * fm, caps.wy), largest(ext_x, tc.n * fn, caps.wx),
                  fm, fn, largest(ext_k, tc.k, caps.kf), pad=caps.pad)
    while t.wy * t.wx * warp > most or wmma_shared_bytes(t, tc) > smem:
        for knob in ("wy", "wx", "fn", "fm"):
            if getattr(t, knob) > 1:
                t = replace(t, **{knob: getattr(t, knob) // 2})
                break
        else:
            return None
    vector = fetch_vector(t, tc, warp)
    return replace(t, vector=vector, async_copy=caps.async_copy and vector > 1)


def gemm_block(sch: Schedule, block: Any, who: str) -> tuple[Schedule, Any, Any]:
    """``(a copy of sch, the block, its GEMM axes)`` for a tensor-core kernel (``who``
    names it in the error): a block that is not a GEMM with one reduction axis is a
    :class:`~toolchain.errors.KilnError`."""
    from toolchain.schedules.gpu.gemm import gemm_axes

    sch = sch.copy()
    b = sch.get_block(block) if isinstance(block, str) else block
    blk = sch.get(b)
    axes = gemm_axes(blk)
    if axes is None or len(axes.reduce) != 1:
        raise KilnError(f"{who}: block {blk.name_hint!r} is not a GEMM with one reduction "
                        "axis")
    return sch, b, axes


def tile_gemm_wmma(sch: Schedule, block: Any, target: Target, tc: TensorCore,
                   t: WmmaTiles) -> Schedule:
    """``sch`` (a copy) with the float16 GEMM block ``block`` on tensor cores (see the
    module docstring). Raises :class:`~toolchain.errors.KilnError` (a schedule error)
    where a step does not apply -- e.g. an operand that is not a row-major tile."""
    from toolchain.schedules.gpu.gemm import operand_buffer, stage_operand

    sch, b, axes = gemm_block(sch, block, "tile_gemm_wmma")
    warp = target.warp_size or 32
    cs = sch.cache_write(b, 0, "shared")
    sch.set_dtype(b, 0, "float32")  # float32 sums (and the tile the fragments store to)
    fold_tail(sch, cs, prefix=True)  # a convolution's padded pixels stored only where real
    cf = sch.cache_write(b, 0, tc.accumulator)
    copies = [stage_operand(sch, b, operand_buffer(sch.get(b), n)) for n in (0, 1)]
    loops = sch.get_loops(b)
    product = tc.warp_product(t.fm, t.fn) if t.warp_mma else None
    w = warp_pipeline(sch, loops, axes, t, tc, t.fn, product is not None, copies,
                      wmma_shared_bytes(t, tc) > (target.max_shared_memory_per_block
                                                  or 48 * 1024))
    by, bx, wy, wx, ko, kf, frags, yi, bz = w
    sch.reverse_compute_at(cf, bx)
    sch.reverse_compute_at(cs, bx)
    warp_names = {sch.get(wy).loop_var.name + "_init": "threadIdx.z",
                  sch.get(wx).loop_var.name + "_init": "threadIdx.y"}
    init = sch.decompose_reduction(b, ko)
    init_warps = fill_fragments(sch, init, warp_names, frags, product is not None, t, tc)
    for lp in (kf, *frags):
        sch.unroll(lp)
    sch.tensorize(yi, product or tc.mma)
    # the fragments' store: per warp, (16 fm) x (16 fn) of the block's tile
    ay, ax = loops_under(sch, cf, bx)
    swy, sfy, sy = sch.split(ay, [t.wy, t.fm, tc.m])
    swx, sfx, sx = sch.split(ax, [t.wx, t.fn, tc.n])
    sch.reorder(swy, swx, sfy, sfx, sy, sx)
    sch.unroll(sfy)
    sch.unroll(sfx)
    sch.tensorize(sy, tc.store)
    for s, at in ((cs, bx), *((c, ko) for c in copies)):
        spread_over_block(sch, s, at, t, warp, fetch=s is not cs)
    for loop, tag in (*init_warps, (swy, "threadIdx.z"),
                      (swx, "threadIdx.y"), (wy, "threadIdx.z"), (wx, "threadIdx.y"),
                      (by, "blockIdx.y"), (bx, "blockIdx.x")):
        sch.bind(loop, tag)
    if bz is not None:
        sch.bind(bz, "blockIdx.z")
    return sch


def warp_pipeline(sch: Schedule, loops: list[Any], axes: Any, t: WmmaTiles, tc: TensorCore,
                  cols: int, warp_tile: bool, copies: list[Any], dynamic: bool
                  ) -> tuple[Any, ...]:
    """The loop structure both tensor-core GEMMs (wmma here, ``mma.sync`` in
    :mod:`~toolchain.schedules.gpu.mma`) share: the output rows and columns split into
    blocks, warps and (unless ``warp_tile``: one product call a warp tile) ``tc.m x
    tc.n`` tiles, ``cols`` of them across a warp; the reduction into block steps of
    ``t.kf`` calls; the operand ``copies`` fetched at each step (``t.stages`` deep where
    ``t.double_buffer``), with dynamic shared memory where ``dynamic`` and asynchronous
    copies where ``t.async_copy``. Returns ``(by, bx, wy, wx, ko, kf, frags, yi, bz)``:
    ``frags`` the tile loops (empty for a warp tile), ``bz`` the fused batch loop or
    None."""
    others = [loops[i] for i in axes.others]
    if warp_tile:
        by, wy, yi = sch.split(loops[axes.y], [None, t.wy, t.fm * tc.m])
        bx, wx, xi = sch.split(loops[axes.x], [None, t.wx, cols * tc.n])
        frags: tuple[Any, ...] = ()
    else:
        by, wy, fy, yi = sch.split(loops[axes.y], [None, t.wy, t.fm, tc.m])
        bx, wx, fx, xi = sch.split(loops[axes.x], [None, t.wx, cols, tc.n])
        frags = (fy, fx)
    ko, kf, ki = sch.split(loops[axes.reduce[0]], [None, t.kf, tc.k])
    sch.reorder(*others, by, bx, ko, wy, wx, kf, *frags, yi, xi, ki)
    if dynamic:  # beyond the static 48 KiB: opt in (dynamic)
        sch.annotate(bx, DYNAMIC_SHARED_MEMORY, 1)
    if t.async_copy:  # the operand tiles are read only after the step's barrier
        sch.annotate(bx, ASYNC_COPY, 1)
    bz = (sch.fuse(*others) if len(others) > 1 else others[0]) if others else None
    for s in copies:
        sch.compute_at(s, ko)
        if t.double_buffer and axes.extents[axes.reduce[0]] > tc.k * t.kf:
            sch.double_buffer(s, stages=t.stages)
    return by, bx, wy, wx, ko, kf, frags, yi, bz


def fill_fragments(sch: Schedule, init: Any, warp_names: dict[str, str],
                    frags: tuple[Any, ...], warp_tile: bool, t: WmmaTiles,
                    tc: TensorCore) -> list[tuple[Any, str]]:
    """Tensorize the reduction's init block ``init`` as one fill a fragment, the fragment
    loops unrolled (a fragment array indexed by constants stays in registers); returns
    its warp loops with their thread tags (bound by the caller). Its loops are copies of
    the spatial loops under the step loop (wy, wx, [fy, fx,] yi, xi; those of extent 1
    left out), the tile's two innermost; with one product a warp tile (``warp_tile``)
    there is no fy, fx: the warp tile's rows and columns are split into fragments here."""
    init_loops = sch.get_loops(init)
    init_warps = [(lp, warp_names[sch.get(lp).loop_var.name]) for lp in init_loops[:-2]
                  if sch.get(lp).loop_var.name in warp_names]
    if warp_tile:
        iy, ix = init_loops[-2:]
        ify, iyi = sch.split(iy, [t.fm, tc.m])
        ifx, ixi = sch.split(ix, [t.fn, tc.n])
        sch.reorder(ify, ifx, iyi, ixi)
        init_frags, fill_at = [ify, ifx], iyi
    else:
        frag_names = {sch.get(lp).loop_var.name + "_init" for lp in frags}
        init_frags = [lp for lp in init_loops[:-2] if sch.get(lp).loop_var.name in frag_names]
        fill_at = init_loops[-2]
    for lp in init_frags:
        if ir.const_int(sch.get(lp).extent) != 1:
            sch.unroll(lp)
    sch.tensorize(fill_at, tc.fill)
    return init_warps


def spread_over_block(sch: Schedule, s: Any, at: Any, t: WmmaTiles, warp: int, fetch: bool) -> None:
    """The loops of the write-back or an operand fetch ``s`` under loop ``at`` over all the
    block's threads, lanes innermost; a fetch ``t.vector`` halves a thread (a vectorized
    loop: one 16-byte access for 8) into rows padded by ``t.pad`` halves
    (``storage_align``: stride % 64 == (row + pad) % 64)."""
    own = loops_under(sch, s, at)
    row = ir.const_int(sch.get(own[-1]).extent)
    fused = sch.fuse(*own) if len(own) > 1 else own[0]
    vec = t.vector if fetch else 1
    parts = sch.split(fused, [None, t.wy, t.wx, warp] + ([vec] if vec > 1 else []))
    for lp, tag in zip(parts[1:4], ("threadIdx.z", "threadIdx.y", "threadIdx.x"),
                       strict=True):
        sch.bind(lp, tag)
    if vec > 1:
        sch.vectorize(parts[4])
    if fetch and t.pad and row is not None:
        nd = sch.get(s).writes[0].buffer.ndim
        sch.storage_align(s, 0, axis=nd - 2, factor=64, offset=(row + t.pad) % 64)


def smem_limit(target: Target, need: int) -> int:
    """The shared memory the kernel may use: the target's static amount, or the amount a
    block may opt in to (dynamic shared memory) where ``need`` is beyond the static."""
    static = target.max_shared_memory_per_block or 48 * 1024
    optin = target.max_shared_memory_per_block_optin
    return optin if optin and need > static else static


def loops_under(sch: Schedule, block: Any, at: Any) -> list[Any]:
    """The loops of ``block`` under loop ``at``."""
    var = sch.get(at).loop_var
    loops = sch.get_loops(block)
    return loops[next(i for i, lp in enumerate(loops) if sch.get(lp).loop_var is var) + 1:]


def try_tile_wmma(sch: Schedule, block: Any, target: Target,
                  tiles: WmmaTiles | None = None, default: WmmaTiles | None = None
                  ) -> Schedule | None:
    """:func:`tile_gemm_wmma` where the target has tensor cores, the block is a float16
    GEMM whose shapes the tiles divide and whose lowered kernel fits the target's shared
    memory; else None (the caller keeps its other kernel). ``tiles`` (the kernel's knobs)
    instead of :func:`choose_wmma_tiles`: None too where they do not divide the shapes or
    give B its own pad (``pad_b``) outside the ``.wgmma`` kernel. ``default``: the tiles
    that replace :func:`choose_wmma_tiles`' as the default point of the kernel's search
    space (a convolution's, :func:`~toolchain.schedules.gpu.conv_tc.conv_wmma_tiles`),
    where they divide the shapes; tuning and records still decide."""
    from toolchain.schedules.gpu.gemm import gemm_axes, lowered_shared_bytes

    tc = tensor_core_intrinsics(target)
    if tc is None:
        return None
    b = sch.get_block(block) if isinstance(block, str) else block
    blk = sch.get(b)
    axes = gemm_axes(blk)
    if axes is None or len(axes.reduce) != 1 or blk.body.buffer.dtype != "float16":
        return None
    mul = blk.body.value.b
    if not all(isinstance(x, ir.BufferLoad) and x.dtype == "float16" for x in (mul.a, mul.b)):
        return None  # a padded or cast operand: the SIMT tiled kernel
    ext = axes.extents
    t = choose_wmma_tiles(ext[axes.y], ext[axes.x], ext[axes.reduce[0]], tc, target)
    if t is None:
        return None
    if default is not None and tiles is None and not (
            ext[axes.y] % (default.wy * default.fm * tc.m)
            or ext[axes.x] % (default.wx * default.fn * tc.n)
            or ext[axes.reduce[0]] % (default.kf * tc.k)):
        t = default
    if tiles is not None:
        if (ext[axes.y] % (tiles.wy * tiles.fm * tc.m) or ext[axes.x] % (tiles.wx * tiles.fn
                                                                         * tc.n)
                or ext[axes.reduce[0]] % (tiles.kf * tc.k)):
            return None
        if (tiles.pad_b is not None or tiles.swizzle) and not tiles.wgmma:
            return None  # per-operand pads and swizzled tiles are the wgmma kernel's alone
        t = tiles
    build, need = tile_gemm_wmma, wmma_shared_bytes
    if t.wgmma:  # warpgroup MMA (sm_90a), where the target declares it
        from toolchain.schedules.gpu.wgmma import (
            tile_gemm_wgmma,
            wgmma_intrinsics,
            wgmma_shared_bytes,
        )

        wg = wgmma_intrinsics(target)
        if wg is None:
            return None
        build, need, tc = tile_gemm_wgmma, (lambda c, _: wgmma_shared_bytes(c)), wg
    elif t.mma:  # mma.sync + ldmatrix, accumulators in registers, where the target has them
        from toolchain.schedules.gpu.mma import mma_intrinsics, mma_shared_bytes, tile_gemm_mma

        tc = mma_intrinsics(target)
        if tc is None:
            return None
        build, need = tile_gemm_mma, mma_shared_bytes
    for cand in (t, replace(t, double_buffer=False)):  # double-buffered where it fits
        limit = smem_limit(target, need(cand, tc))
        try:
            out = build(sch, b, target, tc, cand)
            out.verify(target)
            # lowering also renders the intrinsics for the operands' strides (may refuse)
            if max(lowered_shared_bytes(out, target).values(), default=0) <= limit:
                if tiles is not None:  # the caller's tiles: no search space
                    return out
                from toolchain.schedules.gpu.gemm_space import decide_tensorcore

                # the heuristic's tiles are the default point of the kernel's space
                return decide_tensorcore(sch, b, target, cand, out)
        except KilnError:
            continue
    return None


__all__ = ["DEFAULT_CAPS", "TENSOR_CORE_SETS", "TensorCore", "WmmaCaps", "WmmaTiles",
           "choose_wmma_tiles", "fetch_vector", "fill_fragments", "gemm_block", "loops_under",
           "smem_limit", "spread_over_block", "tensor_core_intrinsics", "tensor_core_sets",
           "tile_gemm_wmma", "try_tile_wmma", "warp_pipeline", "wmma_shared_bytes"]

"""Search spaces of the CUDA GEMM kernels: the SIMT tiled GEMM (dense, matmul, batch matmul,
the implicit-GEMM convolution) and the float16 tensor-core GEMM (``wmma`` or ``mma.sync``).

Both kernels choose their tiles by a heuristic (:func:`~toolchain.schedules.gpu.gemm.
choose_tiles` with the occupancy rule and split-K; :func:`~toolchain.schedules.gpu.
tensorcore.choose_wmma_tiles`). Here each declares those choices as a
:class:`~toolchain.autotune.space.Space` whose default point *is* the heuristic's kernel
(a compile without records is unchanged) and builds the point
:func:`~toolchain.autotune.apply.decide` returns:

* ``cuda_gemm`` (:func:`simt_space`): ``kernel`` (``tiled``, or ``generic``: one thread
  per output, no shared memory), ``split_k`` parts of the reduction, threads ``ty x tx``,
  register tile ``ry x rx``, step ``bk`` of the outer reduction axis and
  ``double_buffer``;
* ``cuda_tensorcore`` (:func:`tensorcore_space`): warps ``wy x wx``, fragments a warp
  ``fm x fn``, step ``kf`` (in 16s of ``k``), ``stages`` (1: single-buffered, 2: double,
  3-4: a deeper ``cp.async`` pipeline), row ``pad`` of the shared tiles (0 or 8 halves),
  fetch ``vector`` width, ``async_copy``, ``intrinsic`` (``wmma`` or ``mma``: ``mma.sync``
  on ``ldmatrix`` fragments, accumulators in registers; ``wgmma``, where the target
  declares Hopper's warpgroup products: :mod:`toolchain.schedules.gpu.wgmma`, ``wy`` then
  a multiple of 4 warps and ``fm`` 1), ``in_flight`` (``wgmma``: a step's products left
  running through the next step's barrier and fetch, 0 or 1) and ``warp_mma`` (one
  product call a warp tile).

Rules refuse a point before anything is built, naming the block, its extents and the
target descriptor's limit (threads per block, shared memory per block — the static amount
for the SIMT kernel, the opt-in amount for the tensor-core one — registers per thread). A
point the rules let through whose kernel still exceeds the shared memory (the rule's count
is an estimate, each operand's span over one step from its access pattern: on 38 sampled
points of ResNet-8's and the tests' convolutions and a matmul it was exact for 17, from
6 % high to 4.3x low for the others, where a tile is ragged or split-K) is refused when
it is scheduled — by the schedule's launch-limit check or the lowered kernel's own count
(:class:`~toolchain.autotune.space.InvalidPoint`, naming the block) — still before any
compiler runs.

>>> from toolchain.target import load_target
>>> s = simt_space("C", (64, 48, 32, 1, 1), 4, "A64x32f,W32x48f", load_target("cuda-sm80"),
...                1, Tiles(16, 16, 4, 2, 32))
>>> print(s.trace(s.default()))
cuda_gemm: kernel=tiled split_k=1 ty=16 tx=16 ry=4 rx=2 bk=32 double_buffer=True
>>> s.check({**s.default(), "ry": 8, "rx": 8})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
toolchain.autotune.space.InvalidPoint: ... block 'C' (y=64, x=48, k=32): at least 0.5 of ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from toolchain.autotune.apply import decide
from toolchain.autotune.space import InvalidPoint, Knob, Rule, Space, divisors, with_default
from toolchain.errors import KilnError
from toolchain.schedules.gpu.gemm import (
    MIN_USEFUL,
    REGISTER_OVERHEAD,
    Tiles,
    choose_tiles,
    gemm_axes,
    lowered_shared_bytes,
    operand_loads,
    split_k_tiles,
    tile_gemm,
    useful_fraction,
)
from toolchain.schedules.gpu.tensorcore import WmmaTiles, smem_limit, wmma_shared_bytes
from toolchain.schedules.gpu.wgmma import WgmmaSet
from toolchain.target import Target
from toolchain.tir import arith, ir
from toolchain.tir.schedule import Schedule

#: candidates of the SIMT kernel's knobs (the heuristic's value is always added)
THREADS = (1, 2, 4, 8, 16, 32)
REG_TILE = (1, 2, 4, 8)
SPLIT_K = (1, 2, 4, 8)
#: the largest step ``bk`` offered
MAX_BK = 64
#: the tensor-core kernel's candidates
WARPS = (1, 2, 4, 8)
FRAGMENTS = (1, 2, 4, 8)
K_STEPS = (1, 2, 4)
STAGES = (1, 2, 3, 4)
VECTORS = (1, 2, 4, 8)
#: registers a lane holds per 16 x 16 float32 accumulator fragment (256 / 32) and per
#: 16 x 16 float16 operand fragment (256 halves / 32 lanes / 2 a register)
ACC_REGS, OPERAND_REGS = 8, 4


def gemm_shape(blk: ir.Block) -> tuple[tuple[int, int, int, int, int], int, str]:
    """``((y, x, k, window, batch), itemsize, operands)`` of GEMM block ``blk``: its
    output rows and columns, outer reduction axis, the product of the other reduction
    axes (a convolution's window), of the ``blockIdx.z`` axes, the accumulator's bytes and
    the operands' shapes and dtypes (``A64x32f,W32x48f``: the workload's access pattern,
    e.g. a convolution's padded input)."""
    axes = gemm_axes(blk)
    assert axes is not None
    ext = axes.extents
    shape = (ext[axes.y], ext[axes.x], ext[axes.reduce[0]],
             math.prod(ext[i] for i in axes.reduce[1:]), math.prod(ext[i] for i in axes.others))
    loads = operand_loads(blk)
    ops = ",".join(f"{'AW'[i]}{'x'.join(str(ir.const_int(d)) for d in ld.buffer.shape)}"
                   f"{ld.buffer.dtype[0]}" for i, ld in enumerate(loads))
    return shape, ir.bits_of(blk.body.buffer.dtype) // 8 or 4, ops


def describe(name: str, shape: tuple[int, ...]) -> str:
    """``block 'C' (y=64, x=48, k=32x9, z=7)``: the block and its extents, for messages."""
    y, x, k, w, z = shape
    return (f"block {name!r} (y={y}, x={x}, k={k}" + (f"x{w}" if w > 1 else "")
            + (f", z={z}" if z > 1 else "") + ")")


def caps_key(target: Target) -> str:
    """The descriptor figures a GPU space depends on (never the target's name)."""
    return (f"t{target.max_threads_per_block}s{target.max_shared_memory_per_block}"
            f"o{target.max_shared_memory_per_block_optin}r{target.max_registers_per_thread}"
            f"w{target.warp_size}m{target.sm_count}p{target.max_threads_per_sm}")


# ------------------------------------------------------------------ the SIMT GEMM

def tile_elements(blk: ir.Block, by: int, bx: int, bk: int) -> int:
    """Elements of both operands' shared tiles for one step of a ``by x bx`` block tile:
    per operand and dimension, the span its index covers when the block's row axis runs
    ``by``, its column axis ``bx``, the outer reduction axis ``bk`` and the inner ones
    (a window) their whole extent (a strided convolution's data tile is
    ``s * (bx - 1) + kw`` columns wide); a dimension whose index is not affine counts
    its whole extent."""
    axes = gemm_axes(blk)
    assert axes is not None
    span = {blk.iter_vars[axes.y].var: by, blk.iter_vars[axes.x].var: bx,
            blk.iter_vars[axes.reduce[0]].var: bk}
    span.update({blk.iter_vars[i].var: axes.extents[i] for i in axes.reduce[1:]})
    total = 0
    for ld in operand_loads(blk):
        n = 1
        for idx, dim in zip(ld.indices, ld.buffer.shape, strict=True):
            lin = arith.to_lin(arith.simplify(idx))
            if lin is None or any(not isinstance(a, ir.Var) for a, _ in lin.terms.values()):
                n *= ir.const_int(dim) or 1
                continue
            n *= min(ir.const_int(dim) or 1 << 30,
                     1 + sum(abs(c) * (span.get(a, 1) - 1) for a, c in lin.terms.values()))
        total += n
    return total


def simt_space(name: str, shape: tuple[int, int, int, int, int], itemsize: int, ops: str,
               target: Target, split: int, tiles: Tiles | None,
               blk: ir.Block | None = None) -> Space:
    """The ``cuda_gemm`` space of GEMM block ``name`` (``shape``: :func:`gemm_shape`) with
    the heuristic's choice as default: ``tiles`` with ``split`` parts (None: the generic
    kernel; its tile knobs default to :func:`~toolchain.schedules.gpu.gemm.choose_tiles`).
    ``blk``: the block, whose access pattern sizes the operand tiles
    (:func:`tile_elements`; without it, ``(by + bx) * bk * window``)."""
    y, x, k, window, batch = shape
    d = tiles or choose_tiles(y, x, k, window, target, itemsize, batch)
    most = target.max_threads_per_block or 1024
    regs = target.max_registers_per_thread or 255
    smem = target.max_shared_memory_per_block or 48 * 1024
    least = min(target.warp_size or 32, d.threads)
    where = describe(name, shape)

    def tiled(p: Mapping[str, Any]) -> bool:
        return p["kernel"] == "tiled"

    def steps(p: Mapping[str, Any]) -> int:
        return k // p["split_k"]

    def shared(p: Mapping[str, Any]) -> int:
        return shared_estimate(p, shape, itemsize, blk)

    knobs = (
        Knob("kernel", ("generic", "tiled"), "tiled" if tiles else "generic",
             "tiled: shared-memory tiles, register tiles; generic: one thread per output"),
        Knob("split_k", with_default(tuple(s for s in SPLIT_K if k % s == 0), split), split,
             "parts of the outer reduction axis (partial sums added by a second kernel)",
             active=tiled),
        Knob("ty", with_default(THREADS, d.ty), d.ty, "threads on the rows", active=tiled),
        Knob("tx", with_default(THREADS, d.tx), d.tx, "threads on the columns", active=tiled),
        Knob("ry", with_default(REG_TILE, d.ry), d.ry, "register tile rows", active=tiled),
        Knob("rx", with_default(REG_TILE, d.rx), d.rx, "register tile columns",
             active=tiled),
        Knob("bk", with_default(divisors(k, MAX_BK), d.bk), d.bk,
             "step of the outer reduction axis", active=tiled),
        Knob("double_buffer", (False, True), d.double_buffer,
             "two shared tiles per operand, the next step fetched during this one's",
             active=lambda p: tiled(p) and steps(p) > p["bk"]),
    )
    rules = (
        Rule(f"{where}: split_k leaves each part at least two values of k",
             lambda p: not tiled(p) or p["split_k"] == 1 or steps(p) >= 2),
        Rule(f"{where}: bk divides the reduction's k / split_k",
             lambda p: not tiled(p) or steps(p) % p["bk"] == 0),
        Rule(f"{where}: threads per block ty*tx at most {most} (the target's "
             "max_threads_per_block)", lambda p: not tiled(p) or p["ty"] * p["tx"] <= most),
        Rule(f"{where}: threads per block ty*tx at least {least} (a warp, or the "
             "heuristic's block where the output is smaller: fewer leave a warp's lanes idle)",
             lambda p: not tiled(p) or p["ty"] * p["tx"] >= least),
        Rule(f"{where}: a thread's ry*rx accumulators, ry + rx operands and "
             f"{REGISTER_OVERHEAD} more registers at most {regs} (the target's "
             "max_registers_per_thread)",
             lambda p: not tiled(p) or p["ry"] * p["rx"] + p["ry"] + p["rx"]
             + REGISTER_OVERHEAD <= regs),
        Rule(f"{where}: the operand tiles of a step ({itemsize} B elements, twice when "
             f"double-buffered) at most {smem} B (the target's max_shared_memory_per_block)",
             lambda p: not tiled(p) or shared(p) <= smem),
        Rule(f"{where}: the block tile has at least two rows and two columns (one loop "
             "each in its write-back)", lambda p: not tiled(p) or (
                 p["ty"] * p["ry"] >= min(2, y) and p["tx"] * p["rx"] >= min(2, x))),
        Rule(f"{where}: at least {MIN_USEFUL:g} of the block tiles' outputs inside the "
             "output", lambda p: not tiled(p) or useful_fraction(
                 Tiles(p["ty"], p["tx"], p["ry"], p["rx"], p["bk"]), y, x) >= MIN_USEFUL),
    )
    dtype = "f16" if itemsize == 2 else f"b{itemsize}"
    workload = f"cuda_gemm|{dtype}|y{y}x{x}k{k}w{window}z{batch}|{ops}|{caps_key(target)}"
    return Space("cuda_gemm", workload, knobs, rules, seeds=SIMT_SEEDS)


#: the tuner's first points after the default (invalid ones are dropped): the generic
#: kernel (2x faster than the tiled one on ResNet-18 at batch 1 in the first GPU run,
#: docs/cuda.md), split-K, and square register tiles
SIMT_SEEDS = ({"kernel": "generic"}, {"kernel": "tiled", "split_k": 2},
              {"kernel": "tiled", "split_k": 4}, {"kernel": "tiled", "ry": 2, "rx": 2},
              {"kernel": "tiled", "ry": 4, "rx": 4, "ty": 8, "tx": 16})


def shared_estimate(point: Mapping[str, Any], shape: tuple[int, int, int, int, int],
                    itemsize: int, blk: ir.Block | None = None) -> int:
    """Bytes of shared memory a ``cuda_gemm`` point's kernel allocates, as its rule counts
    them: both operands' tiles of a step (:func:`tile_elements` where the block ``blk`` is
    given, else ``(by + bx) * bk * window``), twice when double-buffered."""
    by, bx = point["ty"] * point["ry"], point["tx"] * point["rx"]
    elems = tile_elements(blk, by, bx, point["bk"]) if blk is not None else \
        (by + bx) * point["bk"] * shape[3]
    steps = shape[2] // point["split_k"]
    return elems * itemsize * (2 if point["double_buffer"] and steps > point["bk"] else 1)


def tiles_of(point: Mapping[str, Any]) -> Tiles:
    """The :class:`~toolchain.schedules.gpu.gemm.Tiles` of a ``cuda_gemm`` point."""
    return Tiles(point["ty"], point["tx"], point["ry"], point["rx"], point["bk"],
                 point["double_buffer"])


def decide_simt(sch: Schedule, block: Any, target: Target, default: Schedule | None,
                split: int, tiles: Tiles | None) -> Schedule | None:
    """The SIMT kernel of GEMM block ``block``: the heuristic's (``default``, ``split``,
    ``tiles``; None: the generic kernel) unless tuning or records decide another point
    of its :func:`simt_space`. A decided point's kernel that exceeds the target's shared
    memory once lowered is refused (:class:`~toolchain.autotune.space.InvalidPoint`)."""
    blk = sch.get(block)
    shape, itemsize, ops = gemm_shape(blk)
    space = simt_space(blk.name_hint, shape, itemsize, ops, target, split, tiles, blk)
    if not space.is_valid(space.default()):
        return default  # a heuristic kernel outside its own rules: not tunable (none known)
    point = decide(space)
    if space.key(point) == space.key(space.default()):
        return default
    if point["kernel"] == "generic":
        return None
    t = tiles_of(point)
    where = describe(blk.name_hint, shape)
    try:
        if point["split_k"] > 1:
            got = split_k_tiles(sch, block, target, point["split_k"], t)
            if got is None:
                raise KilnError("split-K does not apply")
            out = got[0]
        else:
            out = tile_gemm(sch, block, target, t)
        out.verify(target)
    except InvalidPoint:
        raise
    except KilnError as exc:
        raise InvalidPoint(f"{space.workload}: point {space.trace(point)} on {where}: "
                           f"{str(exc).splitlines()[0]}") from exc
    limit = target.max_shared_memory_per_block or 48 * 1024
    used = max(lowered_shared_bytes(out, target).values(), default=0)
    if used > limit:
        raise InvalidPoint(f"{space.workload}: point {space.trace(point)} on {where}: the "
                           f"lowered kernel's shared memory, {used} B, exceeds {limit} B "
                           "(the target's max_shared_memory_per_block)")
    return out


# ------------------------------------------------------------------ the tensor-core GEMM

def tensorcore_space(name: str, shape: tuple[int, int, int, int, int], ops: str,
                     target: Target, default: WmmaTiles, has_mma: bool,
                     warp_products: tuple[set[tuple[int, int]], set[tuple[int, int]]],
                     wgmma: WgmmaSet | None = None) -> Space:
    """The ``cuda_tensorcore`` space of float16 GEMM block ``name`` with the heuristic's
    tiles ``default`` (:func:`~toolchain.schedules.gpu.tensorcore.choose_wmma_tiles`, single-
    buffered where the double buffer did not fit). ``has_mma``: the target declares the
    ``mma.sync`` set; ``warp_products``: the ``(fm, fn)`` warp tiles with one product call,
    for ``wmma`` and for ``mma.sync`` (its ``fn`` in 16 x 8 tiles); ``wgmma``: the
    target's warpgroup products (the ``wgmma`` intrinsic and the ``in_flight`` knob; None:
    neither, the space as before them)."""
    y, x, k, _, batch = shape
    frag = 16
    warp = target.warp_size or 32
    most = target.max_threads_per_block or 1024
    regs = target.max_registers_per_thread or 255
    static = target.max_shared_memory_per_block or 48 * 1024
    optin = target.max_shared_memory_per_block_optin or static
    where = describe(name, shape)

    def need(p: Mapping[str, Any]) -> int:
        return shared_need(wmma_tiles_of(p))

    def is_wg(p: Mapping[str, Any]) -> bool:
        return p["intrinsic"] == "wgmma"

    def wg_product(p: Mapping[str, Any], k: int, flying: int = 0) -> bool:
        assert wgmma is not None
        return wgmma.product(p["fn"] * frag, k, flying, p.get("swizzle", 0)) is not None

    def product(p: Mapping[str, Any]) -> bool:
        if is_wg(p):
            return False  # one call a warpgroup and step, always
        if p["intrinsic"] == "mma":
            return (p["fm"], 2 * p["fn"]) in warp_products[1]
        return (p["fm"], p["fn"]) in warp_products[0]

    def fetch_ok(p: Mapping[str, Any]) -> bool:
        threads = p["wy"] * p["wx"] * warp
        by, bx, bk = p["wy"] * p["fm"] * frag, p["wx"] * p["fn"] * frag, p["kf"] * frag
        v = p["vector"]
        return (by * bk) % (threads * v) == 0 and (bk * bx) % (threads * v) == 0

    d = default
    knobs = (
        Knob("wy", with_default(WARPS, d.wy), d.wy, "warps on the rows"),
        Knob("wx", with_default(WARPS, d.wx), d.wx, "warps on the columns"),
        Knob("fm", with_default(FRAGMENTS, d.fm), d.fm, "16-row fragments a warp"),
        Knob("fn", with_default(FRAGMENTS, d.fn), d.fn, "16-column fragments a warp"),
        Knob("kf", with_default(K_STEPS, d.kf), d.kf, "16s of k a step"),
        Knob("stages", with_default(STAGES, d.stages if d.double_buffer else 1),
             d.stages if d.double_buffer else 1,
             "copies of the operand tiles (1: single-buffered; 3, 4: deeper cp.async)",
             active=lambda p: k > p["kf"] * frag),
        Knob("pad", with_default((0, 8), d.pad), d.pad, "halves padding each shared row"),
        Knob("vector", with_default(VECTORS, d.vector), d.vector, "halves a thread fetches"),
        Knob("async_copy", (False, True), d.async_copy, "cp.async fetches",
             active=lambda p: p["vector"] > 1),
        Knob("intrinsic", ("wmma", "mma") + (("wgmma",) if wgmma else ()) if has_mma
             else ("wmma",) + (("wgmma",) if wgmma else ()),
             "wgmma" if d.wgmma else "mma" if d.mma else "wmma",
             "wmma fragments or mma.sync + ldmatrix" + (" or warpgroup MMA (sm_90a)"
                                                         if wgmma else "")),
        Knob("warp_mma", (False, True), d.warp_mma,
             "one product call a warp tile (where the target declares it)", active=product),
    )
    if wgmma is not None:
        knobs += (Knob("in_flight", (0, 1), d.in_flight,
                       "wgmma: groups of products a call leaves running (overlapping the "
                       "next step's barrier and fetch)", active=is_wg),)
        if wgmma.swizzled:
            knobs += (Knob("swizzle", (0, 128), d.swizzle,
                           "wgmma: the operand tiles 128-byte swizzled (rows of 64 halves; "
                           "0: core matrices)", active=is_wg),)
    rules = (
        Rule(f"{where}: the block tile wy*fm*16 x wx*fn*16 and the step kf*16 divide the "
             "GEMM", lambda p: y % (p["wy"] * p["fm"] * frag) == 0
             and x % (p["wx"] * p["fn"] * frag) == 0 and k % (p["kf"] * frag) == 0),
        Rule(f"{where}: threads per block wy*wx*{warp} at most {most} (the target's "
             "max_threads_per_block)", lambda p: p["wy"] * p["wx"] * warp <= most),
        Rule(f"{where}: shared memory at most {optin} B (the target's "
             f"max_shared_memory_per_block_optin; over {static} B, the static amount, it "
             "is dynamic)", lambda p: need(p) <= optin),
        Rule(f"{where}: a lane's fm*fn accumulator fragments ({ACC_REGS} registers each), "
             f"fm + fn operand fragments ({OPERAND_REGS} each) and {REGISTER_OVERHEAD} "
             f"more at most {regs} (the target's max_registers_per_thread)",
             lambda p: p["fm"] * p["fn"] * ACC_REGS + (p["fm"] + p["fn"]) * OPERAND_REGS
             + REGISTER_OVERHEAD <= regs),
        Rule(f"{where}: the operand tiles split evenly into vector fetches over the block's "
             "threads", fetch_ok),
        Rule("cp.async needs a vector fetch (vector 2, 4 or 8)",
             lambda p: not p["async_copy"] or p["vector"] > 1),
    )
    if wgmma is not None:
        fns = sorted({n // frag for (n, _), _ in wgmma.products if wgmma.fill(n)})
        rules += (
            Rule("wgmma: a warpgroup is 4 warps down of one 16-row fragment each (wy a "
                 "multiple of 4, fm 1)", lambda p: not is_wg(p) or
                 (p["wy"] % 4 == 0 and p["fm"] == 1)),
            Rule(f"wgmma: the target declares a 64 x fn*16 warpgroup product and fill "
                 f"(fn {', '.join(map(str, fns))})", lambda p: not is_wg(p) or (
                     wgmma.fill(p["fn"] * frag) is not None and wg_product(p, frag))),
            Rule("wgmma swizzled: rows of 64 halves -- steps of 64 (kf 4), warpgroups 64 "
                 "wide (fn 4), no padding", lambda p: not is_wg(p)
                 or not p.get("swizzle", 0)
                 or (p["kf"] == 4 and p["fn"] == 4 and p["pad"] == 0)),
            Rule(IN_FLIGHT_ON_HARDWARE, lambda p: not is_wg(p) or not p["in_flight"]),
            Rule("wgmma in flight: double-buffered over at least in_flight + 2 stages (a "
                 "stage for the fetch, one for each group still reading)",
                 lambda p: not is_wg(p) or not p["in_flight"]
                 or p["stages"] >= p["in_flight"] + 2),
            Rule("wgmma in flight: one product call a step (the target's 64 x fn*16 x "
                 "kf*16 product leaving in_flight groups running: groups are counted in "
                 "steps)", lambda p: not is_wg(p) or not p["in_flight"]
                 or wg_product(p, p["kf"] * frag, p["in_flight"])),
        )
    workload = f"cuda_tensorcore|y{y}x{x}k{k}z{batch}|{ops}|{caps_key(target)}"
    return Space("cuda_tensorcore", workload, knobs, rules, seeds=TENSORCORE_SEEDS)


#: why the tuner is offered no wgmma kernel that leaves products in flight (``in_flight``
#: 1): on an H200 (the first GPU run of these kernels, 2026-11-29) they computed wrong
#: results -- relative errors of 3 to 40 %, different from run to run, for the 4096^3
#: GEMM and the 128 x 256 x 128 test case -- while the SIMT emulation and the race checker
#: find them right; the waiting kernels (``in_flight`` 0) matched the reference there
IN_FLIGHT_ON_HARDWARE = ("wgmma in flight: wrong on an H200 (errors of 3-40 %, varying "
                         "between runs; the emulation finds these kernels right): not "
                         "offered until the hardware agrees")

#: the tuner's first points after the default: the leading variants of
#: ``benchmarks/cuda.py``'s tile sweep (mma.sync with 2-4 stages, 16 warps, steps of 64;
#: the default with 3 stages; then, where the target has them, the warpgroup kernels:
#: 128-byte swizzled (``.sw128``, warpgroups of 64 x 64, steps of 64: 2 x 2 of them
#: waiting, the fastest on an H200 -- 1.83x cuBLAS fp16's time at 4096^3 against the
#: default's 2.73x -- then over 3 and 4 stages) first, then those of 2 x 2 and 2 x 1
#: warpgroups on core matrices), as changes to the default's knobs; none leaves products
#: in flight (:data:`IN_FLIGHT_ON_HARDWARE`)
_WG = {"intrinsic": "wgmma", "wy": 8, "fm": 1, "fn": 8, "kf": 2, "pad": 8, "vector": 8,
       "async_copy": True, "in_flight": 0}
_SW = {**_WG, "wx": 2, "fn": 4, "kf": 4, "pad": 0, "swizzle": 128}
TENSORCORE_SEEDS = ({"intrinsic": "mma"}, {"intrinsic": "mma", "stages": 3},
                    {"intrinsic": "mma", "stages": 4},
                    {"intrinsic": "mma", "stages": 3, "wy": 2, "wx": 2, "fm": 4, "fn": 4},
                    {"intrinsic": "mma", "stages": 3, "wx": 4},
                    {"intrinsic": "mma", "stages": 3, "kf": 4}, {"stages": 3},
                    {**_SW, "stages": 2}, {**_SW, "stages": 3}, {**_SW, "stages": 4},
                    {**_WG, "wx": 2, "stages": 2}, {**_WG, "wx": 2, "stages": 3},
                    {**_WG, "wx": 1, "stages": 2})


def shared_need(t: WmmaTiles) -> int:
    """Shared bytes of a tensor-core kernel with tiles ``t`` (16 x 16 x 16 fragments)."""
    from toolchain.schedules.gpu.mma import mma_shared_bytes
    from toolchain.schedules.gpu.tensorcore import TensorCore
    from toolchain.schedules.gpu.wgmma import wgmma_shared_bytes

    if t.wgmma:
        return wgmma_shared_bytes(t)
    tc = TensorCore("", "", "", 16, 16, 16, "")
    return mma_shared_bytes(t, tc) if t.mma else wmma_shared_bytes(t, tc)


def wmma_tiles_of(point: Mapping[str, Any]) -> WmmaTiles:
    """The :class:`~toolchain.schedules.gpu.tensorcore.WmmaTiles` of a ``cuda_tensorcore``
    point."""
    stages = point["stages"]
    return WmmaTiles(point["wy"], point["wx"], point["fm"], point["fn"], point["kf"],
                     double_buffer=stages > 1, pad=point["pad"], vector=point["vector"],
                     warp_mma=point["warp_mma"], async_copy=point["async_copy"],
                     mma=point["intrinsic"] == "mma", stages=max(2, stages),
                     wgmma=point["intrinsic"] == "wgmma",
                     in_flight=point.get("in_flight", 0), swizzle=point.get("swizzle", 0))


def decide_tensorcore(sch: Schedule, block: Any, target: Target, default: WmmaTiles,
                      built: Schedule) -> Schedule:
    """The tensor-core kernel of float16 GEMM block ``block``: the heuristic's (``built``
    with tiles ``default``) unless tuning or records decide another point of its
    :func:`tensorcore_space`; a point whose lowered kernel exceeds the shared memory it
    may use is refused (:class:`~toolchain.autotune.space.InvalidPoint`)."""
    from toolchain.schedules.gpu.mma import mma_intrinsics, tile_gemm_mma
    from toolchain.schedules.gpu.tensorcore import tensor_core_intrinsics, tile_gemm_wmma
    from toolchain.schedules.gpu.wgmma import tile_gemm_wgmma, wgmma_intrinsics

    blk = sch.get(block)
    shape, _, ops = gemm_shape(blk)
    wm, mm, wg = tensor_core_intrinsics(target), mma_intrinsics(target), \
        wgmma_intrinsics(target)
    products = ({fmn for fmn, _ in wm.warp_mma} if wm else set(),
                {fmn for fmn, _ in mm.warp_mma} if mm else set())
    space = tensorcore_space(blk.name_hint, shape, ops, target, default, mm is not None,
                             products, wg)
    if not space.is_valid(space.default()):
        return built
    point = decide(space)
    if space.key(point) == space.key(space.default()):
        return built
    t = wmma_tiles_of(point)
    build, tc = (tile_gemm_wgmma, wg) if t.wgmma else \
        (tile_gemm_mma, mm) if t.mma else (tile_gemm_wmma, wm)
    where = describe(blk.name_hint, shape)
    assert tc is not None
    try:
        out = build(sch, block, target, tc, t)
        out.verify(target)
        used = max(lowered_shared_bytes(out, target).values(), default=0)
    except KilnError as exc:
        raise InvalidPoint(f"{space.workload}: point {space.trace(point)} on {where}: "
                           f"{str(exc).splitlines()[0]}") from exc
    limit = smem_limit(target, shared_need(t))
    if used > limit:
        raise InvalidPoint(f"{space.workload}: point {space.trace(point)} on {where}: the "
                           f"lowered kernel's shared memory, {used} B, exceeds {limit} B "
                           "(the target's max_shared_memory_per_block"
                           + ("_optin)" if limit != target.max_shared_memory_per_block
                              else ")"))
    return out


__all__ = ["IN_FLIGHT_ON_HARDWARE", "SIMT_SEEDS", "TENSORCORE_SEEDS", "decide_simt",
           "decide_tensorcore", "describe", "gemm_shape", "shared_estimate", "shared_need",
           "simt_space", "tensorcore_space", "tile_elements", "tiles_of", "wmma_tiles_of"]

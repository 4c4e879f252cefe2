"""The tiled GPU schedule of GEMM-shaped reductions: dense, matmul, batch matmul and
convolution as an implicit GEMM.

A reduction block ``C[...] += X[...] * Y[...]`` (each operand a load, possibly behind a
padding ``if_then_else`` or a cast) is a GEMM when its spatial axes split into those only
``X`` reads (the rows of one operand), those only ``Y`` reads (the columns of the other)
and those both read (a batch). The output's innermost axis decides which operand's axis
the thread's ``x`` runs along (so neighbouring threads write neighbouring outputs); the
other operand's innermost axis is the ``y`` axis; every other spatial axis goes to
``blockIdx.z``. A convolution in the CUDA path's layout (NCHW: output ``[n, co, oh, ow]``,
data read at ``[n, ci, oh*s + kh, ow*s + kw]``, weights at ``[co, ci, kh, kw]``) thus runs
``ow`` along ``x``, ``co`` along ``y`` and ``n * oh`` over ``blockIdx.z``: each block
computes a ``BN x BM`` tile of one output row and of ``BN`` output channels, an implicit
GEMM whose data tile is gathered from the input, never written out as im2col: the
padding stage is kept out of the convolution (:func:`operand_stages`) and computed straight
into the shared tile (``set_scope(pad, "shared")`` + ``compute_at``), its guard in the
fetch, so the tile is a fixed-size window of the padded input.

The kernel (:func:`tile_gemm`), for a block tile ``BY x BX`` of ``TY x TX`` threads, each
thread an ``RY x RX`` register tile (``BY = TY * RY``, ``BX = TX * RX``):

- the accumulator in registers: ``cache_write(C, "local")``, the element-wise tail (bias,
  activation, residual add) folded into its write-back (``reverse_compute_inline``);
- the outer reduction axis split by ``BK`` (a divisor of it): per step the block fetches
  the ``X`` and ``Y`` tiles it needs into shared memory cooperatively
  (``cache_read(..., "shared")`` + ``compute_at`` the step loop, the copy's loops fused and
  spread over the block's threads), the other reduction axes (a convolution's window) run
  inside the step;
- the barriers between fetch and use are placed by the lowering pass ``inject_barriers``;
- shapes that the tiles do not divide get guards (``T.where``) from the non-divisible
  splits: the threads past the edge fetch nothing and write nothing.

Tile sizes come from the target's descriptor and the shapes (:func:`choose_tiles`): the
threads per block (``max_threads_per_block``; at least a ``warp_size`` where the shape
allows), the shared
memory per block (``max_shared_memory_per_block``) and the registers per thread
(``max_registers_per_thread``), never from the target's name; and from its size
(``sm_count``, ``max_threads_per_sm``): the **occupancy rule** (:func:`fills_gpu`) shrinks
the tiles until the grid gives every SM a block and enough warps, and where one output a
thread still does not, **split-K** (:func:`split_k`) sums the reduction in parts on more
blocks and adds the parts in a second kernel. A tile mostly outside the output keeps the
generic kernel (:func:`useful_fraction`). ``docs/cuda.md``, "The occupancy rule". These
choices (generic or tiled, split-K, threads, register tile, step, double buffer) are the
default point of the ``cuda_gemm`` search space (:mod:`toolchain.schedules.gpu.gemm_space`:
:func:`try_tile_gemm` builds the point tuning or records decide; ``kiln tune``).

Before (``Relu(MatMul(A, W))``, 64 x 32 times 32 x 48)::

    for i, j, k in T.grid(64, 48, 32):
        with T.block("C"): C[vi, vj] += A[vi, vk] * W[vk, vj]
    for i, j in T.grid(64, 48):
        with T.block("D"): D[vi, vj] = T.max(C[vi, vj], 0)

after (``tile_gemm``; :func:`choose_tiles` gives 16 x 16 threads, each 4 x 2 outputs: a
64 x 32 tile per block, two blocks; ``BK`` = 32, so one step), abridged::

    for i_0 in T.thread_binding(1, thread="blockIdx.y"):
        for j_0 in T.thread_binding(2, thread="blockIdx.x"):
            for k_0 in range(1):
                for ax0_ax1_fused_0 in range(4):                    # W's tile -> W_shared
                    for ax0_ax1_fused_1 in T.thread_binding(16, thread="threadIdx.y"):
                        for ax0_ax1_fused_2 in T.thread_binding(16, thread="threadIdx.x"):
                            with T.block("W_shared"):
                                ...
                                T.where(j_0 * 32 + ax0_ax1_fused_1 % 2 * 16 + ax0_ax1_fused_2 < 48)
                                W_shared[v0, v1] = W[v0, v1]
                for ax0_ax1_fused_0_1 in range(8): ...              # A's tile -> A_shared
                for i_1 in T.thread_binding(16, thread="threadIdx.y"):
                    for j_1 in T.thread_binding(16, thread="threadIdx.x"):
                        for k_1, i_2, j_2 in T.grid(32, 4, 2):
                            with T.block("C"):
                                ...
                                T.where(j_0 * 32 + j_1 * 2 + j_2 < 48)
                                C_local[vi, vj] += A_shared[vi, vk] * W_shared[vk, vj]
            for ax0_0 in T.thread_binding(16, thread="threadIdx.y"):  # write-back + relu
                for ax1_0 in T.thread_binding(16, thread="threadIdx.x"):
                    for ax0_1, ax1_1 in T.grid(4, 2):
                        with T.block("C_local"):
                            ...
                            D[v0_2, v1_2] = T.max(C_local[v0_2, v1_2], 0)

Lowered, ``C_local`` is 8 floats per thread (its register tile), ``A_shared`` and
``W_shared`` one step's tiles, with one barrier between the fetches and the products.

>>> from toolchain import te
>>> from toolchain.target import load_target
>>> from toolchain.tir.schedule import Schedule
>>> A = te.placeholder((64, 32), name="A"); W = te.placeholder((32, 48), name="W")
>>> k = te.reduce_axis((0, 32), name="k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
>>> t = load_target("cuda-sm80")
>>> sch = tile_gemm(Schedule(te.create_prim_func([A, W, C]), t), "C", t)
>>> 'scope="shared"' in str(sch.mod) and 'scope="local"' in str(sch.mod)
True
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.inprocess import ByTarget
from toolchain.schedules.gpu.generic import fold_tail
from toolchain.schedules.gpu.tensorcore import WmmaTiles, try_tile_wmma
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprVisitor, free_vars
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st

#: most threads per block the tiled kernels use (fewer where the descriptor says so)
MAX_THREADS = 256
#: the register tile of a thread along each axis, at most
MAX_REG_TILE = 4
#: registers a thread needs beside its accumulators (indices, fetched operands), a guess
#: on the safe side used only to keep the register tile inside the descriptor's limit
REGISTER_OVERHEAD = 32
#: the occupancy rule (:func:`choose_tiles`): warps an SM should hold on average, as a
#: fraction of the most it can (1/8: 8 of 64 warps; the register tiles' independent
#: products hide the rest of the latency)
MIN_OCCUPANCY = 1 / 8
#: the tiled kernel is kept only where at least this fraction of its output tiles is
#: inside the output (:func:`useful_fraction`); below it, the generic kernel (one thread
#: per output, no idle thread) is used
MIN_USEFUL = 0.5
#: split-K (:func:`split_k_factor`) only for outputs that sum at least this many products
SPLIT_K_MIN = 1024
#: and into at most this many parts
MAX_SPLIT_K = 8
#: split-K also where one output a thread sums more than this many products (in one
#: dependent chain): ResNet-18's 256 -> 256 3 x 3 convolutions at 14 x 14 (2,304 products,
#: one output a thread, 224 blocks) ran 0.122 ms on an H200 where the 128 -> 256 one
#: (1,152 products, the same tiles and grid) ran 0.041 ms (docs/cuda.md, "Short and long
#: reductions")
MAX_SERIAL = 2048
#: the tiled kernel is not used for reductions shorter than this many products per output
#: where the generic kernel's grid fills the GPU by itself (:func:`prefers_generic`):
#: staging a tile in shared memory does not pay for the few products it feeds (ResNet-18's
#: 7 x 7 x 3 stem, 147 products: 0.105 ms tiled, 0.053 ms generic on an H200)
SHORT_REDUCTION = 1024


@dataclass(frozen=True)
class GemmAxes:
    """How a reduction block is a GEMM: indices (into the block's loops, which follow its
    iteration variables) of the ``x`` axis, the ``y`` axis, the other spatial axes (over
    ``blockIdx.z``) and the reduction axes; which operand the ``x`` axis reads."""

    x: int
    y: int
    others: tuple[int, ...]
    reduce: tuple[int, ...]
    extents: tuple[int, ...]


@dataclass(frozen=True)
class Tiles:
    """A block tile ``(ty * ry) x (tx * rx)`` of ``ty x tx`` threads, each an ``ry x rx``
    register tile, and the reduction step ``bk`` of the outer reduction axis."""

    ty: int
    tx: int
    ry: int
    rx: int
    bk: int
    #: two shared tiles per operand, the next step's fetched during this one's products
    double_buffer: bool = True

    @property
    def threads(self) -> int:
        return self.ty * self.tx


class _Loads(StmtExprVisitor):
    def __init__(self) -> None:
        self.loads: list[ir.BufferLoad] = []

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self.loads.append(e)
        super().visit_BufferLoad(e)


def _operand(e: ir.PrimExpr) -> ir.BufferLoad | None:
    """The one load an operand of the product is: a load, a cast of one, or a padding
    ``if_then_else(cond, load, 0)``."""
    if isinstance(e, ir.BufferLoad):
        return e
    if isinstance(e, ir.Cast):
        return _operand(e.value)
    if isinstance(e, ir.Call) and e.op == "tir.if_then_else" and len(e.args) == 3:
        other = e.args[2]
        if isinstance(other, (ir.FloatImm, ir.IntImm)) and other.value == 0:
            return _operand(e.args[1])
    return None


def gemm_axes(block: ir.Block) -> GemmAxes | None:
    """How ``block`` is a GEMM (see :class:`GemmAxes`), or None when it is not one: not a
    sum of products of two loads, or no spatial axis read by one operand only on a side.

    >>> from toolchain import te
    >>> A = te.placeholder((4, 3), name="A"); B = te.placeholder((3, 5), name="B")
    >>> k = te.reduce_axis((0, 3), name="k")
    >>> C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> from toolchain.tir.schedule import Schedule
    >>> sch = Schedule(te.create_prim_func([A, B, C]))
    >>> gemm_axes(sch.get(sch.get_block("C")))
    GemmAxes(x=1, y=0, others=(), reduce=(2,), extents=(4, 5, 3))
    """
    body = block.body
    if not isinstance(body, ir.BufferStore) or block.init is None:
        return None
    ivs = block.iter_vars
    if not all(isinstance(iv.dom.extent, ir.IntImm) for iv in ivs):
        return None
    value = body.value
    if not (isinstance(value, ir.Add) and isinstance(value.a, ir.BufferLoad)
            and value.a.buffer is body.buffer and isinstance(value.b, ir.Mul)):
        return None
    x_load, y_load = _operand(value.b.a), _operand(value.b.b)
    if x_load is None or y_load is None:
        return None
    spatial = [i for i, iv in enumerate(ivs) if iv.iter_type == ir.IterType.SPATIAL]
    reduce = tuple(i for i, iv in enumerate(ivs) if iv.iter_type == ir.IterType.REDUCE)
    if not reduce or len(spatial) + len(reduce) != len(ivs):
        return None
    if [i for i in spatial] != list(range(len(spatial))):
        return None  # the reduction axes must be innermost
    out_vars = [free_vars(i) for i in body.indices]
    if any(len(v) > 1 for v in out_vars):
        return None
    used = [{v for i in ld.indices for v in free_vars(i)} for ld in (x_load, y_load)]
    only = [[i for i in spatial if ivs[i].var in used[s] and ivs[i].var not in used[1 - s]
             and ivs[i].dom.extent.value > 1] for s in (0, 1)]
    if not only[0] or not only[1]:
        return None
    # the x axis: the operand axis innermost in the output
    pos = {ivs[i].var: d for i in spatial for d, v in enumerate(out_vars) if ivs[i].var in v}
    if any(ivs[i].var not in pos for i in spatial):
        return None
    inner = max(only[0] + only[1], key=lambda i: pos[ivs[i].var])
    y = max(only[1] if inner in only[0] else only[0], key=lambda i: pos[ivs[i].var])
    others = tuple(i for i in spatial if i not in (inner, y))
    return GemmAxes(inner, y, others, reduce, tuple(int(iv.dom.extent.value) for iv in ivs))


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1) if n >= 1 else 0


def _pow2_at_least(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def grid_blocks(t: Tiles, ext_y: int, ext_x: int, batch: int = 1) -> int:
    """Thread blocks of the grid the tiles ``t`` launch for an ``ext_y x ext_x`` output
    (times ``batch``, the ``blockIdx.z`` axes: a convolution's ``n * oh``).

    >>> grid_blocks(Tiles(16, 16, 4, 4, 32), 1024, 1024)
    256
    """
    return (math.ceil(ext_y / (t.ty * t.ry)) * math.ceil(ext_x / (t.tx * t.rx))
            * max(1, batch))


def min_warps_per_sm(target: Target) -> int:
    """Warps an SM should hold for the tiled kernels to hide memory latency:
    :data:`MIN_OCCUPANCY` of the most it can hold (``max_threads_per_sm / warp_size``;
    2048 / 32 on every NVIDIA GPU since Volta: 8 warps)."""
    warp = target.warp_size or 32
    return max(1, int((target.max_threads_per_sm or 2048) // warp * MIN_OCCUPANCY))


def fills_gpu(t: Tiles, ext_y: int, ext_x: int, batch: int, target: Target) -> bool:
    """The occupancy rule's test: the grid gives every SM a block (``blocks >= sm_count``)
    and every SM :func:`min_warps_per_sm` warps on average. True on a descriptor without
    ``sm_count`` (no rule)."""
    if not target.sm_count:
        return True
    blocks = grid_blocks(t, ext_y, ext_x, batch)
    warps = blocks * math.ceil(t.threads / (target.warp_size or 32))
    return blocks >= target.sm_count and warps >= min_warps_per_sm(target) * target.sm_count


def useful_fraction(t: Tiles, ext_y: int, ext_x: int) -> float:
    """The fraction of the grid's output tiles that are inside the output (the rest are
    threads idling past a ragged edge).

    >>> useful_fraction(Tiles(16, 8, 1, 1, 32), 512, 7)
    0.875
    """
    by, bx = t.ty * t.ry, t.tx * t.rx
    return ext_y * ext_x / (math.ceil(ext_y / by) * by * math.ceil(ext_x / bx) * bx)


def choose_tiles(ext_y: int, ext_x: int, ext_k: int, window: int, target: Target,
                 itemsize: int = 4, batch: int = 1) -> Tiles:
    """Tile sizes for an ``ext_y x ext_x`` output (``batch`` of them: the ``blockIdx.z``
    axes) and an outer reduction axis of ``ext_k`` (each step also reads ``window``
    elements per row of the inner reduction axes: a convolution's ``kh * kw``), from the
    target's descriptor.

    Threads: a power of two from one warp up to ``min(256, max_threads_per_block)``,
    ``x`` first (up to 16 or the axis), the rest on ``y``; shrunk so that no more than
    half of a block's threads idle on an axis smaller than the tile. Register tile: up to
    4 x 4 outputs a thread, kept under ``max_registers_per_thread``.

    **The occupancy rule** (:func:`fills_gpu`; on a descriptor with ``sm_count``): while
    the grid has fewer blocks than SMs, or fewer warps than :func:`min_warps_per_sm` per
    SM, halve the register tile (its longer side; re-deriving the threads); then, while it
    still has fewer blocks than SMs, halve the threads on ``y`` (down to one warp a block).
    A big GEMM keeps its 4 x 4 register tiles (1024^3 on 108 SMs: 256 blocks of 8 warps);
    ResNet-18's 7 x 7 x 512 convolutions at batch 1 get one output a thread (224 blocks
    on 132 SMs instead of 56).

    ``bk``: the largest of 32, 16, 8, 4, 2, 1 (at most ``ext_k``) whose two shared tiles
    fit in ``max_shared_memory_per_block``.

    >>> from toolchain.target import load_target
    >>> choose_tiles(1024, 1024, 1024, 1, load_target("cuda-sm80"))
    Tiles(ty=16, tx=16, ry=4, rx=4, bk=32, double_buffer=True)
    >>> choose_tiles(512, 7, 512, 9, load_target("cuda-sm90"), batch=7)  # ResNet-18 layer4
    Tiles(ty=16, tx=8, ry=1, rx=1, bk=16, double_buffer=True)
    """
    warp = target.warp_size or 32
    most = min(MAX_THREADS, target.max_threads_per_block or MAX_THREADS)
    regs = target.max_registers_per_thread or 255
    smem = target.max_shared_memory_per_block or 48 * 1024
    rx = min(MAX_REG_TILE, _pow2_at_most(ext_x // 16) or 1)
    ry = min(MAX_REG_TILE, _pow2_at_most(ext_y // 16) or 1)
    while rx * ry + rx + ry + REGISTER_OVERHEAD > regs and rx * ry > 1:
        if rx >= ry:
            rx //= 2
        else:
            ry //= 2
    t = _threads(ext_y, ext_x, ry, rx, warp, most)
    while not fills_gpu(t, ext_y, ext_x, batch, target) and t.ry * t.rx > 1:
        ry, rx = (ry // 2, rx) if ry >= rx else (ry, rx // 2)
        t = _threads(ext_y, ext_x, ry, rx, warp, most)
    while (target.sm_count and grid_blocks(t, ext_y, ext_x, batch) < target.sm_count
           and t.ty > 1 and t.threads > warp):
        t = replace(t, ty=t.ty // 2)
    bk = 1  # a divisor of ext_k: no guard in the step loop, so each step's tile is private
    for cand in range(min(32, ext_k), 0, -1):
        if ext_k % cand == 0 and (t.ty * t.ry + t.tx * t.rx) * cand * window * itemsize \
                <= smem // 2:
            bk = cand
            break
    return replace(t, bk=bk)


def _threads(ext_y: int, ext_x: int, ry: int, rx: int, warp: int, most: int) -> Tiles:
    """The threads of a block for ``ry x rx`` register tiles (``bk`` left at 1)."""
    tx = min(16, most, _pow2_at_least(math.ceil(ext_x / rx)))
    ty = min(16, max(1, most // tx), _pow2_at_least(math.ceil(ext_y / ry)))
    while tx * ty < warp and tx < min(16, most) and tx * rx < ext_x * 2:
        tx *= 2  # at least a warp where the axis allows: idle lanes cost as much
    return Tiles(ty, tx, ry, rx, 1)


def _spread(sch: Schedule, copy: Any, step: Any, tiles: Tiles) -> None:
    """Spread a shared copy's loops (those under the step loop ``step``) over the block's
    threads: fused, split ``[None, ty, tx]`` (guarded where that does not divide), bound."""
    step_var = sch.get(step).loop_var
    loops = sch.get_loops(copy)
    at = next(i for i, lp in enumerate(loops) if sch.get(lp).loop_var is step_var)
    own = loops[at + 1:]
    fused = sch.fuse(*own) if len(own) > 1 else own[0]
    _, ty, tx = sch.split(fused, [None, tiles.ty, tiles.tx])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")


def tile_gemm(sch: Schedule, block: Any, target: Target, tiles: Tiles | None = None
              ) -> Schedule:
    """``sch`` (a copy; the original is untouched) with the GEMM block ``block`` (a
    handle or a name) tiled as the module docstring says, its element-wise consumers folded
    into the write-back. ``tiles`` overrides :func:`choose_tiles`. Raises
    :class:`~toolchain.errors.KilnError` (a schedule error naming the step) where the
    block is not a GEMM or a step does not apply."""
    sch = sch.copy()
    b = sch.get_block(block) if isinstance(block, str) else block
    blk = sch.get(b)
    axes = gemm_axes(blk)
    if axes is None:
        raise KilnError(f"tile_gemm: block {blk.name_hint!r} is not a GEMM-shaped reduction "
                        "(a sum over products of two loads with row and column axes)")
    loops = sch.get_loops(b)
    if len(loops) != len(blk.iter_vars):
        raise KilnError(f"tile_gemm: block {blk.name_hint!r} is already scheduled "
                        f"({len(loops)} loops for {len(blk.iter_vars)} axes)")
    ext = axes.extents
    k0 = axes.reduce[0]
    window = math.prod(ext[i] for i in axes.reduce[1:])
    itemsize = ir.bits_of(blk.body.buffer.dtype) // 8 or 4
    t = tiles or choose_tiles(ext[axes.y], ext[axes.x], ext[k0], window, target, itemsize,
                              batch=math.prod(ext[i] for i in axes.others))
    cl = sch.cache_write(b, 0, "local")
    fold_tail(sch, cl)
    # the shared copies are made before any loop of the nest is bound to the grid: the
    # launch-limit check then sees each copy only once it holds one step's tile
    copies = [stage_operand(sch, b, operand_buffer(sch.get(b), k)) for k in (0, 1)]
    others = [loops[i] for i in axes.others]
    rest = [loops[i] for i in axes.reduce[1:]]
    by, ty, yy = sch.split(loops[axes.y], [None, t.ty, t.ry])
    bx, tx, xx = sch.split(loops[axes.x], [None, t.tx, t.rx])
    ko, ki = sch.split(loops[k0], [None, t.bk])
    sch.reorder(*others, by, bx, ko, ty, tx, ki, *rest, yy, xx)
    bz = (sch.fuse(*others) if len(others) > 1 else others[0]) if others else None
    for s in copies:
        sch.compute_at(s, ko)
        if t.double_buffer and ext[k0] > t.bk:
            sch.double_buffer(s)
    sch.reverse_compute_at(cl, bx)
    wb = sch.get_loops(cl)
    bx_var = sch.get(bx).loop_var
    own = wb[next(i for i, lp in enumerate(wb) if sch.get(lp).loop_var is bx_var) + 1:]
    if len(own) != 2:
        raise KilnError(f"tile_gemm: the write-back of {blk.name_hint!r} has {len(own)} "
                        "loops per tile, expected 2 (rows and columns)")
    wy, wyy = sch.split(own[0], [t.ty, None])
    wx, wxx = sch.split(own[1], [t.tx, None])
    sch.reorder(wy, wx, wyy, wxx)
    for s in copies:
        _spread(sch, s, ko, t)
    for loop, tag in ((wy, "threadIdx.y"), (wx, "threadIdx.x"), (ty, "threadIdx.y"),
                      (tx, "threadIdx.x"), (by, "blockIdx.y"), (bx, "blockIdx.x")):
        sch.bind(loop, tag)
    if bz is not None:
        sch.bind(bz, "blockIdx.z")
    return sch


def stage_operand(sch: Schedule, block: Any, name: str) -> Any:
    """The block that will fill the shared tile of operand buffer ``name``: its producer
    stage in the function (a padding or a transpose kept out of the consumer), moved to
    shared memory; else a ``cache_read`` copy of the parameter."""
    for p in sch.get_producers(block):
        if any(w.buffer.name == name for w in sch.get(p).writes):
            sch.set_scope(p, name, "shared")
            return p
    return sch.cache_read(block, name, "shared")


def operand_stages(sch: Schedule) -> set[str]:
    """The names of the blocks that produce an operand of a GEMM-shaped block of ``sch``
    (read by nothing else): staged into shared memory by :func:`tile_gemm` instead of
    being inlined (a padded convolution's window then is a fixed-size tile of the padded
    input, computed per step with its padding guard)."""
    keep: set[str] = set()
    for b in sch.get_child_blocks(sch.get_block("root")):
        blk = sch.get(b)
        if gemm_axes(blk) is None:
            continue
        names = {ld.buffer.name for ld in operand_loads(blk)}
        for p in sch.get_producers(b):
            pb = sch.get(p)
            if (len(pb.writes) == 1 and pb.writes[0].buffer.name in names
                    and len(sch.get_consumers(p)) == 1 and pb.init is None):
                keep.add(pb.name_hint)
    return keep


def operand_loads(blk: ir.Block) -> list[ir.BufferLoad]:
    mul = blk.body.value.b
    return [ld for ld in (_operand(mul.a), _operand(mul.b)) if ld is not None]


def operand_buffer(blk: ir.Block, which: int) -> ir.Buffer | str:
    """The buffer of the product's ``which``-th operand (for ``cache_read``)."""
    mul = blk.body.value.b
    load = _operand(mul.a if which == 0 else mul.b)
    assert load is not None
    return load.buffer.name


#: the ops whose groups get the tiled kernel (their strategy-table entries on ``gpu``)
GEMM_OPS = ("Conv", "MatMul", "Gemm")


def try_tile_gemm(sch: Schedule, block: Any, target: Target,
                  wmma: WmmaTiles | None = None, wmma_default: WmmaTiles | None = None
                  ) -> Schedule | None:
    """The tensor-core kernel (:func:`~toolchain.schedules.gpu.tensorcore.try_tile_wmma`:
    a float16 GEMM on a target that declares tensor-core intrinsics, shapes multiples of
    its tiles); else :func:`tile_gemm` where it applies, at least :data:`MIN_USEFUL` of its
    tiles are inside the output (:func:`useful_fraction`) and its lowered kernel stays inside
    the target's shared memory per block (the allocations :func:`lowered_shared_bytes`
    counts), with the step ``bk`` and then the register tile halved until it does; else
    None (the caller keeps its generic kernel for the stage). ``wmma``: the tensor-core
    kernel's tiles instead of :func:`~toolchain.schedules.gpu.tensorcore.choose_wmma_tiles`
    (``benchmarks/cuda.py --gemm-sweep``); ``wmma_default``: the tensor-core kernel's
    default tiles (its search space's default point: a convolution's)."""

    blk = sch.get(block)
    axes = gemm_axes(blk)
    if axes is None:
        return None
    # tensor cores first, where the target has them
    tc = try_tile_wmma(sch, block, target, wmma, wmma_default)
    if tc is not None:
        return tc
    from toolchain.schedules.gpu.gemm_space import decide_simt

    # the heuristic's kernel, then the point tuning or records ask for (the default point
    # is the heuristic's: nothing changes without them)
    return decide_simt(sch, block, target, *heuristic_tiles(sch, block, target))


def heuristic_tiles(sch: Schedule, block: Any, target: Target
                    ) -> tuple[Schedule | None, int, Tiles | None]:
    """The SIMT kernel the heuristic builds for GEMM block ``block`` (None: the generic
    kernel), its split-K parts (1: none) and its tiles (None with the generic kernel)."""
    blk = sch.get(block)
    axes = gemm_axes(blk)
    assert axes is not None
    ext = axes.extents
    if prefers_generic(ext[axes.y] * ext[axes.x] * math.prod(ext[i] for i in axes.others),
                       ext[axes.reduce[0]] * math.prod(ext[i] for i in axes.reduce[1:]),
                       target):
        return None, 1, None
    split = split_k_factor(ext[axes.y], ext[axes.x], ext[axes.reduce[0]],
                           math.prod(ext[i] for i in axes.reduce[1:]), target,
                           ir.bits_of(blk.body.buffer.dtype) // 8 or 4,
                           math.prod(ext[i] for i in axes.others))
    if split > 1:
        got = split_k_tiles(sch, block, target, split)
        if got is not None:
            return got[0], split, got[1]
    got = fit_tiles(sch, block, target)
    return (None, 1, None) if got is None else (got[0], 1, got[1])


def prefers_generic(outputs: int, products: int, target: Target) -> bool:
    """Whether a GEMM of ``outputs`` outputs, each summing ``products`` products, keeps the
    generic kernel (one thread per output, no shared memory): its reduction is short
    (under :data:`SHORT_REDUCTION`) and the generic grid alone fills the GPU by the
    occupancy rule's test (a block for every SM and :func:`min_warps_per_sm` warps each;
    never on a descriptor without ``sm_count``).

    >>> from toolchain.target import load_target
    >>> sm90 = load_target("cuda-sm90")
    >>> prefers_generic(64 * 112 * 112, 3 * 7 * 7, sm90)  # ResNet-18's stem
    True
    >>> prefers_generic(256 * 14 * 14, 256 * 9, sm90)     # a long reduction: tiled
    False
    >>> prefers_generic(64 * 192, 64, sm90)               # too few outputs: tiled
    False
    """
    if not target.sm_count or products >= SHORT_REDUCTION:
        return False
    from toolchain.schedules.gpu.generic import THREADS

    threads = min(THREADS, target.max_threads_per_block or THREADS)
    blocks = math.ceil(outputs / threads)
    warps = blocks * math.ceil(threads / (target.warp_size or 32))
    return blocks >= target.sm_count and warps >= min_warps_per_sm(target) * target.sm_count


def fit_tiles(sch: Schedule, block: Any, target: Target) -> tuple[Schedule, Tiles] | None:
    """:func:`try_tile_gemm` without tensor cores and split-K: the tiles of
    :func:`choose_tiles`, made smaller until the lowered kernel's shared memory fits;
    the kernel and its tiles."""
    blk = sch.get(block)
    axes = gemm_axes(blk)
    assert axes is not None
    ext = axes.extents
    window = math.prod(ext[i] for i in axes.reduce[1:])
    t = choose_tiles(ext[axes.y], ext[axes.x], ext[axes.reduce[0]], window, target,
                     ir.bits_of(blk.body.buffer.dtype) // 8 or 4,
                     batch=math.prod(ext[i] for i in axes.others))
    if useful_fraction(t, ext[axes.y], ext[axes.x]) < MIN_USEFUL:
        return None  # most of the tile past the output's edge: one thread per output
    limit = target.max_shared_memory_per_block or 48 * 1024
    for _ in range(12):
        try:
            out = tile_gemm(sch, block, target, t)
            out.verify(target)
            if max(lowered_shared_bytes(out, target).values(), default=0) <= limit:
                return out, t
        except KilnError:
            if not t.double_buffer:  # a step that does not apply, or limits even single
                return None
        t = _smaller(t, ext[axes.reduce[0]])
        if t is None:
            return None
    return None


def split_k_factor(ext_y: int, ext_x: int, ext_k: int, window: int, target: Target,
                   itemsize: int = 4, batch: int = 1) -> int:
    """How many parts split-K cuts the outer reduction axis into (1: none). Where the
    tiles of :func:`choose_tiles` have one output a thread, each output sums at least
    :data:`SPLIT_K_MIN` products, and they do not fill the GPU (:func:`fills_gpu`) or a
    thread's one output sums more than :data:`MAX_SERIAL` products: the smallest of 2, 4
    ... :data:`MAX_SPLIT_K` that divides ``ext_k`` and with which they fill it and each
    part sums at most :data:`MAX_SERIAL` (the parts are more ``blockIdx.z`` blocks), else
    the largest of those that divides. Never on a descriptor without ``sm_count``.

    >>> from toolchain.target import load_target
    >>> split_k_factor(512, 7, 512, 9, load_target("cuda-sm90"), batch=7)  # ResNet-18 layer4
    4
    >>> split_k_factor(256, 14, 256, 9, load_target("cuda-sm90"), batch=14)  # layer3: long
    2
    >>> split_k_factor(1024, 1024, 1024, 1, load_target("cuda-sm90"))  # fills: no split
    1
    """
    t = choose_tiles(ext_y, ext_x, ext_k, window, target, itemsize, batch)
    products = ext_k * window
    if t.ry * t.rx > 1 or products < SPLIT_K_MIN or not target.sm_count or (
            fills_gpu(t, ext_y, ext_x, batch, target) and products <= MAX_SERIAL):
        return 1
    best = 1
    for s in (2 ** i for i in range(1, MAX_SPLIT_K.bit_length())):
        if ext_k % s or s > MAX_SPLIT_K:
            continue
        best = s
        ts = choose_tiles(ext_y, ext_x, ext_k // s, window, target, itemsize, batch * s)
        if fills_gpu(ts, ext_y, ext_x, batch * s, target) and products // s <= MAX_SERIAL:
            break
    return best


def split_k(sch: Schedule, block: Any, target: Target, parts: int) -> Schedule | None:
    """:func:`split_k_tiles`' kernels alone."""
    got = split_k_tiles(sch, block, target, parts)
    return None if got is None else got[0]


def split_k_tiles(sch: Schedule, block: Any, target: Target, parts: int,
                  tiles: Tiles | None = None) -> tuple[Schedule, Tiles] | None:
    """Split-K: the outer reduction axis of GEMM block ``block`` split into ``parts``
    (``rfactor``): a tiled kernel computes ``parts`` partial sums of every output (the
    parts on ``blockIdx.z``, into the kernel's scratch), a second, generic kernel adds
    them up with the block's element-wise tail (bias, activation) folded in; returned with
    the partial sums' tiles. None (``sch`` untouched) where a step does not apply.
    ``tiles``: the partial sums' kernel with exactly these tiles (a tuning point; its
    limits are checked by the caller) instead of :func:`fit_tiles`' choice.

    Before (a 3 x 3 convolution, 64 input channels, split in 4)::

        for nn, m, y, x, rc, ry, rx in T.grid(1, 16, 5, 5, 64, 3, 3):
            with T.block("conv2d_nchw"): conv2d_nchw[..] += pad[..] * w[..]

    after ``split`` + ``rfactor``, before tiling::

        for nn, m, y, x, rc_0, rc_1, ry, rx in T.grid(1, 16, 5, 5, 4, 16, 3, 3):
            with T.block("conv2d_nchw_rf"):     # rc_0 is a spatial axis: blockIdx.z
                conv2d_nchw_rf[vrc_0, vnn, vm, vy, vx] += pad[vnn, vrc_0 * 16 + vrc_1, ..] * w[..]
        for ax0, ax1, ax2, ax3, ax4 in T.grid(1, 16, 5, 5, 4):
            with T.block("conv2d_nchw"):
                conv2d_nchw[..] += conv2d_nchw_rf[ax4, ..]
    """
    from toolchain.schedules.gpu.generic import THREADS, generic_stage

    name = sch.get(block).name_hint
    trial = sch.copy()
    try:
        b = trial.get_block(name)
        axes = gemm_axes(trial.get(b))
        if axes is None:
            return None
        ko, _ = trial.split(trial.get_loops(b)[axes.reduce[0]], [parts, None])
        rf = trial.rfactor(ko, 0)
        _fuse_unit_loops(trial, rf)
        got = fit_tiles(trial, rf, target) if tiles is None else \
            (tile_gemm(trial, rf, target, tiles), tiles)
        if got is None:
            return None
        tiled, t = got
        return generic_stage(tiled, tiled.get_block(name),
                             min(THREADS, target.max_threads_per_block or THREADS)), t
    except KilnError:
        if tiles is not None:
            raise
        return None


def _fuse_unit_loops(sch: Schedule, block: Any) -> None:
    """Fuse each loop of extent 1 under ``block``'s first reduction loop into the loop
    before it: ``rfactor`` drops the unit axes (a 1 x 1 convolution's window) from the
    block but leaves their loops, and :func:`tile_gemm` wants one loop an axis."""
    blk = sch.get(block)
    first = next(i for i, iv in enumerate(blk.iter_vars) if iv.iter_type == ir.IterType.REDUCE)
    while len(loops := sch.get_loops(block)) > len(blk.iter_vars):
        unit = [i for i in range(first + 1, len(loops))
                if isinstance(sch.get(loops[i]).extent, ir.IntImm)
                and sch.get(loops[i]).extent.value == 1]
        if not unit:
            return
        sch.fuse(loops[unit[0] - 1], loops[unit[0]])


@contextlib.contextmanager
def wmma_tiles(tiles: WmmaTiles) -> Iterator[None]:
    """Compile the GEMM ops (:data:`GEMM_OPS`) on ``gpu`` targets with the tensor-core
    kernel's tiles ``tiles`` (its knobs: warps, fragments, step, double buffer, padding,
    fetch width) inside the ``with``: :func:`schedule_tiled` registered with them
    (``benchmarks/cuda.py --gemm-sweep``, the variant tests)."""
    from toolchain.schedules.registry import register_schedule, unregister_schedule

    for op in GEMM_OPS:
        register_schedule(op, "gpu")(functools.partial(schedule_tiled, wmma=tiles))
    try:
        yield
    finally:
        for op in GEMM_OPS:
            unregister_schedule(op, "gpu")


def _smaller(t: Tiles, ext_k: int) -> Tiles | None:
    """The next smaller tiles: single-buffered first, then the step (a smaller divisor
    of ``ext_k``), then the register tile."""
    if t.double_buffer:
        return replace(t, double_buffer=False)
    for cand in range(t.bk - 1, 0, -1):
        if ext_k % cand == 0 and cand <= t.bk // 2:
            return replace(t, bk=cand)
    if t.ry > 1 or t.rx > 1:
        return replace(t, ry=max(1, t.ry // 2), rx=max(1, t.rx // 2))
    return None


def lowered_shared_bytes(sch: Schedule, target: Target) -> dict[str, int]:
    """Bytes of ``shared`` memory each kernel of ``sch`` allocates once lowered (what
    ``ptxas`` counts), keyed by the kernel's outer loop variable.

    Lowered only as far as ``storage_rewrite``, the last pass that decides the shared
    allocations (compaction sizes them, double buffering doubles them, ``storage_rewrite``
    lets buffers share): ``inject_barriers`` and phase 4 add barriers and fold
    expressions, no allocation, and were 40 % of the lowering this search pays per tile
    candidate. ``tests/schedules/gpu/test_shared_bytes.py`` checks the count equals that of
    the whole lowering (:func:`shared_bytes_of` of ``lower(sch)``) over GEMM, convolution,
    split-K and tensor-core kernels.

    A function equal to one counted before in this process, names included
    (:func:`~toolchain.tir.structural.keys`' exact key), for an equal target, gets that
    count again (:data:`SHARED_BYTES_IN_PROCESS`; the lowering is a function of the two
    alone, as :data:`~toolchain.bundle.compiler.LOWERED_IN_PROCESS` has it): each point a
    tile search tries schedules the heuristic's candidates again, and 66 of the 284
    counts of ``tests/schedules/gpu/test_tensorcore.py test_gemm_space.py
    test_generic.py`` were of a function counted before. A lowering that fails is not
    kept (it fails again)."""
    from toolchain.driver import lower
    from toolchain.tir.structural import keys
    from toolchain.tir.transform.storage_rewrite import storage_rewrite

    func = sch.mod
    _, exact = keys(func)
    key = (exact, target.name)
    hit = SHARED_BYTES_IN_PROCESS.get(key, target)
    if hit is None:
        hit = (func, shared_bytes_of(lower(sch, target=target, stop_after=storage_rewrite)))
        SHARED_BYTES_IN_PROCESS.put(key, target, hit)
    return dict(hit[1])


#: :func:`lowered_shared_bytes`' counts in this process: by the scheduled function's exact
#: structural key and the target, ``(function, kept alive for its key; the count)``
SHARED_BYTES_IN_PROCESS = ByTarget(limit=512)


def shared_bytes_of(func: ir.PrimFunc) -> dict[str, int]:
    """Bytes of ``shared`` memory each kernel of the lowered ``func`` allocates, keyed by
    the kernel's outer loop variable (an extent that is not a constant counts 2**30)."""
    from toolchain.tir.transform.inject_barriers import kernels_of

    _, kernels = kernels_of(func.body)
    out = {}
    for k in kernels:
        total = 0
        for node, _ in st.walk(k):
            if isinstance(node, ir.Allocate) and node.buffer.scope.startswith("shared"):
                n = math.prod(int(d.value) if isinstance(d, ir.IntImm) else 1 << 30
                              for d in node.buffer.shape)
                total += n * ir.bits_of(node.buffer.dtype) // 8
        name = k.loop_var.name if isinstance(k, ir.For) else type(k).__name__
        out[name] = total
    return out


def schedule_tiled(node: Node, target: Target, wmma: WmmaTiles | None = None,
                   conv_tensor_cores: bool = True) -> OpSchedule:
    """The strategy-table entry of dense, matmul, batch matmul and convolution on GPU
    targets: ``node`` (a ``Fused`` group whose anchor is one of :data:`GEMM_OPS`, or the op
    alone) as kernels of :func:`~toolchain.schedules.gpu.generic.schedule_gpu` whose GEMM
    stages are tiled (:func:`try_tile_gemm`); a stage the tiles do not fit (a
    matrix-vector product: one row or one column) keeps the generic kernel. ``wmma``: the
    tensor-core tiles to use (see :func:`try_tile_gemm`; ``functools.partial`` makes a
    schedule function of it for ``register_schedule``). A float16 convolution gets the
    tensor-core implicit GEMM where it applies
    (:func:`~toolchain.schedules.gpu.conv_tc.conv_plan`; ``info["tensor_cores"]`` says
    so or why not); ``conv_tensor_cores=False`` keeps the SIMT kernel for it
    (``benchmarks/cuda.py --schedules tiled-simt-conv``)."""
    from toolchain.schedules.gpu.conv_tc import schedule_group, with_conv_tensor_cores

    return with_conv_tensor_cores(node, target, functools.partial(schedule_group, node,
                                                                  target, wmma),
                                  conv_tensor_cores)

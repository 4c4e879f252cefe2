"""The tensor-core GEMM on ``mma.sync`` + ``ldmatrix``: accumulators in registers.

The ``.mma`` variant of the tensor-core kernel (``WmmaTiles(mma=True)``, label
``4x2w.2x4f.kf2.db.p8.v8.async.mma``): the same block tiles, warps, operand fetches into
padded shared tiles (double-buffered, ``cp.async``) as :func:`~toolchain.schedules.gpu.
tensorcore.tile_gemm_wmma`, but

- the products are the target's ``mma.sync`` intrinsics, found by behaviour
  (:func:`mma_intrinsics`: ``C[i, j] += A[i, k] * B[k, j]`` over 16 x 8 x 16 and warp
  tiles of it, float16 x float16 -> float32, the accumulator in a scope that has a fill
  and no store -- ``mma.accumulator`` on ``cuda-sm80``/``cuda-sm90``); each call loads
  the warp's A rows with ``ldmatrix.x4`` and its B columns with ``ldmatrix.x4.trans``
  from the padded tiles (the 8 rows one 8 x 8 matrix reads fall in 8 different bank
  groups) and makes one ``mma.sync.m16n8k16`` per 16 x 8 tile;
- the accumulators stay in registers (``cache_write(C, "mma.accumulator")``, each lane
  its share of the warp's tile: :mod:`toolchain.tir.transform.mma_fragments`), and the
  epilogue (the cast to float16, bias, activation: ``fold_tail``) reads them there and
  stores to global memory directly: there is no float32 shared tile, so the block's
  shared memory is the operand tiles alone (:func:`mma_shared_bytes`: 37 KiB for the
  128 x 128 tile double-buffered, inside the static 48 KiB, against wmma's 101 KiB).

The epilogue's loops: per warp ``(16 fm) x (16 fn)`` elements, the rows split as
``(fm, 2, 8)`` and the columns as ``(2 fn, 4, 2)``; the lane (``threadIdx.x``) is the
fused ``(8, 4)`` pair -- row ``g`` and column pair ``t`` of the ISA's ``l = 4 g + t`` --
and the other loops are unrolled, so each lane reads its own registers with constant
indices. A different binding reads other lanes' elements: the emulation's result is then
wrong (``tests/schedules/gpu/test_mma.py`` breaks the binding and sees it).

>>> from toolchain.target import load_target
>>> tc = mma_intrinsics(load_target("cuda-sm90"))
>>> tc.mma, (tc.m, tc.n, tc.k), tc.warp_product(2, 8)
('cuda-sm90.mma_sync_m16n8k16', (16, 8, 16), 'cuda-sm90.mma_sync_32x64x16')
>>> mma_shared_bytes(WmmaTiles(4, 2, 2, 4, 2, pad=8, mma=True), tc)
37888
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolchain.errors import KilnError
from toolchain.schedules.gpu.generic import fold_tail
from toolchain.schedules.gpu.tensorcore import (
    TensorCore,
    WmmaTiles,
    fill_fragments,
    gemm_block,
    loops_under,
    spread_over_block,
    tensor_core_sets,
    warp_pipeline,
)
from toolchain.target import Target
from toolchain.tir.schedule import Schedule

#: the labels' fragment (a 16 x 16 tile of C, as for wmma): ``fn`` of them across a
#: warp are ``2 fn`` tiles of mma.sync's 16 x 8
FRAGMENT = 16


def mma_intrinsics(target: Target) -> TensorCore | None:
    """The target's register-accumulator tensor-core set: a fill and float16 products on
    an accumulator scope that has no store to shared memory (the kernel's epilogue
    reads the registers); None when it declares none.

    >>> from toolchain.target import load_target
    >>> mma_intrinsics(load_target("c-generic")) is None
    True
    """
    return next((tc for tc in tensor_core_sets(target).values() if not tc.store), None)


def mma_shared_bytes(t: WmmaTiles, tc: TensorCore) -> int:
    """Shared memory of the ``.mma`` kernel with tiles ``t``: one or ``t.stages`` copies
    (double buffer, deeper pipeline) of each padded float16 operand tile (no output
    tile)."""
    by, bx, bk = t.wy * t.fm * FRAGMENT, t.wx * t.fn * FRAGMENT, t.kf * tc.k
    halves = t.stages if t.double_buffer else 1
    return halves * (by * (bk + t.pad) + bk * (bx + t.pad)) * 2


def tile_gemm_mma(sch: Schedule, block: Any, target: Target, tc: TensorCore,
                  t: WmmaTiles) -> Schedule:
    """``sch`` (a copy) with the float16 GEMM block ``block`` on ``mma.sync`` (see the
    module docstring); ``t.fm x t.fn`` are 16 x 16 fragments a warp. Raises
    :class:`~toolchain.errors.KilnError` where a step does not apply."""
    from toolchain.schedules.gpu.gemm import operand_buffer, stage_operand

    sch, b, axes = gemm_block(sch, block, "tile_gemm_mma")
    warp = target.warp_size or 32
    if warp != 32:
        raise KilnError(f"tile_gemm_mma: mma.sync needs warps of 32 lanes, the target has {warp}")
    nt = t.fn * FRAGMENT // tc.n  # 16 x 8 tiles across a warp
    cf = sch.cache_write(b, 0, tc.accumulator)
    sch.set_dtype(b, 0, "float32")  # float32 sums in registers, rounded in the epilogue
    fold_tail(sch, cf)
    copies = [stage_operand(sch, b, operand_buffer(sch.get(b), n)) for n in (0, 1)]
    loops = sch.get_loops(b)
    product = tc.warp_product(t.fm, nt) if t.warp_mma else None
    w = warp_pipeline(sch, loops, axes, t, tc, nt, product is not None, copies,
                      mma_shared_bytes(t, tc) > (target.max_shared_memory_per_block
                                                 or 48 * 1024))
    by, bx, wy, wx, ko, kf, frags, yi, bz = w
    sch.reverse_compute_at(cf, bx)
    warp_names = {sch.get(wy).loop_var.name + "_init": "threadIdx.z",
                  sch.get(wx).loop_var.name + "_init": "threadIdx.y"}
    init = sch.decompose_reduction(b, ko)
    init_warps = fill_fragments(sch, init, warp_names, frags, product is not None,
                                replace(t, fn=nt), tc)
    for lp in (kf, *frags):
        sch.unroll(lp)
    sch.tensorize(yi, product or tc.mma)
    lanes = epilogue_loops(sch, cf, bx, t, nt)
    for s in copies:
        spread_over_block(sch, s, ko, t, warp, fetch=True)
    for loop, tag in (*init_warps, *lanes, (wy, "threadIdx.z"), (wx, "threadIdx.y"),
                      (by, "blockIdx.y"), (bx, "blockIdx.x")):
        sch.bind(loop, tag)
    if bz is not None:
        sch.bind(bz, "blockIdx.z")
    return sch


def epilogue_loops(sch: Schedule, cf: Any, bx: Any, t: WmmaTiles, nt: int) -> list[tuple[Any, str]]:
    """Split the write-back ``cf`` (registers -> global, with the tail) under ``bx`` so
    that each lane reads the accumulator elements it holds: rows ``(warp, fm, 2, g)``,
    columns ``(warp, nt, t, 2)``, lane ``4 g + t`` (the ISA's m16n8 accumulator layout),
    the rest unrolled; returns the loops to bind."""
    ay, ax = loops_under(sch, cf, bx)
    swy, sfy, sh, sg = sch.split(ay, [t.wy, t.fm, 2, 8])
    swx, sfx, st, s2 = sch.split(ax, [t.wx, nt, 4, 2])
    sch.reorder(swy, swx, sg, st, sfy, sfx, sh, s2)
    lane = sch.fuse(sg, st)
    for lp in (sfy, sfx, sh, s2):
        sch.unroll(lp)
    return [(swy, "threadIdx.z"), (swx, "threadIdx.y"), (lane, "threadIdx.x")]


__all__ = ["FRAGMENT", "epilogue_loops", "mma_intrinsics", "mma_shared_bytes", "tile_gemm_mma"]

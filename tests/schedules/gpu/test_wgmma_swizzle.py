"""The 128-byte swizzled wgmma operand layouts: the fetch's stores against the
hardware's descriptor reads, a GEMM through them, and the stores' bank conflicts."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import KilnError
from toolchain.schedules.gpu.wgmma_swizzle import (
    NO_SWIZZLE,
    SW128,
    core_tile_offset,
    descriptor_address,
    store_ways,
    sw128_descriptors,
    sw128_tile_offset,
    swizzle128,
)


def test_the_swizzle_permutes_the_chunks_of_each_row_of_an_atom() -> None:
    addrs = [swizzle128(a) for a in range(0, 2048, 16)]
    assert sorted(addrs) == list(range(0, 2048, 16))  # a bijection, atom by atom
    assert all(swizzle128(swizzle128(a)) == a for a in range(0, 2048, 2))
    # row 3 of an atom: chunk c stored at chunk c ^ 3, within the row's 128 bytes
    assert [swizzle128(3 * 128 + 16 * c) - 3 * 128 for c in range(8)] == \
        [16 * (c ^ 3) for c in range(8)]


def a_reads(rows: int, cols: int, wg: int, step: int, mode: int = SW128) -> dict:
    """Element (m, k) of warpgroup ``wg``'s 16-deep product ``step`` -> the byte read."""
    d = sw128_descriptors("K", rows, cols, step)
    d["start"] += wg * 64 * 128
    d["mode"] = mode
    return {(64 * wg + m, 16 * step + k): descriptor_address("K", m, k, **d)
            for m in range(64) for k in range(16)}


def b_reads(rows: int, n: int, wg: int, step: int, mode: int = SW128) -> dict:
    """Element (k, col) of warpgroup ``wg``'s (across N, ``n`` wide) product ``step``."""
    d = sw128_descriptors("MN", rows, 0, step)
    d["start"] += n * wg // 64 * d["lbo"]
    d["mode"] = mode
    return {(16 * step + k, n * wg + c): descriptor_address("MN", k, c, **d)
            for k in range(16) for c in range(n)}


@pytest.mark.parametrize("rows,cols", [(128, 64), (64, 128)])
def test_a_k_major_descriptors_read_what_the_fetch_stored(rows: int, cols: int) -> None:
    for wg in range(rows // 64):
        for step in range(cols // 16):
            for (m, k), addr in a_reads(rows, cols, wg, step).items():
                assert addr == sw128_tile_offset("K", m, k, rows=rows, cols=cols), (m, k)


@pytest.mark.parametrize("rows,cols,n", [(32, 256, 128), (16, 128, 64)])
def test_b_mn_major_descriptors_read_what_the_fetch_stored(rows: int, cols: int,
                                                           n: int) -> None:
    for wg in range(cols // n):
        for step in range(rows // 16):
            for (k, c), addr in b_reads(rows, n, wg, step).items():
                assert addr == sw128_tile_offset("MN", k, c, rows=rows, cols=cols), (k, c)


def gemm_through_the_layouts(a: np.ndarray, b: np.ndarray, *, store_swizzled: bool = True,
                             mode: int = SW128) -> np.ndarray:
    """Store A (M x K) and B (K x N) as a fetch would, read them back through the
    descriptors of each warpgroup's products (64 x n x 16) and accumulate."""
    (mm, kk), nn, n = a.shape, b.shape[1], 64
    place = sw128_tile_offset if store_swizzled else (
        lambda major, r, c, rows, cols: swizzle128(sw128_tile_offset(major, r, c,
                                                                     rows=rows, cols=cols)))
    sa, sb = np.zeros(4 * mm * kk), np.zeros(4 * kk * nn)  # room for misread addresses
    for (m, k), x in np.ndenumerate(a):
        sa[place("K", m, k, rows=mm, cols=kk) // 2] = x
    for (k, c), x in np.ndenumerate(b):
        sb[place("MN", k, c, rows=kk, cols=nn) // 2] = x
    out = np.zeros((mm, nn))
    for step in range(kk // 16):
        for wy in range(mm // 64):
            for wx in range(nn // n):
                ar = a_reads(mm, kk, wy, step, mode)
                br = b_reads(kk, n, wx, step, mode)
                ta = np.zeros((64, 16))
                tb = np.zeros((16, n))
                for (m, k), addr in ar.items():
                    ta[m - 64 * wy, k - 16 * step] = sa[addr // 2]
                for (k, c), addr in br.items():
                    tb[k - 16 * step, c - n * wx] = sb[addr // 2]
                out[64 * wy:64 * wy + 64, n * wx:n * wx + n] += ta @ tb
    return out


def test_a_gemm_through_the_swizzled_layouts_matches_and_a_broken_side_does_not() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 64)), rng.standard_normal((64, 128))
    want = a @ b
    assert np.abs(gemm_through_the_layouts(a, b) - want).max() < 1e-9
    # the fetch storing unswizzled (the XOR undone) while the descriptors say 128B swizzle
    assert np.abs(gemm_through_the_layouts(a, b, store_swizzled=False) - want).max() > 0.1
    # the descriptors' layout type 0 over swizzled stores (the offsets read as core matrices)
    assert np.abs(gemm_through_the_layouts(a, b, mode=NO_SWIZZLE) - want).max() > 0.1


def test_layout_type_0_is_the_kernels_core_matrix_arithmetic() -> None:
    rows, cols, pad = 128, 32, 8  # A: lbo 16 BM + 2 pad, sbo 128
    for m in range(64):
        for k in range(16):
            assert descriptor_address("K", m, k, start=0, lbo=16 * rows + 2 * pad, sbo=128,
                                      mode=NO_SWIZZLE) == \
                core_tile_offset("K", m, k, rows=rows, cols=cols, pad=pad)
    for k in range(16):  # B (K 32 x N 64): lbo 128, sbo 16 BK + 2 pad
        for c in range(64):
            assert descriptor_address("MN", k, c, start=0, lbo=128, sbo=16 * 32 + 2 * pad,
                                      mode=NO_SWIZZLE) == \
                core_tile_offset("MN", k, c, rows=32, cols=64, pad=pad)


def test_bank_conflicts_of_the_fetch_stores() -> None:
    """The docs' figures for the padded tiles (A 128 x 32, B 32 x 256, 512 threads) and
    the swizzled tiles' (A 128 x 64, the K a 128-byte row needs): conflict-free both."""
    ways = {p: (store_ways("K", rows=128, cols=32, threads=512, layout="core", pad=p),
                store_ways("MN", rows=32, cols=256, threads=512, layout="core", pad=p))
            for p in (0, 8, 16)}
    assert ways == {0: (4, 8), 8: (2, 1), 16: (1, 2)}
    assert store_ways("K", rows=128, cols=64, threads=512, layout="sw128") == 1
    assert store_ways("MN", rows=32, cols=256, threads=512, layout="sw128") == 1
    assert store_ways("MN", rows=64, cols=128, threads=256, layout="sw128") == 1
    # unpadded core matrices at the same K 64: 8-way on both sides
    assert store_ways("K", rows=128, cols=64, threads=512, layout="core") == 8


def test_what_is_not_modelled_is_refused() -> None:
    with pytest.raises(KilnError, match="base offset"):
        descriptor_address("K", 0, 0, start=0, lbo=16, sbo=1024, mode=SW128, base_offset=1)
    with pytest.raises(KilnError, match="layout type 2"):
        descriptor_address("K", 0, 0, start=0, lbo=16, sbo=1024, mode=2)
    with pytest.raises(KilnError, match="whole atoms"):
        sw128_tile_offset("K", 0, 0, rows=64, cols=32)


def test_a_gemm_with_swizzled_shared_tiles_through_the_gpu_lowering() -> None:
    """A tiled GPU GEMM (64 x 64 x 64, 32 x 32 tiles, steps of 32) with both shared tiles
    swizzled (``transform_layout(.., swizzle=128)``: slices of rows of 32 floats, 128 bytes,
    compacted to the tile: 32 rows) lowers;
    its SIMT emulation in C (strict warnings) matches ``A @ B``, the race checker finds no
    race, and the CUDA renderer writes the XOR's arithmetic into the kernel, the tile
    (compacted to 32 x 32) aligned to 1024 bytes."""
    from tests.codegen.gpu_workloads import run_simt, tiled_gemm
    from toolchain.codegen.backend import CUDABackend
    from toolchain.driver import lower
    from toolchain.tir.race import find_races

    sch = tiled_gemm(n=64, tile=32, bk=32, threads=8)
    for name in ("A_shared", "B_shared"):  # [64 / 32][64][32]: compacted to [1][32][32]
        sch.transform_layout(sch.get_block(name), 0, factors=[[None], [None, 32]],
                             order=[1, 0, 2], swizzle=128)
    assert "swizzle=128" in str(sch.mod)
    f = lower(sch)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((64, 64)).astype("float32") for _ in range(2))
    c = np.zeros((64, 64), "float32")
    run_simt(f, a, b, c, name="sw128_gemm")
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert find_races(f) == []
    art = CUDABackend().kernel(f, "sw128_gemm")
    cuda = "\n".join(str(x) for k in art.launches for x in k["body"])
    assert "__shared__ float A_shared[1024] __attribute__((aligned(1024)));" in cuda
    assert "% 2 * 16" in cuda  # the XOR's third bit, in the stores and the loads


def test_swizzled_tiles_in_dynamic_shared_memory_start_on_1024_byte_boundaries() -> None:
    """Tiles over the static limit (two 32 KB swizzled tiles) are carved out of dynamic
    shared memory: the array declared ``__align__(1024)`` and each tile's offset a
    multiple of 1024 bytes (the swizzle is on address bits 7-9)."""
    import re

    from toolchain import te
    from toolchain.codegen.backend import CUDABackend
    from toolchain.driver import lower
    from toolchain.tir.schedule import Schedule
    from toolchain.tir.schedule.gpu import DYNAMIC_SHARED_MEMORY

    A = te.placeholder((128, 256), name="A")
    B = te.placeholder((256, 128), name="B")
    k = te.reduce_axis((0, 256), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]), target="cuda-sm90")
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    ti, _ = sch.split(i, [16, None])
    tj, _ = sch.split(j, [16, None])
    ko, _ = sch.split(kk, [None, 64])
    sch.reorder(ko, ti, tj)
    for operand in (0, 1):  # A 128 x 64 and B 64 x 128 a step: 32 KB each
        s = sch.cache_read(c, operand, "shared")
        sch.compute_at(s, ko)
        sch.transform_layout(s, 0, factors=[[None], [None, 32]], order=[1, 0, 2],
                             swizzle=128)
        _, ty, tx = sch.split(sch.fuse(*sch.get_loops(s)[-2:]), [None, 16, 16])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    sch.annotate(ko, DYNAMIC_SHARED_MEMORY, 1)
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    art = CUDABackend().kernel(lower(sch), "sw128_dyn")
    cuda = "\n".join(str(x) for k in art.launches for x in k["body"])
    assert "extern __shared__ __align__(1024) unsigned char kiln_smem[];" in cuda
    offsets = [int(x) for x in re.findall(r"kiln_smem \+ (\d+)", cuda)] or [0]
    assert art.launches[0]["smem"] >= 64 * 1024
    assert all(o % 1024 == 0 for o in offsets), offsets

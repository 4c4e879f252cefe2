"""The ``wgmma`` intrinsics of ``targets/cuda-sm90.yaml`` (warpgroup MMA, sm_90a), proven on
the CPU: their SIMT emulation reads the operands through the same descriptor bit fields
and core-matrix layout the hardware uses and writes each of the 128 threads' accumulator
registers in the PTX ISA's layout. The test lays the operands out in shared-memory-shaped
buffers (K-major core matrices for A, MN-major ones for B), calls the specialised C
functions, and reads the registers back with its own statement of the ISA's layout
against a numpy product: a wrong descriptor, operand layout or thread mapping in the
emulation gives a wrong product (each broken on purpose below). nvcc builds the device
branch for sm_90a to object code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from toolchain.codegen.artifact import support_of
from toolchain.errors import ScheduleError
from toolchain.intrinsics import attach_intrinsics, get_spec, load_intrinsics
from toolchain.target import load_target
from toolchain.tir import ir

ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc")

#: the operand buffers: an A tile of 128 rows x 32 of k laid out [k / 8][row][8] and a B
#: tile of 32 of k x 256 columns laid out [column / 8][k][8]; the calls read the second
#: 64 rows of A and columns 128..255 of B (tiles that do not start at the buffers' first
#: elements: the descriptors' offsets and start addresses both matter)
BY, BX, BK = 128, 256, 32
ROW0, COL0 = 64, 128


def _ptr(load: ir.BufferLoad) -> ir.Call:
    return ir.Call("handle", "tir.address_of", [load])


def _kernel(product: str, fill: str, k0: int = 0) -> tuple[ir.PrimFunc, int, int]:
    """A function that zeroes a warpgroup accumulator and adds one product into it: the
    calls ``attach_intrinsics`` specialises; returns it, N and the product's k."""
    load_intrinsics(load_target("cuda-sm90"))
    spec = get_spec(f"cuda-sm90.{product}")
    n, k = spec.extents["c"] * 8, spec.extents["d"] * 8
    a = ir.Buffer("A_s", (BK // 8, BY, 8), "float16", "shared")
    b = ir.Buffer("B_s", (BX // 8, BK, 8), "float16", "shared")
    c = ir.Buffer("C_acc", (64, n // 8, 8), "float32", "wgmma.accumulator")
    calls = [ir.Call("int32", get_spec(f"cuda-sm90.{fill}").function, [_ptr(c[0, 0, 0])]),
             ir.Call("int32", spec.function, [_ptr(a[k0 // 8, ROW0, 0]),
                                              _ptr(b[COL0 // 8, k0, 0]), _ptr(c[0, 0, 0])])]
    body = ir.SeqStmt([ir.Evaluate(x) for x in calls])
    return ir.PrimFunc([a, b, c], body, "wg"), n, k


def _c_source(product: str, fill: str, k0: int = 0) -> tuple[str, list[str], int, int]:
    """The specialised definitions (the target's helpers first) and the two function
    names the kernel calls."""
    f, n, k = _kernel(product, fill, k0)
    lowered = attach_intrinsics(f)
    defs = "\n".join(d.text for d in support_of(lowered).definitions)
    names = []

    def grab(x: object) -> None:
        if isinstance(x, ir.Call) and x.op.startswith("kiln_wgmma"):
            names.append(x.op)

    from toolchain.tir.functor import post_order_visit

    post_order_visit(lowered.body, grab)
    return defs, names, n, k


def _operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Logical A (BY x BK) and B (BK x BX) in float16, and the same laid out as the
    shared buffers: A[m, k] at [k / 8][m][k % 8], B[k, j] at [j / 8][k][j % 8]."""
    a = rng.uniform(-1, 1, (BY, BK)).astype(np.float16)
    b = rng.uniform(-1, 1, (BK, BX)).astype(np.float16)
    a_s = a.reshape(BY, BK // 8, 8).transpose(1, 0, 2).copy()
    b_s = b.reshape(BK, BX // 8, 8).transpose(1, 0, 2).copy()
    return a, b, a_s, b_s


def _registers_to_tile(regs: np.ndarray, n: int) -> np.ndarray:
    """The warpgroup's 64 x n tile from its registers (register r of thread t at
    ``regs[r, t]``), as the PTX ISA lays out a wgmma m64nN float32 accumulator: warp
    t / 32 owns 16 rows; lane 4 g + q holds, per 8 columns, (g, 2q), (g, 2q + 1),
    (g + 8, 2q), (g + 8, 2q + 1)."""
    tile = np.full((64, n), np.nan, np.float32)
    for t in range(128):
        w, g, q = t // 32, t % 32 // 4, t % 4
        for r in range(n // 2):
            row = 16 * w + g + 8 * (r % 4 // 2)
            col = 8 * (r // 4) + 2 * q + r % 2
            tile[row, col] = regs[r, t]
    return tile


def _run(tmp: Path, defs: str, names: list[str], n: int, k: int, k0: int = 0,
         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Compile the emulation with cc, run the fill and the product; returns the tile
    the registers hold and the numpy product."""
    from tests.tools import require

    require("cc")
    rng = np.random.default_rng(seed)
    a, b, a_s, b_s = _operands(rng)
    a_s.tofile(tmp / "a.bin")
    b_s.tofile(tmp / "b.bin")
    fill, product = names
    off_a = (k0 // 8) * BY * 8 + ROW0 * 8
    off_b = (COL0 // 8) * BK * 8 + k0 * 8
    main = f"""#include <stdio.h>
#include <stdint.h>
#include "kiln_runtime.h"
{defs}
/* room past the tiles: a broken descriptor reads zeros there, not out of bounds */
static kiln_f16 A_s[{a_s.size} + 65536], B_s[{b_s.size} + 65536];
static float C_acc[{n // 2} * 128];
int main(int argc, char **argv) {{
  FILE *f = fopen(argv[1], "rb");
  if (!f || fread(A_s, 2, {a_s.size}, f) != {a_s.size}) return 2;
  fclose(f);
  f = fopen(argv[2], "rb");
  if (!f || fread(B_s, 2, {b_s.size}, f) != {b_s.size}) return 2;
  fclose(f);
  {fill}(C_acc);
  if ({product}(&A_s[{off_a}], &B_s[{off_b}], C_acc) != 0) return 3;
  fwrite(C_acc, 4, {n // 2} * 128, stdout);
  return 0;
}}
"""
    (tmp / "wg.c").write_text(main)
    subprocess.run(["cc", "-O1", "-std=c11", "-Wall", "-Werror", "-I", str(ROOT / "runtime_c"),
                    str(tmp / "wg.c"), "-o", str(tmp / "wg"), "-lm"], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(tmp / "wg"), str(tmp / "a.bin"), str(tmp / "b.bin")],
                         capture_output=True, check=True).stdout
    regs = np.frombuffer(out, np.float32).reshape(n // 2, 128)
    want = a[ROW0:ROW0 + 64, k0:k0 + k].astype(np.float64) @ \
        b[k0:k0 + k, COL0:COL0 + n].astype(np.float64)
    return _registers_to_tile(regs, n), want


@pytest.mark.parametrize("product, fill, k0", [
    ("wgmma_m64n64k16", "wgmma_fill_64x64", 16),
    ("wgmma_m64n128k32", "wgmma_fill_64x128", 0),
])
def test_the_emulated_wgmma_product_matches_numpy(tmp_path: Path, product: str, fill: str,
                                                  k0: int) -> None:
    """64 x 64 x 16 (the tile's second k slice) and 64 x 128 x 32 (two products, the
    descriptors advanced between them): every register holds its element of A B."""
    defs, names, n, k = _c_source(product, fill, k0)
    got, want = _run(tmp_path, defs, names, n, k, k0)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("good, bad, why", [
    # A's descriptor with its leading (K) and stride (M) byte offsets exchanged
    ("((uint64_t)(2048 >> 4) << 16) | ((uint64_t)(128 >> 4) << 32))",
     "((uint64_t)(128 >> 4) << 16) | ((uint64_t)(2048 >> 4) << 32))", "A descriptor"),
    # B read as K-major core matrices (no .trans) instead of MN-major ones
    ("+ k % 8 * 16 + j % 8 * 2", "+ j % 8 * 16 + k % 8 * 2", "B layout"),
    # the accumulator's rows given to lanes as 8 g + q instead of 4 g + q
    ("t / 32 * 16 + t % 32 / 4 + 8 * (r % 4 / 2)", "t / 32 * 16 + t % 8 + 8 * (r % 4 / 2)",
     "thread mapping"),
    # the second product's descriptors not advanced along K
    ("ds[2] = {da + (uint64_t)s * 256, db + (uint64_t)s * 16}",
     "ds[2] = {da + (uint64_t)s * 0, db + (uint64_t)s * 16}", "descriptor advance"),
])
def test_a_broken_piece_of_the_emulation_gives_a_wrong_product(tmp_path: Path, good: str,
                                                                bad: str, why: str) -> None:
    """Each piece matters: change one (in the specialised C) and the product is wrong."""
    defs, names, n, k = _c_source("wgmma_m64n128k32", "wgmma_fill_64x128")
    assert good in defs, why
    got, want = _run(tmp_path, defs.replace(good, bad), names, n, k)
    assert np.nanmax(np.abs(got - want)) > 0.1, why


def test_the_operands_must_be_core_matrices() -> None:
    """A plain row-major tile (rows of 16 halves) is refused when specialising: wgmma
    without a swizzle reads 8 x 16-byte core matrices, each 128 contiguous bytes."""
    load_intrinsics(load_target("cuda-sm90"))
    spec = get_spec("cuda-sm90.wgmma_m64n64k16")
    a = ir.Buffer("A_s", (2, 64, 16), "float16", "shared")  # rows of 16: A_t1 = 16
    b = ir.Buffer("B_s", (8, 16, 8), "float16", "shared")
    c = ir.Buffer("C_acc", (64, 8, 8), "float32", "wgmma.accumulator")
    call = ir.Call("int32", spec.function, [_ptr(a[0, 0, 0]), _ptr(b[0, 0, 0]),
                                            _ptr(c[0, 0, 0])])
    with pytest.raises(ScheduleError, match="core matrices"):
        attach_intrinsics(ir.PrimFunc([a, b, c], ir.Evaluate(call), "bad"))


def test_the_wgmma_intrinsics_declare_warpgroups_and_sm90a() -> None:
    """128 lanes, the sm_90a feature set; sm80 has none; the products over 128-byte
    swizzled tiles (``_sw128``) say so by their ``swizzle`` key, no other does;
    cuda-sm90's other tensor-core sets are those of sm80 (the wgmma products are no 2-D
    GEMM behaviour: no existing schedule picks them)."""
    from toolchain.schedules.gpu.tensorcore import tensor_core_sets

    t = load_target("cuda-sm90")
    load_intrinsics(t)
    wg = [n for n in t.intrinsics if n.startswith("wgmma_")]
    sm80 = load_target("cuda-sm80").intrinsics
    assert len(wg) == 10 and not any(n.startswith("wgmma_") for n in sm80)
    for n in wg:
        assert t.intrinsics[n].get("swizzle") == (128 if "_sw128" in n else None)
        spec = get_spec(f"cuda-sm90.{n}")
        assert spec.lanes == 128 and spec.scopes["C"] == "wgmma.accumulator"
        assert spec.arch_features == ("fill" not in n)
        # the overlapped products leave one group running: their wait says the same
        assert spec.in_flight == (1 if n.endswith("_pipe") else 0)
        waits = "wait_group.sync.aligned {{ keep }}" in spec.template
        if spec.in_flight:
            assert waits and "set keep = 1 %}" in spec.template
        elif "fill" not in n:  # a waiting product: wait_group 0
            assert "wait_group.sync.aligned 0;" in spec.template if not waits \
                else "set keep = 0 %}" in spec.template
    assert sorted(tensor_core_sets(t)) == sorted(tensor_core_sets(load_target("cuda-sm80")))


def _device_source(defs: str, names: list[str], n: int, k: int) -> str:
    """A kernel that fetches the tiles into shared memory in the core-matrix layouts with
    ordinary stores, orders them for the async proxy and calls the fill and the product
    (a warpgroup a block)."""
    fill, product = names
    return f"""#include <cuda_fp16.h>
#include <stdint.h>
typedef uint16_t kiln_f16;
{defs}
extern "C" __global__ void __launch_bounds__(128)
wg(const __half *a, const __half *b, float *out) {{
  __shared__ __align__(128) __half A_s[{BK // 8 * BY * 8}];
  __shared__ __align__(128) __half B_s[{BX // 8 * BK * 8}];
  for (int x = threadIdx.x; x < {BY * BK}; x += 128)       /* A[m][k] -> [k / 8][m][k % 8] */
    A_s[x % {BK} / 8 * {BY * 8} + x / {BK} * 8 + x % 8] = a[x];
  for (int x = threadIdx.x; x < {BK * BX}; x += 128)       /* B[k][j] -> [j / 8][k][j % 8] */
    B_s[x % {BX} / 8 * {BK * 8} + x / {BX} * 8 + x % 8] = b[x];
  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
  __syncthreads();
  float acc[{n // 2}];
  {fill}(acc);
  {product}(&A_s[{ROW0 * 8}], &B_s[{COL0 // 8 * BK * 8}], acc);
  for (int r = 0; r < {n // 2}; ++r) out[r * 128 + threadIdx.x] = acc[r];
}}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_nvcc_builds_the_wgmma_kernel_for_sm90a(tmp_path: Path) -> None:
    """The device branch (inline PTX: the descriptors, wgmma.fence, mma_async with 64
    registers, commit and wait) is built to sm_90a object code with every warning an
    error; for plain sm_90 (no wgmma there: ``arch_features``) the body is a trap.

    One nvcc run, device-only (the source has no host code: ``-fatbin`` runs the same
    preprocessor, ``cicc`` and ``ptxas`` as ``-c`` and leaves out the host compiler over
    nvcc's launch stub): the sm_90a object code, and the ``compute_90`` PTX that ``-ptx
    -arch=sm_90`` would write, kept (``-keep``) and read here."""
    defs, names, n, k = _c_source("wgmma_m64n128k32", "wgmma_fill_64x128")
    src = tmp_path / "wg.cu"
    src.write_text(_device_source(defs, names, n, k))
    (tmp_path / "keep").mkdir()
    res = subprocess.run([NVCC, "-O3", str(src), "-Werror", "all-warnings", "-fatbin",
                          "-gencode", "arch=compute_90a,code=sm_90a",
                          "-gencode", "arch=compute_90,code=compute_90",
                          "-keep", "-keep-dir", str(tmp_path / "keep"),
                          "-o", str(tmp_path / "wg.fatbin")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "keep" / "wg.compute_90a.cubin").stat().st_size > 0
    text = (tmp_path / "keep" / "wg.compute_90.ptx").read_text()
    assert "wgmma" in (tmp_path / "keep" / "wg.compute_90a.ptx").read_text()
    assert "wgmma" not in text and "trap;" in text

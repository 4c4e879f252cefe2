"""Kernels with shared memory: barriers in the CUDA source (nvcc compiles it), and the
SIMT emulation of the same lowered IR as C on the CPU, checked against numpy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.codegen.gpu_workloads import run_simt, tiled_gemm
from tests.codegen.test_cuda import shared_memory_matmul
from tests.tools import needs
from toolchain.codegen.backend import CUDABackend, SimtCBackend
from toolchain.codegen.cuda import CUDARenderer
from toolchain.driver import lower
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.transform.inject_barriers import barrier

NVCC = shutil.which("nvcc")
needs_nvcc = needs("nvcc")

SCHEDULES = {
    "tiled": lambda: tiled_gemm(),
    "tiled_local_accumulator": lambda: tiled_gemm(local=True),
    "tiled_96": lambda: tiled_gemm(n=96, tile=32, bk=16, threads=8, local=True),
    "one_output_per_thread": lambda: shared_memory_matmul(64, 16),
}


def test_tiled_gemm_cuda_source_has_the_barriers_of_the_ir() -> None:
    src = CUDARenderer().render(lower(tiled_gemm()), name="gemm")
    assert src.kernels[0]["grid"] == ["2", "2", "1"] and src.kernels[0]["block"] == \
        ["8", "8", "1"]
    code = src.code
    assert code.count("__syncthreads();") == 2
    assert "__shared__ float A_shared[256]" in code and "__shared__ float B_shared[256]" in code
    launch = CUDABackend().kernel(lower(tiled_gemm()), "net_k0").launches[0]
    assert sum("__syncthreads();" in line for line in launch["body"]) == 2


NVCC_GEMMS = ["tiled", "tiled_local_accumulator"]


def _cubin(sources: list[str], out: Path) -> subprocess.CompletedProcess:
    """``sources`` joined into one file, device code only (they have no host code):
    ``-cubin`` runs nvcc's device side alone (cicc, ptxas) for sm_80, every warning an
    error, without cudafe++ and the host compiler over the launch stubs."""
    (out.parent / f"{out.stem}.cu").write_text("".join(sources))
    return subprocess.run([NVCC, "-arch=sm_80", "-cubin", "-Werror", "all-warnings",
                           str(out.parent / f"{out.stem}.cu"), "-o", str(out)],
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def gemm_cubin(tmp_path_factory) -> tuple[dict[str, str], subprocess.CompletedProcess | None]:
    """The GEMMs' sources (each kernel named by its schedule), and one nvcc run over all
    of them (None without nvcc): its fixed cost, about 0.4 CPU s, once, not once a GEMM."""
    srcs = {n: CUDARenderer().render(lower(SCHEDULES[n]()), name=f"gemm_{n}").code
            for n in NVCC_GEMMS}
    out = tmp_path_factory.mktemp("gemms") / "gemms.cubin"
    return srcs, (_cubin(list(srcs.values()), out) if NVCC else None)


@needs_nvcc
@pytest.mark.parametrize("name", NVCC_GEMMS)
def test_tiled_gemm_compiles_with_nvcc(name: str, gemm_cubin, tmp_path: Path) -> None:
    srcs, res = gemm_cubin
    assert res is not None
    if res.returncode == 0:
        cubin = Path(res.args[-1])
    else:  # the joined run failed: this GEMM alone says, and the errors must not be its own
        alone = _cubin([srcs[name]], tmp_path / "gemm.cubin")
        assert alone.returncode == 0, alone.stderr
        first = 1 + sum(srcs[n].count("\n") for n in NVCC_GEMMS[:NVCC_GEMMS.index(name)])
        mine = range(first, first + srcs[name].count("\n"))
        assert not any(f".cu({n}): error" in res.stderr for n in mine), \
            f"{name}: compiles alone, not with the others: {res.stderr[-3000:]}"
        cubin = tmp_path / "gemm.cubin"
    assert f"kiln_gemm_{name}_kernel0".encode() in cubin.read_bytes()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_simt_emulation_in_c_matches_numpy(name: str) -> None:
    sch = SCHEDULES[name]()
    n = sch.mod.buffers[0].shape[0].value
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((n, n)).astype("float32") for _ in range(2))
    c = np.full((n, n), np.nan, "float32")
    run_simt(lower(sch), a, b, c, name=f"gemm_{name}")
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_simt_c_keeps_the_barriers_as_comments() -> None:
    body = SimtCBackend().kernel(lower(tiled_gemm()), "net_k0").body
    marks = [n for n, line in enumerate(body) if "__syncthreads()" in line]
    assert len(marks) == 2 and all(body[n].strip().startswith("/*") for n in marks)
    assert any("for (int32_t threadIdx_x = 0; threadIdx_x < 8; ++threadIdx_x)" in line
               for line in body)


def test_simt_backend_refuses_a_barrier_under_divergent_control_flow() -> None:
    A = ir.Buffer("A", (8,), "float32")
    B = ir.Buffer("B", (8,), "float32")
    S = ir.Buffer("S", (8,), "float32", scope="shared")
    t = ir.Var("t")
    body = ir.For(t, 0, 8, "thread_binding", ir.Allocate(S, ir.IfThenElse(t < 4, ir.seq(
        S.store(A[t], [t]), barrier(), B.store(S[3 - t], [t])))), "threadIdx.x")
    with pytest.raises(UnsupportedError, match=r"SIMT emulation: kernel net_k7: a barrier"):
        SimtCBackend().kernel(ir.PrimFunc((A, B), body, "f"), "net_k7")

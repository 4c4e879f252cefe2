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


@needs_nvcc
@pytest.mark.parametrize("name", ["tiled", "tiled_local_accumulator"])
def test_tiled_gemm_compiles_with_nvcc(name: str, tmp_path: Path) -> None:
    src = CUDARenderer().render(lower(SCHEDULES[name]()), name="gemm")
    (tmp_path / "gemm.cu").write_text(src.code)
    # device code only (the source has no host code): -cubin runs nvcc's device side
    # alone (cicc, ptxas), without cudafe++ and the host compiler over the launch stubs
    res = subprocess.run([NVCC, "-arch=sm_80", "-cubin", "-Werror", "all-warnings",
                          str(tmp_path / "gemm.cu"), "-o", str(tmp_path / "gemm.cubin")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "gemm.cubin").stat().st_size > 0


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

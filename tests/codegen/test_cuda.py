"""CUDA dialect: thread-bound kernels rendered from the shared renderer, checked by nvcc."""

from __future__ import annotations

import shutil

import pytest

from tests.tools import needs
from toolchain import te
from toolchain.codegen import get_renderer
from toolchain.codegen.cuda import CUDARenderer, compile_ptx
from toolchain.driver import lower
from toolchain.errors import BuildError, UnsupportedError
from toolchain.tir.schedule import Schedule

NVCC = shutil.which("nvcc")
needs_nvcc = needs("nvcc")


def shared_memory_matmul(n: int = 256, t: int = 16) -> Schedule:
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]), target="cuda-sm80")
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    bi, ti = sch.split(i, [None, t])
    bj, tj = sch.split(j, [None, t])
    ko, ki = sch.split(kk, [None, t])
    sch.reorder(bi, bj, ko, ti, tj, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    for idx in (0, 1):
        s = sch.cache_read(c, idx, "shared")
        sch.compute_at(s, ko)
        a0, a1 = sch.get_loops(s)[-2:]
        sch.bind(a0, "threadIdx.y")
        sch.bind(a1, "threadIdx.x")
    return sch


def test_shared_memory_matmul_renders_kernel_with_barriers():
    src = CUDARenderer().render(lower(shared_memory_matmul()), name="mm")
    code = src.code
    assert 'extern "C" __global__ void __launch_bounds__(256) kiln_mm_kernel0(' in code
    assert "__shared__ float A_shared[256]" in code
    assert "const int32_t i_0 = (int32_t)blockIdx.y;" in code
    # from the shared-memory read/write sets (inject_barriers): the two tile loads write
    # different buffers (no barrier between them), the product reads other threads' loads
    # (one before it), the next k step overwrites what others read (one at the end)
    assert code.count("__syncthreads();") == 2
    first, last = code.index("__syncthreads();"), code.rindex("__syncthreads();")
    assert code.index("A_shared[ax0_1 * 16 + ax1_1] =") < first < code.index("k_1 = 0;") < last
    assert set(code[last + len("__syncthreads();"):].split()) == {"}"}  # end of the k loop
    assert src.kernels == [{"name": "kiln_mm_kernel0", "grid": ["16", "16", "1"],
                            "block": ["16", "16", "1"], "threads": 256, "smem": 0}]
    assert get_renderer("cuda").dialect == "cuda"


@needs_nvcc
def test_shared_memory_matmul_compiles_to_ptx():
    src = CUDARenderer().render(lower(shared_memory_matmul()), name="mm")
    ptx = compile_ptx(src.code, "sm_80")
    assert ".entry kiln_mm_kernel0" in ptx
    assert "bar.sync" in ptx


@needs_nvcc
def test_vector_loop_is_written_lane_by_lane():
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx, v = sch.split(i, [None, 64, 4])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)
    src = CUDARenderer().render(lower(sch), name="axpb")
    assert src.kernels[0]["grid"] == ["4", "1", "1"]
    assert "float32x4" not in src.code and src.code.count("B[") == 4
    assert ".entry kiln_axpb_kernel0" in compile_ptx(src.code)


def test_buffer_shared_between_kernels_is_refused():
    A = te.placeholder((64,), name="A")
    T = te.compute((64,), lambda i: A[i] + 1.0, name="T")
    B = te.compute((64,), lambda i: T[63 - i] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    for name in ("T", "B"):
        (i,) = sch.get_loops(sch.get_block(name))
        sch.bind(i, "threadIdx.x")
    with pytest.raises(UnsupportedError, match="buffer T .* is shared by several kernels"):
        CUDARenderer().render(lower(sch))


@needs_nvcc
def test_nvcc_error_is_a_build_error():
    with pytest.raises(BuildError, match="nvcc failed"):
        compile_ptx("this is not CUDA")


def test_a_guarded_vector_copy_is_written_lane_by_lane_with_scalar_types() -> None:
    """A vectorized copy under one condition for all its lanes (the tensor-core
    convolution's weight tile with its padded channels zero): each lane's ``?:`` has the
    element's type, in float16 and after ``legalize_f16`` (which computes it in float32),
    never a vector cast in scalar code (nvcc compiles the legalized one); the interpreter
    reads only the side taken (the padded row past ``A`` is never read)."""
    import numpy as np

    from toolchain.target import load_target
    from toolchain.tir.interpreter import run
    from toolchain.tir.transform.legalize_f16 import legalize_f16

    A = te.placeholder((3, 8), name="A", dtype="float16")
    B = te.compute((4, 8), lambda j, v: te.if_then_else(j < 3, A[j, v], te.const(0, "float16")),
                   name="B")
    sch = Schedule(te.create_prim_func([A, B]), target="cuda-sm80")
    j, v = sch.get_loops(sch.get_block("B"))
    sch.bind(j, "threadIdx.x")
    sch.vectorize(v)
    f = lower(sch, target=load_target("cuda-sm80"))
    assert "T.Ramp" in str(f)  # one vector store
    for g in (f, legalize_f16(f)):
        code = CUDARenderer().render(g, name="pad").code
        assert code.count("j < 3 ?") == 8 and "x8" not in code
        if NVCC and g is not f:  # (float16 arithmetic goes to nvcc legalized)
            assert ".entry kiln_pad_kernel0" in compile_ptx(code)
    a, b = np.arange(24, dtype=np.float16).reshape(3, 8), np.ones((4, 8), np.float16)
    run(f, a, b)
    assert (b[:3] == a).all() and not b[3].any()

"""CUDA dialect: thread-bound kernels rendered from the shared renderer, checked by nvcc."""

from __future__ import annotations

import re
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


def test_each_launch_declares_const_what_it_only_reads():
    """Two launches share the parameters: ``B`` is the first's output and the second's
    input, so it is plain in the first and ``const T *__restrict__`` in the second (nvcc
    may then read it through the read-only data path there); each launch's own list, as
    ``kernels.cuh`` and ``kernels.cu`` declare it (one list for all before session 26)."""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((64,), lambda i: B[i] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([A, B, C]), target="cuda-sm80")
    for name in ("B", "C"):
        bo, ti = sch.split(sch.get_loops(sch.get_block(name))[0], [None, 32])
        sch.bind(bo, "blockIdx.x")
        sch.bind(ti, "threadIdx.x")
    src = CUDARenderer().render(lower(sch), name="two")
    first, second = (k["params"] for k in src.kernels)
    assert first == ["const float* __restrict__ A", "float* __restrict__ B",
                     "const float* __restrict__ C"]
    assert second == ["const float* __restrict__ A", "const float* __restrict__ B",
                      "float* __restrict__ C"]
    assert f"kiln_two_kernel1({', '.join(second)})" in src.code


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
    assert src.kernels == [{"name": "kiln_mm_kernel0", "params": [
        "const float* __restrict__ A", "const float* __restrict__ B", "float* __restrict__ C"],
                            "grid": ["16", "16", "1"], "block": ["16", "16", "1"],
                            "threads": 256, "smem": 0}]
    assert get_renderer("cuda").dialect == "cuda"


def _vector_loop() -> object:
    """The rendered source of a vectorized loop over 1024 floats (kernel ``kiln_axpb_*``)."""
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx, v = sch.split(i, [None, 64, 4])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)
    return CUDARenderer().render(lower(sch), name="axpb")


def _guarded_copy() -> object:
    """A float16 copy of 3 x 8 into 4 x 8 under ``j < 3``, vectorized, lowered for sm_80."""
    from toolchain.target import load_target

    A = te.placeholder((3, 8), name="A", dtype="float16")
    B = te.compute((4, 8), lambda j, v: te.if_then_else(j < 3, A[j, v], te.const(0, "float16")),
                   name="B")
    sch = Schedule(te.create_prim_func([A, B]), target="cuda-sm80")
    j, v = sch.get_loops(sch.get_block("B"))
    sch.bind(j, "threadIdx.x")
    sch.vectorize(v)
    return lower(sch, target=load_target("cuda-sm80"))


@pytest.fixture(scope="module")
def joined_ptx() -> dict[str, str]:
    """The sources the ``compile_ptx`` checks below compile (by kernel name: ``mm``,
    ``axpb``, ``pad``, the last legalized), and the PTX of all three from one run (under
    ``"all"``; its error where it failed; empty without nvcc): nvcc's fixed cost, about
    0.4 CPU s, is most of each run. Their kernels have names of their own and they define
    no helpers."""
    from toolchain.tir.transform.legalize_f16 import legalize_f16

    got = {"mm": CUDARenderer().render(lower(shared_memory_matmul()), name="mm").code,
           "axpb": _vector_loop().code,
           "pad": CUDARenderer().render(legalize_f16(_guarded_copy()), name="pad").code}
    try:
        got["all"] = compile_ptx("".join(got.values()), "sm_80") if NVCC else ""
    except BuildError as e:  # (each check then compiles its own source alone)
        got["all"] = f"error: {e}"
    return got


def _entry_ptx(joined: dict[str, str], name: str) -> str:
    """The PTX of kernel ``kiln_<name>_kernel0`` (its ``.entry`` to the next one), from the
    joined run; where that failed, from ``name``'s source alone, and then the failed
    run's errors must not fall in its lines (it built alone, not with the others)."""
    ptx = joined["all"]
    if ptx.startswith("error: "):
        errors, ptx = ptx, compile_ptx(joined[name], "sm_80")
        first = 1 + sum(joined[k].count("\n") for k in list(joined)[:list(joined).index(name)])
        mine = set(range(first, first + joined[name].count("\n")))
        lines = {int(n) for n in re.findall(r"kernels\.cu\((\d+)\): error", errors)}
        assert not lines & mine, f"{name}: compiles alone, not with the others: {errors[-3000:]}"
    head = f".entry kiln_{name}_kernel0("
    assert head in ptx, ptx[-3000:]
    return ptx[ptx.index(head):].split(".entry ", 2)[1]


@needs_nvcc
def test_shared_memory_matmul_compiles_to_ptx(joined_ptx: dict[str, str]) -> None:
    assert joined_ptx["mm"] == CUDARenderer().render(lower(shared_memory_matmul()),
                                                     name="mm").code
    assert "bar.sync" in _entry_ptx(joined_ptx, "mm")


@needs_nvcc
def test_vector_loop_is_written_lane_by_lane(joined_ptx: dict[str, str]) -> None:
    src = _vector_loop()
    assert src.kernels[0]["grid"] == ["4", "1", "1"]
    assert "float32x4" not in src.code and src.code.count("B[") == 4
    assert joined_ptx["axpb"] == src.code
    _entry_ptx(joined_ptx, "axpb")


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


def test_a_guarded_vector_copy_is_written_lane_by_lane_with_scalar_types(
        joined_ptx: dict[str, str]) -> None:
    """A vectorized copy under one condition for all its lanes (the tensor-core
    convolution's weight tile with its padded channels zero): each lane's ``?:`` has the
    element's type, in float16 and after ``legalize_f16`` (which computes it in float32),
    never a vector cast in scalar code (nvcc compiles the legalized one); the interpreter
    reads only the side taken (the padded row past ``A`` is never read)."""
    import numpy as np

    from toolchain.tir.interpreter import run
    from toolchain.tir.transform.legalize_f16 import legalize_f16

    f = _guarded_copy()
    assert "T.Ramp" in str(f)  # one vector store
    for g in (f, legalize_f16(f)):
        code = CUDARenderer().render(g, name="pad").code
        assert code.count("j < 3 ?") == 8 and "x8" not in code
        if NVCC and g is not f:  # (float16 arithmetic goes to nvcc legalized)
            assert joined_ptx["pad"] == code
            _entry_ptx(joined_ptx, "pad")
    a, b = np.arange(24, dtype=np.float16).reshape(3, 8), np.ones((4, 8), np.float16)
    run(f, a, b)
    assert (b[:3] == a).all() and not b[3].any()

"""Generated C under AddressSanitizer + UndefinedBehaviorSanitizer (stand-alone program)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

from tests.tir import workloads as W
from tests.tools import needs
from toolchain.codegen.c import render_standalone_main
from toolchain.driver import build
from toolchain.tir.schedule import Schedule

CC = shutil.which("cc")


def _run_sanitized(sch, arrays, tmp_path):
    mod = build(sch, name="san")
    prog = render_standalone_main(mod.func, mod.get_source(), mod.entry)
    src = tmp_path / "main.c"
    src.write_text(prog)
    exe = tmp_path / "main"
    cmd = [CC, "-std=gnu11", "-O1", "-g1", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-fopenmp",
           "-Wall", "-Wextra", "-Werror", str(src), "-o", str(exe), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    paths = []
    for k, a in enumerate(arrays):
        p = tmp_path / f"arg{k}.bin"
        a.tofile(p)
        paths.append(str(p))
    run = subprocess.run([str(exe), *paths], capture_output=True, text=True,
                         env={"ASAN_OPTIONS": "detect_leaks=1", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    assert "runtime error" not in run.stderr, run.stderr
    return [np.fromfile(p, dtype=a.dtype).reshape(a.shape)
            for p, a in zip(paths, arrays, strict=True)]


@needs("gcc")
def test_tiled_vectorized_conv_is_clean_under_asan_ubsan(tmp_path):
    wl = W.conv2d(1, 3, 9, 9, 4, 3)
    sch = Schedule(wl[0])
    n, o, y, x, *_ = sch.get_loops(sch.get_block("Y"))
    xo, xi = sch.split(x, [None, 4])          # 9 is not a multiple of 4: guarded tail
    sch.compute_at(sch.get_block("P"), y)
    sch.vectorize(xi)
    out = sch.cache_write(sch.get_block("Y"), 0, "local")
    sch.reverse_compute_at(out, y)
    sch.parallel(o)
    args = wl[1]()
    got = _run_sanitized(sch, args, tmp_path)
    np.testing.assert_allclose(got[-1], wl[2](*args), rtol=1e-4, atol=1e-4)


@needs("gcc")
def test_register_tiled_matmul_is_clean_under_asan_ubsan(tmp_path):
    from toolchain import te

    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // 16, n, 16), lambda a, b, c: B[b, a * 16 + c], name="packedB")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * packed[j // 16, k, j % 16], axis=k),
                   name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(jo, io, kk, ii, ji)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, io)
    init = sch.decompose_reduction(c, kk)
    for blk in (c, init, out):
        *_, rows, cols = sch.get_loops(blk)
        sch.vectorize(cols)
        sch.unroll(rows)
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    got = _run_sanitized(sch, [a, b, np.zeros((n, n), np.float32)], tmp_path)
    np.testing.assert_allclose(got[-1], a @ b, rtol=1e-4)

"""Multi-threaded bundles: SPMD kernels, the runtime's thread pool, thread counts.

A bundle compiled for a target with ``cores: N > 1`` splits its kernels' parallel loops
across up to N threads (``runtime_c/kiln_threads.c``). The split never changes a reduction
order, so every thread count must give the serial result bit for bit.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.bundle.helpers import STRICT, assert_matches, cores, make, run_main
from tests.tools import require
from toolchain import te
from toolchain.bundle import compile_model, load_bundle
from toolchain.bundle.emit import render_kernel
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform import lower
from toolchain.zoo import ZOO

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"


@pytest.fixture
def split_every_kernel(monkeypatch):
    """Every SPMD kernel on the pool, however small (the zoo's tiny models included)."""
    from toolchain.bundle import render

    monkeypatch.setattr(render, "MIN_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(render, "MIN_PARALLEL_BYTES", 0)


def _two_stage(n: int = 64):
    """B = A + 1 then C = B * 2 over an (n, n) grid, both with a parallel outer loop."""
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, n), lambda i, j: B[n - 1 - i, j] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    for name in ("B", "C"):
        sch.parallel(sch.get_loops(sch.get_block(name))[0])
    return lower(sch.mod)


def test_parallel_loops_render_spmd_with_barriers():
    k = render_kernel(_two_stage(), "k", threads=2)
    assert k.threaded
    assert k.params[-2:] == ["int32_t kiln_thread", "int32_t kiln_nthreads"]
    body = "\n".join(k.body)
    # each parallel loop is shared out in claimed chunks; C reads rows of B another
    # thread wrote, so a barrier separates the two
    assert body.count("kiln_claim(") == 2
    assert body.count("kiln_barrier(kiln_nthreads);") == 1
    # the shared intermediate B lives in the arena (one copy), not on a thread's stack
    assert k.scratch_bytes == 64 * 64 * 4


def test_single_core_target_renders_serial():
    k = render_kernel(_two_stage(), "k", threads=1)
    assert not k.threaded and "kiln_thread" not in "\n".join(k.body)


def test_scratch_inside_a_parallel_loop_gets_a_slice_per_thread():
    n = 32
    A = te.placeholder((n, 512), name="A")
    T = te.compute((n, 512), lambda i, j: A[i, j] * 3.0, name="T")
    C = te.compute((n, 512), lambda i, j: T[i, 511 - j] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.compute_at(sch.get_block("T"), i)
    sch.parallel(i)
    func = lower(sch.mod)
    serial = render_kernel(func, "k", threads=1)
    k3 = render_kernel(func, "k", threads=3)
    assert serial.scratch_bytes == 512 * 4  # one row of T, above the stack limit
    assert k3.scratch_bytes == 3 * 512 * 4
    assert "(size_t)kiln_thread * 2048" in "\n".join(k3.body)


@pytest.mark.parametrize("name", ["resnet8", "mobilenet_v1", "transformer_encoder"])
def test_thread_counts_are_bit_identical(name, zoo_c_bundle):
    """The model for 3 cores, every kernel split (``zoo_c_bundle``'s ``split``, as
    :func:`split_every_kernel`: the bundle the thread-library and sanitizer tests build),
    run with 1, 2, 3, 2 and 1 threads in one process."""
    three = zoo_c_bundle(name, 3, split=True)
    path, inputs = three.path, three.inputs
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["max_threads"] == 3
    assert sum(k["threaded"] for k in meta["kernels"]) >= 3
    b = load_bundle(path, extra_flags=STRICT)
    got = {}
    for n in (1, 2, 3, 2, 1):
        assert b.set_threads(n) == n
        got.setdefault(n, []).append(b(inputs))
    for outs in got.values():
        for o in outs:
            for k, v in got[1][0].items():
                np.testing.assert_array_equal(o[k], v, err_msg=f"{name} output {k}")
    assert_matches(got[3][0], three.ref)
    # the same model for one core: the schedules differ, so only close. It is
    # tests/bundle/test_zoo.py's bundle of the model (the same compile, built with the
    # same strict flags: its library comes from the build cache; resnet8: 4 CPU s of gcc)
    one = zoo_c_bundle(name)
    assert_matches(got[2][0], load_bundle(one.path, extra_flags=STRICT)(inputs), rtol=1e-5)


def test_set_threads_clamps_to_the_targets_cores(zoo_c_bundle):
    """The thread-count test's bundle (ResNet-8 for 3 cores, every kernel split; its strict
    library from the build cache: was a LeNet-5 compile and build for 2 cores of its own)."""
    b = load_bundle(zoo_c_bundle("resnet8", 3, split=True).path, extra_flags=STRICT)
    assert [b.set_threads(n) for n in (0, -5, 1, 2, 3, 4, 64)] == [1, 1, 1, 2, 3, 3, 3]
    b.set_threads(1)


def test_single_core_bundle_has_no_thread_library(zoo_c_bundle):
    path = zoo_c_bundle("lenet5").path  # c-generic: one core (read only)
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["max_threads"] == 1 and not any(k["threaded"] for k in meta["kernels"])
    assert "THREADS ?= none" in (path / "Makefile").read_text()
    assert load_bundle(path).set_threads(4) == 1


def test_small_kernels_stay_on_the_callers_thread(tmp_path):
    """lenet5's kernels are a few kFLOPs: waking the pool would cost more than the split
    saves, so they run whole on the calling thread (``kiln_thread`` 0 of 1)."""
    from toolchain.bundle.render import MIN_PARALLEL_FLOPS

    path = compile_model(ZOO["lenet5"].build(), cores(2), tmp_path / "b")
    meta = json.loads((path / "metadata.json").read_text())
    assert not any(k["threaded"] for k in meta["kernels"])
    assert all(k["flops"] < MIN_PARALLEL_FLOPS for k in meta["kernels"])
    run = (path / "src" / "lenet5.c").read_text()
    assert "kiln_parallel" not in run and ", 0, 1)" in run


@pytest.mark.parametrize("threads", ["pthread", "openmp", "none"])
def test_make_with_each_thread_library(threads, tmp_path, zoo_c_bundle):
    """``make THREADS=...``: the pool, OpenMP, or none (serial) all give the same bytes
    (ResNet-8 for 3 cores, every kernel split: the thread-count test's bundle)."""
    b = zoo_c_bundle("resnet8", 3, split=True).copy(tmp_path / "b")
    path, inputs, ref = b.path, b.inputs, b.ref
    make(path, "main", f"THREADS={threads}", cflags="-O2 -std=c99 " + " ".join(STRICT))
    meta = json.loads((path / "metadata.json").read_text())
    one = _main_threads(path, inputs, meta, "1")
    assert_matches(one, ref)
    many = run_main(path, inputs, meta)  # the default: the target's cores
    for k, v in one.items():
        np.testing.assert_array_equal(many[k], v, err_msg=f"THREADS={threads}")
    nm = subprocess.run(["nm", "-u", str(path / "main")], capture_output=True, text=True,
                        check=False).stdout
    assert ("pthread_create" in nm) == (threads == "pthread")


def _main_threads(path, inputs, meta, n):
    return run_main(path, inputs, meta, options=("--threads", n))


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_threaded_bundle_is_sanitizer_clean(sanitizer, tmp_path, zoo_c_bundle):
    """TSan (the pool's atomics and barriers, the kernels' shared buffers) and ASan/UBSan
    on a threaded bundle (MobileNet v1 for 3 cores, every kernel split) run with 2 and 3
    threads."""
    b = zoo_c_bundle("mobilenet_v1", 3, split=True).copy(tmp_path / "b")
    path, inputs, ref = b.path, b.inputs, b.ref
    # line tables only (-g1): the reports' frames name file and line as with -g, for
    # half the compile (tests/bundle/test_safety.py, SANITIZER_DEBUG)
    make(path, "main", cflags=f"-O1 -g1 -std=c99 -fsanitize={sanitizer} "
                              "-fno-sanitize-recover=all -fno-omit-frame-pointer")
    meta = json.loads((path / "metadata.json").read_text())
    for n in ("2", "3"):
        assert_matches(_main_threads(path, inputs, meta, n), ref)


def test_pool_stress_under_tsan(tmp_path):
    """The pool alone: many tasks with barriers, thread counts changing, stop and
    restart, under ThreadSanitizer."""
    require("cc")
    src = tmp_path / "stress.c"
    src.write_text(r"""
#include <stdio.h>
#include "kiln_runtime.h"
static int data[2][1000];
static long total;
/* as the kernels claim: from the pool on several threads, counted locally on one */
#define CLAIM(g) (n > 1 ? kiln_claim(g) : (local += (g)) - (g))
static void task(void *ctx, int t, int n) {
  int r = *(int *)ctx;
  int64_t i, b, local = 0;
  (void)t;
  while ((b = CLAIM(7)) < 1000)
    for (i = b; i < b + 7 && i < 1000; ++i) data[0][i] = (int)i + r;
  kiln_barrier(n);
  local = 0;
  while ((b = CLAIM(7)) < 1000)
    for (i = b; i < b + 7 && i < 1000; ++i) data[1][i] = data[0][999 - i];
  kiln_barrier(n);
  local = 0;
  if (CLAIM(1) == 0) { long s = 0; for (i = 0; i < 1000; ++i) s += data[1][i]; total = s; }
}
int main(void) {
  int r, bad = 0;
  for (r = 0; r < 400; ++r) {
    if (r == 200) kiln_threads_stop();
    kiln_parallel(task, &r, 1 + r % 4);
    if (total != 499500L + 1000L * r) ++bad;
  }
  kiln_threads_stop();
  printf("bad %d\n", bad);
  return bad != 0;
}
""")
    exe = tmp_path / "stress"
    res = subprocess.run(["cc", "-std=c99", "-O1", "-g1", "-fsanitize=thread", *STRICT,
                          "-DKILN_THREADS_PTHREAD", "-pthread", f"-I{RUNTIME}", str(src),
                          str(RUNTIME / "kiln_threads.c"), "-o", str(exe)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "bad 0" in run.stdout, run.stdout + run.stderr
    assert not re.search(r"ThreadSanitizer", run.stderr), run.stderr


@pytest.mark.usefixtures("split_every_kernel")
def test_a_threaded_bundle_cross_compiles_for_a_board_without_a_thread_library(tmp_path):
    """A Cortex-M descriptor that says ``cores: 2`` gets SPMD kernels; its firmware build
    (no THREADS define) runs them on the caller's thread and needs no pthread or OpenMP."""
    from tests.tools import have

    if not (have("arm-none-eabi-gcc") and have("picolibc")):
        pytest.skip("needs arm-none-eabi-gcc and picolibc (apt-get install gcc-arm-none-eabi "
                    "picolibc-arm-none-eabi)")
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits" / "digits.onnx"
    path = compile_model(digits, cores(2, "cortex-m4"), tmp_path / "m4")
    assert any(k["threaded"] for k in json.loads((path / "metadata.json").read_text())
               ["kernels"])
    make(path, "lib", cflags="-O2 -std=c99 -mcpu=cortex-m4 -mthumb -mfloat-abi=hard "
                             "-mfpu=fpv4-sp-d16 --specs=picolibc.specs " + " ".join(STRICT))
    nm = subprocess.run(["arm-none-eabi-nm", str(path / "libdigits.a")], capture_output=True,
                        text=True, check=True).stdout
    assert re.search(r"\bT kiln_parallel\b", nm)
    assert not re.search(r"\bU (pthread_|omp_|GOMP_)", nm)

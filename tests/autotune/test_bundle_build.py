"""The tuner times the kernel's C as the bundle renders and compiles it.

The host build (``runtime.build``) kept ``#pragma omp simd`` on vectorized loops and took
big temporaries from the heap; a depthwise ``rw=1`` + ReLU6 point timed as fast as the
default there and ran slower in the bundle (docs/tuning.md, "What a task builds")."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from tests.autotune.conv_models import bundle_at_point
from tests.autotune.test_fused_task import TARGET, dw_clip_model
from toolchain.autotune.apply import forcing
from toolchain.autotune.measure import BuildInput, LocalRunner, build_one, scratch_area
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.runtime.build import build
from toolchain.schedules.registry import schedule_for


def _kernel(src: str, name: str) -> str:
    """The function ``name`` of C file ``src``, from its signature's parameters on."""
    head = f"int32_t {name}("
    start = src.index(head) + len(head)
    return src[start:src.index("\n}\n", start)]


def test_a_tuned_points_measured_c_is_the_bundles_kernel(tmp_path):
    model = dw_clip_model()
    task, = extract_tasks(model, TARGET)
    s = task.space
    b = build_one(BuildInput(task.node, task.target, s.workload,
                             s.trace(s.canonical({**s.default(), "rw": 1}))))
    assert b.error is None
    measured = Path(b.lib).with_suffix(".c").read_text()  # kept beside the cached library
    assert "#pragma" not in measured
    bundle_src, err = bundle_at_point(model, TARGET, tmp_path, {"rw": 1}, seed=5)
    assert err < 1e-5
    # one of the bundle's kernels (the others re-lay the input), parameters and body,
    # is the measured one
    names = [part.split("(", 1)[0] for part in bundle_src.split("\nint32_t ")[1:]]
    kernel = _kernel(measured, b.entry)
    assert "6.0f" in kernel
    assert [n for n in names if _kernel(bundle_src, n) == kernel] != []


def test_big_temporaries_come_from_the_harness_scratch():
    """A kernel whose temporaries exceed the stack rule takes them from the 64-byte
    aligned scratch area the timing harness passes (as from a bundle's arena), and computes
    what the host build of the same schedule does."""
    task = conv_task((1, 16, 12, 12), 32, 3, 1, TARGET)
    b = build_one(BuildInput(task.node, task.target, task.space.workload,
                             task.space.trace(task.space.default())))
    assert b.error is None and b.scratch_bytes > 0
    src = Path(b.lib).with_suffix(".c").read_text()
    assert "kiln_scratch_slice(kiln_scratch" in src and "posix_memalign" not in src
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape, dtype in b.args]
    scratch = scratch_area(b.scratch_bytes)
    fn = getattr(ctypes.CDLL(b.lib), b.entry)
    assert fn(*[ctypes.c_void_p(a.ctypes.data) for a in [*arrays, scratch]]) == 0
    # the same schedule through kiln's host build (heap temporaries) computes the same
    with forcing({task.space.workload: b.trace}):
        mod = build(schedule_for(task.node, task.target).schedule, task.target)
    want = [a.copy() for a in arrays]
    want[-1][...] = 0
    mod(*want)
    np.testing.assert_allclose(arrays[-1], want[-1], rtol=1e-5, atol=1e-5)
    assert np.abs(want[-1]).max() > 0.1
    with LocalRunner(repeat=1) as r:
        res, = r.run([b])
    assert res.error is None

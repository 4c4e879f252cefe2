"""The local runner: crashes and time-outs are failed trials, and the runner goes on."""

from __future__ import annotations

import pytest

from toolchain.autotune.measure import BuildResult, LocalRunner
from toolchain.autotune.space import Trace
from toolchain.runtime.build import compile_shared

SRC = """
#include <stdint.h>
int32_t kiln_ok(float *a) { for (int i = 0; i < 1024; ++i) a[i] += 1.0f; return 0; }
int32_t kiln_crash(float *a) { (void)a; *(volatile int *)0 = 1; return 0; }
int32_t kiln_hang(float *a) { volatile int x = 1; while (x) { a[0] += 1.0f; } return 0; }
int32_t kiln_fails(float *a) { (void)a; return 3; }
"""


def _build(entry: str) -> BuildResult:
    lib, _ = compile_shared(SRC, ["-O1", "-fPIC", "-shared"], stem="kiln_runner_test")
    return BuildResult(Trace("t", ()), str(lib), entry, [((1024,), "float32")])


def test_crash_timeout_and_error_are_failed_trials_and_the_runner_recovers():
    with LocalRunner(repeat=2, timeout=2.0, flush_bytes=1 << 16) as r:
        ok, crash, ok2, hang, fails, ok3 = r.run(
            [_build("kiln_ok"), _build("kiln_crash"), _build("kiln_ok"), _build("kiln_hang"),
             _build("kiln_fails"), _build("kiln_ok")])
    for good in (ok, ok2, ok3):
        assert good.error is None and len(good.costs) == 2 and min(good.costs) > 0
    assert crash.costs is None and "crashed the timing process" in crash.error
    assert hang.costs is None and "timed out after 2 s" in hang.error
    assert fails.costs is None and "returned an error" in fails.error


def test_a_build_error_is_passed_through_not_run():
    b = BuildResult(Trace("t", ()), error="build: GeneratedCodeError: boom")
    with LocalRunner() as r:
        res, = r.run([b])
    assert res.costs is None and res.error == "build: GeneratedCodeError: boom"


_HEAP_PROBE = """
import ctypes, sys
from toolchain.autotune.measure import keep_heap
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena ordblks smblks hblks hblkhd usmblks "
                                               "fsmblks uordblks fordblks keepcost").split()]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
kept = keep_heap() if sys.argv[1] == "keep" else None
before = libc.mallinfo2().hblks
p = libc.malloc(4 << 20)  # a Winograd kernel's temporary
print(kept, libc.mallinfo2().hblks - before)  # blocks mapped apart by this malloc
libc.free(ctypes.c_void_p(p))
"""


def test_the_timing_child_serves_a_kernels_temporaries_from_its_heap() -> None:
    """A 4 MiB ``malloc`` is mapped apart (and unmapped at ``free``: page faults on every
    timed call) by default, and comes from the heap after :func:`keep_heap`, as a
    bundle's temporaries come from its arena."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("the C library has no mallinfo2 (glibc 2.33 or later)")
    out = {m: subprocess.run([sys.executable, "-c", _HEAP_PROBE, m], capture_output=True,
                             text=True, check=True).stdout.split() for m in ("plain", "keep")}
    assert out["plain"] == ["None", "1"]
    assert out["keep"] == ["True", "0"]

"""The local runner: crashes and time-outs are failed trials, and the runner goes on."""

from __future__ import annotations

import pytest

from toolchain.autotune.measure import BuildResult, LocalRunner
from toolchain.autotune.space import Trace
from toolchain.runtime.build import compile_shared

# the hanging kernel blocks rather than spins: to the runner it is the same kernel that
# never returns, without 2 s of CPU burnt until the time-out
SRC = """
#include <stdint.h>
#include <unistd.h>
int32_t kiln_ok(float *a) { for (int i = 0; i < 1024; ++i) a[i] += 1.0f; return 0; }
int32_t kiln_crash(float *a) { (void)a; *(volatile int *)0 = 1; return 0; }
int32_t kiln_hang(float *a) { (void)a; for (;;) pause(); return 0; }
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


NOTE_SRC = """
#include <stdint.h>
static const void *seen[512];
static int n;
int32_t kiln_note(float *a) {
  for (int i = 0; i < n; ++i) if (seen[i] == a) return 0;
  if (n < 512) seen[n++] = a;
  return 0;
}
int32_t kiln_distinct(void) { int k = n; n = 0; return k; }
"""


@pytest.mark.parametrize("rotate_bytes,copies", [(0, 1), (10 * 4096, 10), (1, 2)])
def test_cold_timing_cycles_through_copies_of_the_arguments(rotate_bytes: int, copies: int):
    """``rotate_bytes``: the timed calls cycle through enough copies of the arguments
    (4 KiB here) to span that many bytes, at least two: every one is used, so no call
    finds the previous call's data in the caches; 0 keeps one warm set."""
    import ctypes

    from toolchain.autotune.measure import rotation, time_kernel

    lib, _ = compile_shared(NOTE_SRC, ["-O1", "-fPIC", "-shared"], stem="kiln_rotate_test")
    assert rotation(4096, rotate_bytes) == copies
    req = {"lib": str(lib), "entry": "kiln_note", "args": [((1024,), "float32")],
           "repeat": 3, "min_repeat_s": 1.0, "max_number": 40, "rotate_bytes": rotate_bytes}
    costs = time_kernel(req, None)
    assert len(costs) == 3 and min(costs) > 0
    assert ctypes.CDLL(str(lib)).kiln_distinct() == copies


def test_a_ctrl_c_reaching_the_timing_child_leaves_it_to_the_tuner() -> None:
    """A terminal's Ctrl-C goes to the whole process group: the timing child died with a
    ``KeyboardInterrupt`` traceback (and the next trial found it crashed). It ignores it:
    the tuner, interrupted, stops it."""
    import os
    import signal
    import time
    from pathlib import Path

    def timing_children() -> list[int]:
        out = []
        for d in Path("/proc").iterdir():
            try:
                stat = (d / "stat").read_text()
                cmd = (d / "cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and \
                    b"toolchain.autotune.measure" in cmd:
                out.append(int(d.name))
        return out

    missing = BuildResult(Trace("t", ()), "/nonexistent/kernel.so", "kiln_ok",
                          [((4,), "float32")])
    with LocalRunner(repeat=1) as r:
        first = r.run_one(missing)  # the child is up and serving
        assert first.costs is None and "crashed" not in first.error
        (child,) = timing_children()
        os.kill(child, signal.SIGINT)
        time.sleep(0.3)
        again = r.run_one(missing)
        assert again.error == first.error, again.error  # not 'crashed the timing process'
        assert timing_children() == [child]

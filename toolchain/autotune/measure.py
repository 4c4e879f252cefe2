"""Measurement: builders turn a trace into a kernel, runners time it.

* :func:`build_one` — schedule the task's node at the trace's point (an invalid point is
  refused before anything is built), lower it, read its :mod:`features
  <toolchain.autotune.features>` and compile it as the bundle does
  (:mod:`toolchain.autotune.bundle_build`: the bundle's C and flags; temporaries in a
  ``kiln_scratch`` area the timing child passes). :class:`LocalBuilder` runs it in a
  process pool (``jobs`` workers; one job: in this process).
* :class:`LocalRunner` — times kernels on this CPU in a child process pinned to one core
  (which busy-works 50 ms before each trial: a core that idled while the batch was built
  runs its first milliseconds at a lower clock). Each repeat is the mean thread CPU time
  of ``number`` calls, after one untimed repeat (the child keeps freed blocks in its
  heap, :func:`keep_heap`, so a kernel's temporaries cost what a bundle's arena does:
  no page faults per call); the data caches are flushed (a buffer
  larger than the L2 rewritten) between repeats, and the trial's cost is the least repeat
  (``Record.cost``). ``rotate_bytes``: the calls cycle through copies of the kernel's
  arguments spanning that many bytes (:func:`rotation`), so each call finds its weights
  out of the caches, as in a model whose weights exceed the last-level cache (ResNet-18:
  a point fastest with warm weights ran 35 % slower in the bundle than another; docs/
  tuning.md, session 15). A kernel that crashes the child or runs past ``timeout`` is a failed
  trial (its error recorded); the child is restarted.
* Other devices plug in as :class:`Runner`\\ s, one table :data:`RUNNERS`: boards under QEMU
  count instructions (:mod:`toolchain.autotune.qemu`); CUDA targets have their own builder
  and runners (:mod:`toolchain.autotune.cuda`: nvcc, CUDA events on the GPU, or the SIMT
  emulation's check), which ``kiln tune`` picks by the target's kind.

Example::

    >>> from toolchain.autotune.tasks import conv_task
    >>> task = conv_task((1, 8, 10, 10), 16, 3, 1, "c-generic")
    >>> b = build_one(BuildInput(task.node, task.target, task.space.workload,
    ...                          task.space.trace(task.space.default())))
    >>> b.error is None, len(b.features) > 0
    (True, True)
    >>> with LocalRunner(repeat=2) as r:
    ...     res, = r.run([b])
    >>> res.error is None and len(res.costs) == 2
    True
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from toolchain.autotune.space import Trace
from toolchain.gcpause import paused_gc


@dataclass(frozen=True)
class BuildInput:
    """What a builder needs: the node to schedule, the target, the workload and trace."""

    node: Any
    target: Any
    workload: str
    trace: Trace


@dataclass
class BuildResult:
    """A built kernel (``lib`` path, ``entry``, argument shapes and dtypes) and its
    features, or the ``error`` that stopped the build."""

    trace: Trace
    lib: str | None = None
    entry: str | None = None
    args: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    features: list[float] | None = None
    error: str | None = None
    seconds: float = 0.0
    #: bytes of the ``kiln_scratch`` area the kernel takes after its arguments (0: none;
    #: :mod:`toolchain.autotune.bundle_build`)
    scratch_bytes: int = 0
    #: what the runner needs beyond the library (the QEMU runner: the C source)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MeasureResult:
    """The repeats of one trial (``costs``) or why there are none (``error``)."""

    costs: list[float] | None
    error: str | None = None


def _scheduled(inp: BuildInput) -> Any:
    from toolchain.autotune.apply import forcing
    from toolchain.schedules.registry import schedule_for

    with forcing({inp.workload: inp.trace}):
        return schedule_for(inp.node, inp.target)


def featurize(inp: BuildInput) -> list[float]:
    """The features of the trace's kernel without compiling it (for the cost model)."""
    from toolchain.autotune.features import extract
    from toolchain.tir.transform.pipeline import lower

    s = _scheduled(inp)
    return extract(lower(s.schedule.mod, target=inp.target)).tolist()


def build_one(inp: BuildInput) -> BuildResult:
    """Schedule, lower, featurize and compile one trial (errors are returned, not raised)."""
    from toolchain.autotune.bundle_build import build_as_bundle
    from toolchain.autotune.features import extract
    from toolchain.errors import KilnError
    from toolchain.tir import ir
    from toolchain.tir.transform.pipeline import lower

    t0 = time.perf_counter()
    res = BuildResult(inp.trace)
    try:
        with paused_gc():  # scheduling and lowering build large IR (toolchain.gcpause)
            s = _scheduled(inp)
            lowered = lower(s.schedule.mod, target=inp.target)
            feats = extract(lowered)
            built = build_as_bundle(lowered, inp.target)  # the bundle's C and flags
        func = s.schedule.mod  # its parameters' shapes (the lowered ones are flat)
        params = [p for p in func.params if isinstance(p, ir.Buffer)]
        if len(params) != len(func.params):
            raise KilnError("kernels with scalar parameters cannot be measured")
        res.lib, res.entry = str(built.lib), built.entry
        res.args = [(tuple(int(d.value) for d in p.shape), p.dtype) for p in params]
        res.scratch_bytes = built.scratch_bytes
        res.features = feats.tolist()
    except KilnError as exc:
        res.error = build_error(exc)
    res.seconds = time.perf_counter() - t0
    return res


def build_error(exc: Exception) -> str:
    """The ``error`` of a trial whose schedule or build raised ``exc`` (a Kiln error).

    >>> from toolchain.errors import BuildError
    >>> build_error(BuildError("cc failed\\nmore"))
    'build: BuildError: cc failed'
    """
    from toolchain.autotune.space import InvalidPoint

    if isinstance(exc, InvalidPoint):
        return f"invalid point: {exc}"
    return f"build: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"


def build_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` spawned worker processes that leave Ctrl-C to the tuner: a
    terminal's SIGINT goes to the whole process group, and each worker printed a
    ``KeyboardInterrupt`` traceback while ``kiln tune`` shut the pool down itself.

    >>> pool = build_pool(1)
    >>> pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
    True
    >>> pool.shutdown()
    """
    return ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"),
                               initializer=ignore_interrupts)


def ignore_interrupts() -> None:
    """Ignore SIGINT in this process (a build worker's or the timing child's: the tuner
    stops them when it is interrupted)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalBuilder:
    """Builds trials in a pool of ``jobs`` worker processes (``jobs=1``: in this one)."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = max(1, jobs)
        self._pool: ProcessPoolExecutor | None = None

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        if self.jobs == 1 or len(inputs) <= 1:
            return [build_one(i) for i in inputs]
        if self._pool is None:
            self._pool = build_pool(self.jobs)
        return list(self._pool.map(build_one, inputs))

    def featurize(self, inputs: Sequence[BuildInput]) -> list[list[float]]:
        """The features of the inputs' kernels (no compiling), spread over the pool."""
        if self.jobs == 1 or len(inputs) <= 1:
            return [featurize(i) for i in inputs]
        if self._pool is None:
            self._pool = build_pool(self.jobs)
        return list(self._pool.map(featurize, inputs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class Runner(Protocol):
    """A measurement device: ``run`` gives one :class:`MeasureResult` per build, in order.
    ``name`` goes into the records; ``unit`` is what the costs count (``s``,
    ``instructions``). A runner may also say how it measures, ``conditions()`` (a dict:
    :mod:`toolchain.autotune.conditions`), written into each record; without it the
    records' conditions are unknown."""

    name: str
    unit: str

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------- local CPU

def _spin(seconds: float) -> None:
    """Busy work: a core that idled (while the parent built the batch) runs its first
    milliseconds at a lower clock; this brings it up before anything is timed."""
    x = np.ones(1 << 12, np.float32)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x *= 1.0000001


def time_kernel(req: dict[str, Any], flush: np.ndarray | None) -> list[float]:
    """The repeats of one trial in this process (the timing child's work): ``req`` names
    the library, entry, argument shapes and the runner's settings (module docstring);
    ``flush``: the buffer rewritten between repeats (None: none)."""
    _spin(req.get("spin_s", 0.05))
    lib = ctypes.CDLL(req["lib"])
    fn = getattr(lib, req["entry"])
    fn.restype = ctypes.c_int32
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(dtype) if dtype.startswith("float")
              else np.zeros(shape, dtype) for shape, dtype in req["args"]]
    scratch = scratch_area(req.get("scratch_bytes", 0))
    tail = [] if scratch is None else [ctypes.c_void_p(scratch.ctypes.data)]
    sets = [[ctypes.c_void_p(a.ctypes.data) for a in arrays] + tail]
    copies = rotation(sum(a.nbytes for a in arrays), req.get("rotate_bytes", 0))
    keep = [[a.copy() for a in arrays] for _ in range(copies - 1)]
    sets += [[ctypes.c_void_p(a.ctypes.data) for a in c] + tail for c in keep]
    t = time.thread_time()
    if fn(*sets[0]) != 0:
        raise RuntimeError("the kernel returned an error (out of memory for scratch)")
    first = max(time.thread_time() - t, 1e-7)
    number = int(min(req["max_number"], max(1, req["min_repeat_s"] / first)))
    calls = 0
    for _ in range(number):  # one untimed repeat: the core's clock and caches settle
        fn(*sets[calls % copies])
        calls += 1
    costs = []
    for _ in range(req["repeat"]):
        if flush is not None:
            flush += 1.0  # rewrite a buffer larger than the caches: evict the kernel's data
        t = time.thread_time()
        for _ in range(number):
            fn(*sets[calls % copies])
            calls += 1
        costs.append((time.thread_time() - t) / number)
    return costs


def scratch_area(nbytes: int, align: int = 64) -> np.ndarray | None:
    """A kernel's ``kiln_scratch`` area of ``nbytes`` (None for 0), its start ``align``-byte
    aligned as a bundle's arena slices are (``bundle.emit.SCRATCH_ALIGN``), its pages
    touched (a bundle's arena is mapped before the kernels run).

    >>> a = scratch_area(100); a.nbytes, a.ctypes.data % 64, scratch_area(0)
    (100, 0, None)
    """
    if nbytes <= 0:
        return None
    raw = np.zeros(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes]


def rotation(set_bytes: int, rotate_bytes: int) -> int:
    """How many copies of a kernel's arguments (``set_bytes`` each) the timed calls cycle
    through so that they span ``rotate_bytes`` (at least two, at most 256; one when
    ``rotate_bytes`` is 0): each call then finds its weights and inputs out of the caches,
    as a kernel deep in a model whose weights exceed the last-level cache does.

    >>> rotation(17 << 20, 64 << 20), rotation(2 << 20, 64 << 20), rotation(1, 0)
    (4, 32, 1)
    """
    if rotate_bytes <= 0:
        return 1
    return min(256, max(2, -(-rotate_bytes // max(set_bytes, 1))))


def _send(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


#: glibc's ``mallopt`` parameters (malloc.h) and the largest mmap threshold it accepts
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX = -1, -3, 32 << 20


def keep_heap() -> bool:
    """Keep freed blocks of up to 32 MiB in this process's heap (glibc): a host-built
    kernel allocates its temporaries with ``malloc`` on every call (a bundle takes them
    from its arena), and glibc serves a block over 128 KiB by ``mmap`` and unmaps it on
    ``free``, so every timed call would pay the page faults of its temporaries (a
    Winograd kernel's 0.5–2 MB most). Called by the timing child; False where the C library has no
    ``mallopt`` (not glibc) or refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
                and mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD_MAX))


def child_main(argv: Sequence[str]) -> int:
    """The timing child (``python -m toolchain.autotune.measure CPU FLUSH_BYTES``): pinned
    to ``CPU`` (-1: not pinned), answers requests on stdin until told to stop."""
    ignore_interrupts()  # a terminal's Ctrl-C reaches it too; the tuner stops it
    cpu, flush_bytes = int(argv[0]), int(argv[1])
    if cpu >= 0 and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            pass
    keep_heap()  # time what a bundle runs: temporaries without page faults per call
    flush = np.zeros(flush_bytes // 4, np.float32) if flush_bytes else None
    if flush is not None:
        flush += 1.0  # map its pages now, not inside the first trial
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            req = _recv(inp)
        except EOFError:
            return 0
        if req is None:
            return 0
        try:
            _send(out, ("ok", time_kernel(req, flush)))
        except Exception as exc:  # noqa: BLE001 - reported as a failed trial
            _send(out, ("error", f"{type(exc).__name__}: {exc}"))


class LocalRunner:
    """Times kernels on this CPU (see the module docstring). ``cpu``: the core to pin
    the timing process to (default: the last one this process may use)."""

    name = "local-cpu"
    unit = "s"

    def __init__(self, repeat: int = 3, timeout: float = 10.0, min_repeat_s: float = 0.002,
                 max_number: int = 100, flush_bytes: int = 8 << 20,
                 cpu: int | None = None, rotate_bytes: int = 0) -> None:
        self.repeat, self.timeout = repeat, timeout
        self.min_repeat_s, self.max_number = min_repeat_s, max_number
        self.flush_bytes = flush_bytes
        #: cold timings: the calls cycle through copies of the arguments spanning this
        #: many bytes (:func:`rotation`; 0: every call on the same, warm, arguments)
        self.rotate_bytes = rotate_bytes
        if cpu is None and hasattr(os, "sched_getaffinity"):
            cpu = max(os.sched_getaffinity(0))
        self.cpu = cpu
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")  # single-threaded, on the pinned core
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "toolchain.autotune.measure",
             str(-1 if self.cpu is None else self.cpu), str(self.flush_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait(5)
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    f.close()
        self._proc = None

    def run_one(self, b: BuildResult) -> MeasureResult:
        if b.error is not None or b.lib is None:
            return MeasureResult(None, b.error or "not built")
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdout is not None
        req = {"lib": b.lib, "entry": b.entry, "args": b.args, "repeat": self.repeat,
               "min_repeat_s": self.min_repeat_s, "max_number": self.max_number,
               "rotate_bytes": self.rotate_bytes, "scratch_bytes": b.scratch_bytes}
        try:
            _send(self._proc.stdin, req)
            ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout)
            if not ready:
                self._stop()
                return MeasureResult(None, f"run: timed out after {self.timeout:g} s")
            status, value = _recv(self._proc.stdout)
        except (EOFError, OSError):
            code = self._proc.wait(5) if self._proc is not None else None
            self._stop()
            return MeasureResult(None, f"run: the kernel crashed the timing process "
                                       f"(exit status {code})")
        if status != "ok":
            return MeasureResult(None, f"run: {value}")
        return MeasureResult(list(value))

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self.run_one(b) for b in builds]

    def conditions(self) -> dict[str, Any]:
        """How it times (:func:`toolchain.autotune.conditions.cpu_conditions`)."""
        from toolchain.autotune.conditions import cpu_conditions

        return cpu_conditions(self.repeat, self.flush_bytes, self.rotate_bytes)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                _send(self._proc.stdin, None)
                self._proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_runner(kind: str, **options: Any) -> Runner:
    """A runner by kind (:data:`RUNNERS`)."""
    from toolchain.errors import OptionError

    if kind not in RUNNERS:
        raise OptionError(f"runner {kind!r}: choose one of {', '.join(RUNNERS)}")
    return RUNNERS[kind](**options)


def _qemu_runner(**options: Any) -> Runner:
    from toolchain.autotune.qemu import QemuRunner

    return QemuRunner(**options)


#: runner kind -> factory (``kiln tune --runner``, CPU targets; a CUDA target's builder and
#: runner: :func:`toolchain.autotune.cuda.cuda_measurement`)
RUNNERS: dict[str, Any] = {"local": LocalRunner, "qemu": _qemu_runner}


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))

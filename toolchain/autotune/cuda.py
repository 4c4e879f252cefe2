"""Tuning CUDA kernels: an nvcc builder, a GPU runner (CUDA events) and a CPU dry run.

:class:`CudaBuilder` schedules the trial's point for a CUDA target (an invalid point is
refused before anything is built), lowers it, reads its features and renders the kernel
as the bundle does (:class:`~toolchain.codegen.backend.CUDABackend` into the bundle's own
``kernels.cu.j2`` / ``kernels.cuh.j2``). Then, by ``mode``:

* ``"gpu"`` — a timing harness (``templates/autotune/cuda_trial.cu.j2``: the kernel's
  arguments on the device with seeded data, its scratch, its launches with the bundle's
  grid, block and dynamic shared memory) is compiled with the bundle Makefile's
  ``nvcc -O3 -arch=sm_XX`` into an executable, cached by content;
  :class:`GpuRunner` runs it: per repeat the L2 is flushed (a buffer of twice the
  descriptor's ``caches.l2`` rewritten), then enough calls to last ``min_repeat_ms`` are
  timed with CUDA events; the trial's cost is the least repeat's mean (seconds);
* ``"emulate"`` — no GPU: the kernel is compiled by nvcc for the target's
  architecture (``-fatbin``: device code only, what the tests check) and its SIMT
  emulation (:class:`~toolchain.codegen.backend.SimtCBackend`, the C an ``--emulate``
  bundle runs) into a shared library, with the default point's emulation beside it;
  :class:`EmulateRunner` runs both on the same seeded data and compares: the cost is one
  plus the largest difference relative to the default's largest output (unit ``check``:
  1.0 where the outputs agree exactly), a difference over the tolerance is a failed
  trial. Nothing is timed, and records of such a run are never applied
  (:data:`~toolchain.autotune.records.UNTIMED_UNITS`): it validates a space.

:func:`gpu_missing` says why no GPU runner can start here (None where one can).

Example (needs nvcc; ``emulate`` needs no GPU)::

    >>> from toolchain.autotune.tasks import dense_task               # doctest: +SKIP
    >>> task = dense_task(32, 64, 48, "cuda-sm80")                    # doctest: +SKIP
    >>> point = task.space.trace(task.space.default())                # doctest: +SKIP
    >>> b = CudaBuilder("cuda-sm80", mode="emulate").build([BuildInput(
    ...     task.node, task.target, task.space.workload, point)])        # doctest: +SKIP
    >>> EmulateRunner().run(b)[0].costs                               # doctest: +SKIP
    [1.0]
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.autotune.measure import (
    BuildInput,
    BuildResult,
    MeasureResult,
    build_error,
    build_pool,
    featurize,
    scratch_area,
)
from toolchain.errors import BuildError, KilnError, OptionError

#: largest difference from the default point's output (relative to its largest
#: magnitude) an emulated point may show: float32 sums in another order, and for float16
#: outputs one rounding of the result (tests/bundle/test_cuda_fp16.py's FP16_TOL)
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}

#: the flush buffer when the descriptor gives no L2 size
DEFAULT_FLUSH = 64 << 20


def gpu_missing() -> str | None:
    """Why CUDA kernels cannot be timed here (None: an NVIDIA GPU and its driver answer
    ``nvidia-smi -L``, and nvcc is on PATH)."""
    from toolchain.bundle.host import gpu_available

    if shutil.which("nvcc") is None:
        return "nvcc (the CUDA toolkit) is not on PATH"
    if not gpu_available():
        return ("no CUDA device or driver found (nvidia-smi -L lists no GPU); validate the "
                "spaces without one with --runner emulate")
    return None


def _scheduled(inp: BuildInput) -> Any:
    from toolchain.autotune.apply import forcing
    from toolchain.schedules.registry import schedule_for

    with forcing({inp.workload: inp.trace}):
        return schedule_for(inp.node, inp.target)


def trial_arch(arts: Sequence[Any], target: Any) -> str:
    """The architecture kernels ``arts`` are built for, as a bundle of them would be
    (``sm_90a`` where one calls ``wgmma``: built for plain ``sm_90``, that code is a trap;
    :func:`~toolchain.bundle.render_cuda.needs_arch_features`)."""
    from toolchain.bundle.render_cuda import calls_arch_features

    arch = target.arch or "sm_80"
    return arch + "a" if calls_arch_features((a.support for a in arts), target) else arch


def kernel_sources(art: Any, target: Any, workload: str, more: Sequence[Any] = ()
                   ) -> dict[str, str]:
    """``kernels.cu`` and ``kernels.cuh`` of the CUDA kernel artifact ``art`` (and ``more``,
    after it), rendered by the bundle's templates: the tuner's trial is the bundle's code."""
    from toolchain import __version__
    from toolchain.codegen.artifact import merge_support
    from toolchain.codegen.cstyle import render_helpers
    from toolchain.codegen.cuda import CUDARenderer

    arts = [art, *more]
    support = merge_support(a.support for a in arts)
    ctx = {"version": __version__, "model": "tuned", "MODEL": "TUNED", "target": target.name,
           "arch": trial_arch(arts, target),
           "prelude_includes": [f"#include <{h}>" for h in support.headers],
           "preludes": [d.text for d in support.definitions],
           "helpers": render_helpers((h for a in arts for h in a.helpers),
                                     CUDARenderer.helper_qualifier),
           "kernels": [{"index": i, "name": a.name, "params": a.params,
                        "launches": a.launches, "comment": workload}
                       for i, a in enumerate(arts)]}
    env = _env()
    return {"kernels.cu": env.get_template("kernels.cu.j2").render(ctx),
            "kernels.cuh": env.get_template("kernels.cuh.j2").render(ctx)}


def _env() -> Any:
    import jinja2

    from toolchain.bundle.render import TEMPLATES, template_env

    return template_env().overlay(loader=jinja2.ChoiceLoader([
        jinja2.FileSystemLoader(str(TEMPLATES.parent / "bundle_cuda")),
        jinja2.FileSystemLoader(str(TEMPLATES.parent / "autotune"))]))


def harness_source(art: Any, args: list[tuple[tuple[int, ...], str]], flush_bytes: int,
                   workload: str) -> str:
    """The timing harness of ``art`` (``templates/autotune/cuda_trial.cu.j2``) for buffer
    arguments of ``args`` (shape, dtype)."""
    from toolchain import __version__

    rows, call = [], []
    for i, (shape, dtype) in enumerate(args):
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        kind = 1 if dtype == "float32" else 2 if dtype == "float16" else 0
        rows.append({"bytes": nbytes, "kind": kind, "what": f"{dtype}{list(shape)}"})
        call.append(f"({art.param_types[i]} *)d{i}")
    for j, off in enumerate(art.scratch_offsets):
        call.append(f"({art.param_types[len(args) + j]} *)(scratch + {off})")
    launches = [{"name": ln["name"], "grid": ln["grid"], "block": ln["block"],
                 "smem": ln.get("smem", 0)} for ln in art.launches]
    return _env().get_template("cuda_trial.cu.j2").render(
        version=__version__, workload=workload, args=rows, call_args=call, launches=launches,
        scratch_bytes=art.scratch_bytes, flush_bytes=flush_bytes)


def _nvcc(cmd: list[str], cwd: Path) -> None:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BuildError(f"nvcc failed (exit {res.returncode}) in {cwd}: "
                         f"{(res.stderr or res.stdout).strip()[:1500]}")


def _cached(files: dict[str, str], flags: Sequence[str], stem: str) -> tuple[Path, bool]:
    """A folder of the trial cache (``$KILN_CACHE_DIR/cuda-trials``) holding ``files``,
    named by their content and ``flags``; True when it was built before (``stem`` exists)."""
    from toolchain.runtime.cache import cache_dir

    key = hashlib.sha256("\0".join([*flags, *(f"{k}\0{v}" for k, v in
                                               sorted(files.items()))]).encode()).hexdigest()
    d = cache_dir() / "cuda-trials" / key[:24]
    if (d / stem).exists():
        return d, True
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d, False


def build_cuda_one(inp: BuildInput, mode: str, flush_bytes: int = DEFAULT_FLUSH
                   ) -> BuildResult:
    """Schedule, lower, featurize and build one CUDA trial (module docstring); errors are
    returned in the result, not raised."""
    from toolchain.autotune.features import extract
    from toolchain.bundle.render import RUNTIME
    from toolchain.codegen.backend import CUDABackend
    from toolchain.target import resolve_target
    from toolchain.tir import ir
    from toolchain.tir.transform.pipeline import lower

    t0 = time.perf_counter()
    res = BuildResult(inp.trace)
    try:
        target = resolve_target(inp.target)
        s = _scheduled(inp)
        lowered = lower(s.schedule.mod, target=target)
        res.features = extract(lowered).tolist()
        params = [p for p in s.schedule.mod.params if isinstance(p, ir.Buffer)]
        if len(params) != len(s.schedule.mod.params):
            raise KilnError("kernels with scalar parameters cannot be measured")
        res.args = [(tuple(int(d.value) for d in p.shape), p.dtype) for p in params]
        art = CUDABackend().kernel(lowered, "tuned_kernel")
        arch = trial_arch([art], target)
        files = kernel_sources(art, target, inp.workload)
        inc = [f"-I{RUNTIME}", "-I."]
        if mode == "gpu":
            files["trial.cu"] = harness_source(art, res.args, flush_bytes, inp.workload)
            flags = ["-O3", f"-arch={arch}", *inc]
            d, done = _cached(files, flags, "trial")
            if not done:
                _nvcc(["nvcc", *flags, "trial.cu", "kernels.cu", "-o", "trial.tmp"], d)
                os.replace(d / "trial.tmp", d / "trial")
            res.lib, res.entry = str(d / "trial"), "main"
        else:
            flags = ["-O3", f"-arch={arch}", "-Werror", "all-warnings", *inc]
            d, done = _cached(files, flags, "kernels.fatbin")
            if not done:
                _nvcc(["nvcc", *flags, "-fatbin", "kernels.cu", "-o", "kernels.tmp"], d)
                os.replace(d / "kernels.tmp", d / "kernels.fatbin")
            res.lib, res.entry, res.scratch_bytes = emulation(lowered)
            res.extra["dtype"] = res.args[-1][1]
    except KilnError as exc:
        res.error = build_error(exc)
    res.seconds = time.perf_counter() - t0
    return res


def emulation(lowered: Any) -> tuple[str, str, int]:
    """The SIMT emulation of a lowered CUDA kernel as a shared library (the C of an
    ``--emulate`` bundle, the bundle's C flags): ``(library, entry, scratch bytes)``."""
    from toolchain.autotune.bundle_build import BUNDLE_CFLAGS, SHARED_FLAGS
    from toolchain.bundle.render import RUNTIME, kernel_file
    from toolchain.codegen.backend import SimtCBackend
    from toolchain.runtime.build import compile_shared

    art = SimtCBackend().kernel(lowered, "tuned_kernel")
    code = kernel_file(art, "the tuner's emulated trial")
    lib, _ = compile_shared(code, [*BUNDLE_CFLAGS, f"-I{RUNTIME}", *SHARED_FLAGS],
                            stem="tuned_emu")
    return str(lib), art.name, art.scratch_bytes


class CudaBuilder:
    """Builds CUDA trials (module docstring) in a pool of ``jobs`` processes (1: here).
    ``mode``: ``gpu`` (a timing executable) or ``emulate`` (nvcc's check and the SIMT
    emulation, with the default point's emulation as the reference)."""

    def __init__(self, target: Any, mode: str = "gpu", jobs: int = 1) -> None:
        from toolchain.target import resolve_target

        if mode not in ("gpu", "emulate"):
            raise OptionError(f"CudaBuilder mode {mode!r}: gpu or emulate")
        if shutil.which("nvcc") is None:
            raise OptionError("tuning a CUDA target needs nvcc (the CUDA toolkit) on PATH")
        self.target = resolve_target(target)
        if self.target.kind != "cuda":
            raise OptionError(f"CudaBuilder: target {self.target.name!r} has kind "
                              f"{self.target.kind!r}, not cuda")
        self.mode, self.jobs = mode, max(1, jobs)
        l2 = (self.target.caches or {}).get("l2") or DEFAULT_FLUSH // 2
        self.flush_bytes = 2 * int(l2)
        self._pool: ProcessPoolExecutor | None = None
        #: workload -> the default point's emulation (the reference of ``emulate``)
        self._reference: dict[str, BuildResult] = {}

    def _map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        if self.jobs == 1 or len(items) <= 1:
            return [fn(i) for i in items]
        if self._pool is None:
            self._pool = build_pool(self.jobs)
        return list(self._pool.map(fn, items))

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        import functools

        out = self._map(functools.partial(build_cuda_one, mode=self.mode,
                                          flush_bytes=self.flush_bytes), inputs)
        if self.mode == "emulate":
            for inp, res in zip(inputs, out, strict=True):
                ref = self.reference(inp)
                res.extra["reference"] = None if ref.error else (ref.lib, ref.entry,
                                                                  ref.scratch_bytes)
        return out

    def reference(self, inp: BuildInput) -> BuildResult:
        """The emulated default point of ``inp``'s workload (built once)."""
        from toolchain.autotune.space import Trace

        if inp.workload not in self._reference:
            default = BuildInput(inp.node, inp.target, inp.workload,
                                 Trace(inp.trace.space, ()))
            self._reference[inp.workload] = build_cuda_one(default, "emulate")
        return self._reference[inp.workload]

    def featurize(self, inputs: Sequence[BuildInput]) -> list[list[float]]:
        return self._map(featurize, inputs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class GpuRunner:
    """Times :class:`CudaBuilder` (``gpu``) trials on this machine's GPU: runs each
    trial's harness with ``repeat`` repeats of calls lasting ``min_repeat_ms``; a harness
    that fails or runs past ``timeout`` seconds is a failed trial. Refused where
    :func:`gpu_missing` finds no GPU."""

    name = "cuda-gpu"
    unit = "s"

    def __init__(self, repeat: int = 3, timeout: float = 10.0, min_repeat_ms: float = 1.0,
                 check: bool = True) -> None:
        if check:
            refuse_without_gpu("gpu")
        self.repeat, self.timeout, self.min_repeat_ms = repeat, timeout, min_repeat_ms

    def run_one(self, b: BuildResult) -> MeasureResult:
        if b.error is not None or b.lib is None:
            return MeasureResult(None, b.error or "not built")
        try:
            res = subprocess.run([b.lib, str(self.repeat), str(self.min_repeat_ms)],
                                 capture_output=True, text=True, timeout=self.timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            return MeasureResult(None, f"run: timed out after {self.timeout:g} s")
        ms = [float(v) for v in re.findall(r"^kiln-trial-ms: ([0-9.eE+-]+)$", res.stdout,
                                           re.MULTILINE)]
        if res.returncode != 0 or len(ms) != self.repeat:
            why = (res.stderr or res.stdout).strip().splitlines()
            return MeasureResult(None, f"run: exit {res.returncode}: "
                                       f"{why[-1] if why else 'no output'}"[:300])
        return MeasureResult([m / 1e3 for m in ms])

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self.run_one(b) for b in builds]

    def conditions(self) -> dict[str, Any]:
        """How it times (:func:`toolchain.autotune.conditions.gpu_conditions`)."""
        from toolchain.autotune.conditions import gpu_conditions

        return gpu_conditions(self.repeat)

    def close(self) -> None:
        pass


class EmulateRunner:
    """Checks :class:`CudaBuilder` (``emulate``) trials on the CPU against the default
    point's emulation (module docstring): no timing."""

    name = "cuda-emulate"
    unit = "check"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def run_one(self, b: BuildResult) -> MeasureResult:
        if b.error is not None or b.lib is None:
            return MeasureResult(None, b.error or "not built")
        ref = b.extra.get("reference")
        if ref is None:
            return MeasureResult(None, "check: the default point's emulation did not build")
        got = run_emulated(b.lib, b.entry, b.args, b.scratch_bytes, self.seed)
        want = run_emulated(*ref[:2], b.args, ref[2], self.seed)
        scale = max(float(np.max(np.abs(want.astype(np.float64)))), 1e-30)
        err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
        if not np.isfinite(err) or err > TOLERANCE.get(b.extra.get("dtype", ""), 1e-4):
            return MeasureResult(None, f"check: the emulated kernel differs from the default "
                                       f"point's by {err:.2e} of its range")
        return MeasureResult([1.0 + err])

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self.run_one(b) for b in builds]

    def conditions(self) -> dict[str, Any]:
        """None: a check against the default, the same on any machine."""
        return {}

    def close(self) -> None:
        pass


def run_emulated(lib: str, entry: str, args: Sequence[tuple[tuple[int, ...], str]],
                 scratch_bytes: int, seed: int) -> np.ndarray:
    """Run an emulated kernel on seeded data (the last argument, its output, starts as
    NaN so an element no thread writes shows) and return the output."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in args:
        if dtype.startswith("float"):
            arrays.append(rng.standard_normal(shape).astype(dtype))
        else:
            arrays.append(np.zeros(shape, dtype))
    if arrays[-1].dtype.kind == "f":
        arrays[-1][...] = np.nan
    fn = getattr(ctypes.CDLL(lib), entry)
    fn.restype = ctypes.c_int32
    scratch = scratch_area(scratch_bytes)
    tail = [] if scratch is None else [ctypes.c_void_p(scratch.ctypes.data)]
    if fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays], *tail) != 0:
        raise BuildError(f"{entry}: the emulated kernel returned an error")
    return arrays[-1]


def refuse_without_gpu(runner: str) -> None:
    """Raise :class:`~toolchain.errors.OptionError` with :func:`gpu_missing`'s reason when
    ``runner`` times on a GPU (``local``, ``gpu``) and none is here."""
    why = gpu_missing() if runner in ("local", "gpu") else None
    if why is not None:
        raise OptionError(f"kiln tune for a CUDA target times kernels on a GPU: {why}")


def cuda_measurement(target: Any, runner: str, jobs: int = 1, repeat: int = 3,
                     timeout: float = 10.0) -> tuple[CudaBuilder, Any]:
    """``(builder, runner)`` of ``kiln tune --target <cuda>``: ``runner`` ``local`` or
    ``gpu`` times on this machine's GPU (refused without one: :func:`gpu_missing`),
    ``emulate`` checks each point on the CPU."""
    if runner == "emulate":
        return CudaBuilder(target, "emulate", jobs), EmulateRunner()
    if runner not in ("local", "gpu"):
        raise OptionError(f"--runner {runner}: a CUDA target is tuned on its GPU (local) or "
                          "checked without one (emulate)")
    gpu = GpuRunner(repeat=repeat, timeout=timeout)
    return CudaBuilder(target, "gpu", jobs), gpu


__all__ = ["CudaBuilder", "EmulateRunner", "GpuRunner", "TOLERANCE", "build_cuda_one",
           "cuda_measurement", "emulation", "gpu_missing", "harness_source", "kernel_sources",
           "refuse_without_gpu", "run_emulated"]

"""Builds and measurements on a Ray cluster (``kiln tune --ray ADDRESS|local``).

* Builds are Ray tasks (one CPU each) that can run on any node: a task schedules,
  lowers and compiles the trial and returns the compiled artifact's *bytes* with its
  features, so nothing depends on a shared file system. ``jobs`` (``kiln tune --jobs``)
  caps how many are submitted at once (a batch's next build is submitted as one
  finishes); without it a batch's builds are submitted together and the cluster's CPUs
  decide.
* Each measurement device — this machine's CPU, a board, a QEMU emulator — is one actor
  (:class:`MeasureActor`, wrapping a runner of :data:`~toolchain.autotune.measure.RUNNERS`),
  so trials on one device never overlap. The actor writes the artifact to its own node
  and runs it. ``devices`` actors are started; boards attach by their Ray resource
  (``resources={"board:NAME": 1}``, docs/tuning.md).
* Results stream back as they finish (``ray.wait``); each batch is returned in order.

The local pool stays the default; this backend is chosen only by ``--ray``.

Example (starts a local two-CPU cluster; a few seconds)::

    >>> from toolchain.autotune.tasks import conv_task                 # doctest: +SKIP
    >>> builder, runner = ray_measurement("local", "local", "c-generic")  # doctest: +SKIP
    >>> t = conv_task((1, 8, 10, 10), 16, 3, 1, "c-generic")            # doctest: +SKIP
    >>> b = builder.build([BuildInput(t.node, t.target, t.space.workload,
    ...                               t.space.trace(t.space.default()))])  # doctest: +SKIP
    >>> runner.run(b)[0].error is None                                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolchain.autotune.measure import BuildInput, BuildResult, MeasureResult
from toolchain.errors import KilnError


def _ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - a declared dependency
        raise KilnError("--ray needs Ray: pip install 'kiln-toolchain[tune]' (or pip install "
                        "ray)") from None
    return ray


def connect(address: str, num_cpus: int = 2) -> None:
    """Join the cluster at ``address`` (``local``: start one here with ``num_cpus``)."""
    ray = _ray()
    if ray.is_initialized():
        return
    root = str(Path(__file__).resolve().parents[2])
    before = os.environ.get("PYTHONPATH")
    try:
        if address == "local":
            # The local cluster's processes inherit this environment, so its workers find
            # this Kiln by it. A job-level ``runtime_env`` would say the same, but Ray
            # starts fresh workers for a job with one and leaves the ``num_cpus`` it
            # started with the cluster idle (a Python start and Ray's import each).
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, before) if p)
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise KilnError(f"--ray {address}: cannot connect to a Ray cluster there ({exc}); "
                        "start one with 'ray start --head' or use --ray local") from None
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _build_remote(inp: BuildInput, runner: str) -> BuildResult:
    """A Ray task: build one trial and carry the artifact's bytes back."""
    if runner == "qemu":
        from toolchain.autotune.qemu import QemuBuilder

        res = QemuBuilder(inp.target).build_one(inp)
    else:
        from toolchain.autotune.measure import build_one

        res = build_one(inp)
    if res.lib is not None:
        res.extra["blob"] = Path(res.lib).read_bytes()
        res.extra["suffix"] = Path(res.lib).suffix
    return res


class MeasureActor:
    """One measurement device: a runner of kind ``runner`` and a folder for artifacts."""

    def __init__(self, runner: str, options: dict[str, Any]) -> None:
        from toolchain.autotune.measure import make_runner

        self.runner = make_runner(runner, **options)
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-ray-"))
        self.count = 0

    def run(self, b: BuildResult) -> MeasureResult:
        if b.lib is not None and "blob" in b.extra:
            self.count += 1
            path = self.dir / f"trial{self.count}{b.extra.get('suffix', '')}"
            path.write_bytes(b.extra["blob"])
            b = replace(b, lib=str(path), extra={})
        return self.runner.run([b])[0]

    def conditions(self) -> dict[str, Any] | None:
        """How this device measures, on its node (None: its runner does not say)."""
        said = getattr(self.runner, "conditions", None)
        return said() if said is not None else None

    def close(self) -> None:
        self.runner.close()


class RayBuilder:
    """Builds as Ray tasks, gathered in order as they finish; at most ``jobs`` in flight
    (None: every build of a batch at once)."""

    def __init__(self, runner: str, jobs: int | None = None) -> None:
        self.ray = _ray()
        self.kind = runner
        self.jobs = jobs
        self._task = self.ray.remote(num_cpus=1)(_build_remote)

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        return gather(self.ray, lambda i: self._task.remote(i, self.kind), inputs,
                       self.jobs)

    def close(self) -> None:
        pass


class RayRunner:
    """Measurements on ``devices`` :class:`MeasureActor`\\ s, spread round-robin."""

    def __init__(self, runner: str, options: dict[str, Any], devices: int = 1,
                 resources: dict[str, float] | None = None) -> None:
        self.ray = _ray()
        from toolchain.autotune.measure import RUNNERS

        probe = RUNNERS[runner] if runner == "local" else None
        self.name = f"ray-{getattr(probe, 'name', None) or 'qemu-icount'}"
        self.unit = getattr(probe, "unit", None) or "instructions"
        cls = self.ray.remote(num_cpus=0, resources=resources or None)(MeasureActor)
        self.actors = [cls.remote(runner, options) for _ in range(max(1, devices))]

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        pairs = [(self.actors[i % len(self.actors)], b) for i, b in enumerate(builds)]
        return gather(self.ray, lambda p: p[0].run.remote(p[1]), pairs)

    def conditions(self) -> dict[str, Any] | None:
        """How its devices measure (each reports its own runner's, on its node); devices
        on nodes of different CPUs name them all, ``machine: "A, B"``."""
        got = self.ray.get([a.conditions.remote() for a in self.actors])
        if any(c is None for c in got):
            return None
        out = dict(got[0])
        machines = sorted({c["machine"] for c in got if "machine" in c})
        if machines:
            out["machine"] = ", ".join(machines)
        return out

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.get(a.close.remote())
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - the cluster may be gone already
                pass


def gather(ray: Any, submit: Callable[[Any], Any], items: Sequence[Any],
            cap: int | None = None) -> list[Any]:
    """``submit(item)`` (a Ray object reference) for each of ``items``, at most ``cap`` in
    flight (None: all at once); the results in order, collected as each finishes
    (``ray.wait``)."""
    index: dict[Any, int] = {}
    out: list[Any] = [None] * len(items)
    pending: list[Any] = []
    ahead = 0
    while ahead < len(items) or pending:
        while ahead < len(items) and (cap is None or len(pending) < cap):
            ref = submit(items[ahead])
            index[ref] = ahead
            pending.append(ref)
            ahead += 1
        done, pending = ray.wait(pending, num_returns=1)
        for r in done:
            out[index[r]] = ray.get(r)
    return out


def ray_measurement(address: str, runner: str, target: Any, *, repeat: int = 3,
                    timeout: float = 10.0, devices: int = 1,
                    resources: dict[str, float] | None = None, jobs: int | None = None,
                    flush_bytes: int = 8 << 20) -> tuple[RayBuilder, RayRunner]:
    """A builder (at most ``jobs`` builds at once; None: no cap) and a runner on the Ray
    cluster at ``address`` (``local``: a local cluster of two CPUs); ``flush_bytes``: the
    local runner's cache flush between repeats (``--flush-mb``: ignored, the default
    used, by an earlier Kiln)."""
    connect(address)
    if runner == "qemu":
        options: dict[str, Any] = {"target": target, "timeout": timeout}
    else:
        options = {"repeat": repeat, "timeout": timeout, "flush_bytes": flush_bytes}
    return RayBuilder(runner, jobs), RayRunner(runner, options, devices, resources)

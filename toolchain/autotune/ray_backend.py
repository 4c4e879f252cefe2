"""Builds and measurements on a Ray cluster (``kiln tune --ray ADDRESS|local``).

* Builds are Ray tasks (one CPU each) that can run on any node: a task schedules,
  lowers and compiles the trial and returns the compiled artifact's *bytes* with its
  features, so nothing depends on a shared file system.
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
from collections.abc import Sequence
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

    def close(self) -> None:
        self.runner.close()


class RayBuilder:
    """Builds as Ray tasks, gathered in order as they finish."""

    def __init__(self, runner: str) -> None:
        self.ray = _ray()
        self.kind = runner
        self._task = self.ray.remote(num_cpus=1)(_build_remote)

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        refs = [self._task.remote(i, self.kind) for i in inputs]
        return _gather(self.ray, refs)

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
        refs = [self.actors[i % len(self.actors)].run.remote(b)
                for i, b in enumerate(builds)]
        return _gather(self.ray, refs)

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.get(a.close.remote())
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - the cluster may be gone already
                pass


def _gather(ray: Any, refs: list[Any]) -> list[Any]:
    """The results of ``refs`` in order, collected as each finishes (``ray.wait``)."""
    index = {r: i for i, r in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for r in done:
            out[index[r]] = ray.get(r)
    return out


def ray_measurement(address: str, runner: str, target: Any, *, repeat: int = 3,
                    timeout: float = 10.0, devices: int = 1,
                    resources: dict[str, float] | None = None) -> tuple[RayBuilder, RayRunner]:
    """A builder and a runner on the Ray cluster at ``address`` (``local``: a local
    cluster of two CPUs)."""
    connect(address)
    if runner == "qemu":
        options: dict[str, Any] = {"target": target, "timeout": timeout}
    else:
        options = {"repeat": repeat, "timeout": timeout}
    return RayBuilder(runner), RayRunner(runner, options, devices, resources)

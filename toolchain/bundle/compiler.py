"""Compile an ONNX model into a bundle description: kernels, call sequence, plan, weights.

:func:`compile_model` is the whole flow (``kiln compile`` and ``toolchain.compile`` call
it)::

    from_onnx -> run_pipeline (passes, layout for the target, fusion)
      -> per Fused kernel: default schedule (fallback: the unscheduled compute) -> lower
         -> C (toolchain.bundle.emit)
      -> plan_in_best_order (the node order with the smallest arena: order search;
         arena offsets, in-place pairs, kernel scratch)
      -> weights packed (already in kernel layout after the layout pass)
      -> templates rendered (toolchain.bundle.render) -> written atomically

Example::

    >>> from toolchain.bundle import compile_model
    >>> b = compile_model("examples/lenet5.onnx", "c-generic", "/tmp/lenet5_bundle",
    ...                   force=True)                                  # doctest: +SKIP
    >>> b.metadata["arena_bytes"]                                      # doctest: +SKIP
    9216
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.autotune import apply
from toolchain.bundle.accel import AcceleratorKernel, accelerator_kernel, inner_layer
from toolchain.bundle.emit import BundleRenderer, KernelSource
from toolchain.bundle.names import bundle_namer, comment, model_identifier
from toolchain.bundle.progress import CompileProgress
from toolchain.bundle.reuse import ScheduleReuse
from toolchain.codegen.backend import CBackend, backend_for
from toolchain.codegen.names import TE_NAMES, sanitize
from toolchain.errors import (
    InternalError,
    KilnError,
    ModelError,
    NoScheduleError,
    OptionError,
    TargetError,
    UnsupportedError,
)
from toolchain.frontend.mapped import release_mapped_pages
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.memory import MemoryPlan, plan_memory
from toolchain.graph.ops.registry import get_op
from toolchain.graph.order import plan_in_best_order
from toolchain.graph.overlap import AccessOrder
from toolchain.inprocess import ByTarget
from toolchain.schedules import packing
from toolchain.schedules.packing import is_value_blind
from toolchain.schedules.registry import lookup
from toolchain.target import Target
from toolchain.target import resolve_target as resolve_target_once
from toolchain.tir import memo

#: the CPU target that runs an accelerator bundle's host kernels
HOST_OF_ACCELERATOR = "c-generic"
#: arena, weight and tensor alignment in bytes (a cache line; AVX-512 loads)
ALIGNMENT = 64
#: the bundle's own C names (``<prefix>_<suffix>``), never given to a kernel
RESERVED_SUFFIXES = ("run", "inputs", "outputs", "weights", "weights_t", "weights_blob",
                     "weights_data", "set_weights", "weights_blob_s", "init", "release",
                     "run_device")


#: separates a kernel's schedule ("default") from its tensor-core note in ``schedule``
TENSOR_CORES_NOTE = "; tensor cores: "


def schedule_fields(schedule: str) -> dict[str, str]:
    """``metadata.json``'s fields of a kernel's ``schedule`` string: ``schedule`` and, with
    a tensor-core note, ``tensor_cores``.

    >>> schedule_fields("default; tensor cores: implicit GEMM on tensor cores")
    {'schedule': 'default', 'tensor_cores': 'implicit GEMM on tensor cores'}
    >>> schedule_fields("default")
    {'schedule': 'default'}
    """
    how, sep, note = schedule.partition(TENSOR_CORES_NOTE)
    return {"schedule": how, **({"tensor_cores": note} if sep else {})}


@dataclass
class CompiledKernel:
    """One Fused node as a bundle kernel."""

    index: int
    node: Node
    source: KernelSource
    #: outer values behind the kernel's parameters, in order (inputs, then outputs)
    params: list[Value]
    #: "default" or "fallback: <why>"; a float16 convolution on a tensor-core target adds
    #: :data:`TENSOR_CORES_NOTE` and whether it is on tensor cores or why not
    #: (``metadata.json``: the kernel's ``tensor_cores``)
    schedule: str
    flops: int = 0
    #: the plan writes the output over an input (that pair is rendered without restrict)
    in_place: bool = False
    #: outer input names the kernel may write its output over (its schedule's
    #: ``OpSchedule.in_place``); the memory planner decides whether it does
    overwrite: tuple[str, ...] = ()
    #: a tile kernel of a patch stage (:mod:`toolchain.bundle.patching`): which, and where
    patch: Any = None


@dataclass
class BundleSpec:
    """Everything a bundle's files are rendered from (see :mod:`toolchain.bundle.render`)."""

    model: str  # C prefix
    graph: Graph  # as imported
    fused: Graph
    target: Target
    layout: str
    kernels: list[CompiledKernel]
    plan: MemoryPlan
    options: dict[str, Any]
    source: dict[str, Any] = field(default_factory=dict)
    #: an accelerator bundle: the accelerator's target and the partition (None: CPU only)
    accelerator: AcceleratorPart | None = None
    #: ``build_spec(..., also_emulate=True)``: the SIMT emulation of the same kernels
    emulation: BundleSpec | None = None


@dataclass
class AcceleratorPart:
    """The accelerator side of a bundle: its target, where each node runs and why, and
    the compiled layers by node name (filled by the partition pass)."""

    target: Target
    partition: Any = None  # toolchain.vta.partition.Partition once the pass ran

    def run(self, graph: Graph) -> Graph:
        """The partition pass (a pipeline step before fusion)."""
        from toolchain.vta.partition import partition

        self.partition = partition(graph, self.target)
        return self.partition.graph


def resolve_target(target: str | Path | Target) -> Target:
    """A :class:`Target` that has a bundle backend (C, CUDA, LLVM) or is an accelerator
    (``kind: vta``: a C bundle whose accelerator layers are instruction streams), from a
    name, a YAML path or a Target; others are refused with the backends there are."""
    t = resolve_target_once(target)
    if t.is_accelerator:
        return t  # host kernels for its CPU, accelerator layers as programs (build_spec)
    try:
        backend_for(t)
    except TargetError:
        raise TargetError(f"target {t.name!r} has kind {t.kind!r}: bundles are generated for "
                          "C, CUDA and LLVM targets in this version (try --target c-generic "
                          "or --target cuda-sm80)") from None
    return t


def _source_info(model: Any) -> tuple[Any, dict[str, Any], str]:
    """(model for from_onnx, provenance for metadata.json, default model name). A path is
    not parsed here (``from_onnx`` parses it once): its sha256 is the file's, hashed a
    block at a time, so a large model is never held twice for its digest."""
    from toolchain.frontend.onnx import load_model, model_sha256

    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.exists():
            raise ModelError(f"{path}: no such file")
        if path.is_dir():
            raise ModelError(f"{path}: is a directory, not an ONNX model file")
        path = path.resolve()
        return str(path), {"path": str(path), "sha256": model_sha256(path)}, path.stem
    proto, label, _ = load_model(model)
    return proto, {"path": None, "sha256": model_sha256(proto)}, proto.graph.name or "model"


def _schedule(node: Node, target: Target, cache: KernelCache
              ) -> tuple[Any, list[Value], list[Value], str, Value | None,
                         tuple[Value, AccessOrder] | None]:
    """(lowered PrimFunc, inner input values, output values, how it was scheduled, the
    inner input the kernel may write its output over or None, the inner input its output
    may start inside and the kernel's access order (``OpSchedule.overlap``) or None).

    The schedule is the strategy table's for the node's op on ``target``
    (:func:`~toolchain.schedules.registry.lookup`); the unscheduled compute only where
    none exists (:class:`~toolchain.errors.NoScheduleError`, recorded)."""
    from toolchain import te
    from toolchain.schedules.generic.fused import fused_compute
    from toolchain.schedules.registry import lookup

    try:
        fn = lookup(node.op, target)
        if fn is None:
            raise NoScheduleError(f"{node.describe()}: no schedule for fused kernels on "
                                  f"target {target.name!r} (keys: "
                                  f"{', '.join(target.keys) or target.kind})")
        op = fn(node, target)
        if op is None:
            raise NoScheduleError(f"{node.describe()}: the schedule for {node.op!r} on "
                                  f"{target.name!r} does not handle this configuration")
        host = op.input_values[op.in_place] if op.in_place is not None else None
        lap = (op.input_values[0], op.overlap) if op.overlap is not None else None
        note = op.info.get("tensor_cores")  # a float16 convolution on a tensor-core target
        return cache.lower(op.schedule.mod), list(op.input_values), list(op.output_values), \
            "default" if note is None else f"default{TENSOR_CORES_NOTE}{note}", host, lap
    except NoScheduleError as exc:
        # declared: no schedule for this op here (recorded in metadata.json and the summary);
        # any other exception from a schedule is a bug and propagates
        why = str(exc).splitlines()[0][:200]
    fc = fused_compute(node)
    func = te.create_prim_func(fc.inputs + fc.outputs,
                               name=sanitize(node.attrs["kernel"], **TE_NAMES))
    return cache.lower(func), list(fc.input_values), list(fc.output_values), \
        f"fallback: {why}", None, None


#: lowered kernels kept across compiles (:meth:`KernelCache.lower`): by the scheduled
#: function's exact key (:func:`~toolchain.tir.structural.keys`: its structure and every
#: name) and the target, ``(scheduled function, lowered function)``. Lowering is a function
#: of those two alone, so an equal function gets the very lowered function an earlier
#: compile made and the bundle is the one a fresh process writes; each entry keeps its
#: scheduled function alive (its key may hold that function's ``id``). A test session,
#: a notebook or the tuner's final compile compiles a model again with other bundle
#: options (threads, weights storage, safety checks, patches): each kernel is lowered once.
LOWERED_IN_PROCESS = ByTarget(limit=256)


class KernelCache:
    """Lowered and rendered kernels by the structure of their scheduled function.

    ResNet-18 has several fused groups that compute the same thing on tensors of the same
    shapes (the second block of each stage repeats the first's convolutions): they differ
    only in names and in which weights they are called with. Weights packed at compile
    time are kernel *parameters*, so such groups schedule to functions equal up to names
    (:func:`~toolchain.tir.structural.structural_key`); a constant baked into the code is
    part of the key, so kernels with different baked constants never share. Each distinct
    function is lowered once and rendered once per ``restrict`` setting; later groups call
    the first one's C function.

    >>> from toolchain import te
    >>> def add_one(name):
    ...     A = te.placeholder((8,), name=name)
    ...     return te.create_prim_func([A, te.compute((8,), lambda i: A[i] + 1.0)])
    >>> cache = KernelCache()
    >>> cache.lower(add_one("A")) is cache.lower(add_one("X")), len(cache)
    (True, 1)
    """

    def __init__(self, target: Target | None = None, emulate: bool = False,
                 backend: str | None = None) -> None:
        #: the target the kernels are lowered for (``lower(..., target=)``) and its backend
        #: (``backend="llvm"``: object code through LLVM instead of C)
        self.target = target
        self.backend = backend_for(target, emulate, backend) if target is not None \
            else CBackend()
        # key -> (scheduled function, kept alive for its key; lowered function)
        self._lowered: dict[Any, tuple[Any, Any]] = {}
        self._sources: dict[tuple[int, bool | frozenset[int]], KernelSource] = {}

    def __len__(self) -> int:
        return len(self._lowered)

    def lower(self, func: Any) -> Any:
        """The lowered ``func``: the very object lowered for an equal function before (in
        this compile, up to names); lowered again only where no compile in this process
        lowered a function equal to it, names included, for the same target
        (:data:`LOWERED_IN_PROCESS`)."""
        from toolchain.tir.structural import keys
        from toolchain.tir.transform.pipeline import lower

        key, exact = keys(func)
        hit = self._lowered.get(key)
        if hit is None:
            hit = LOWERED_IN_PROCESS.get(exact, self.target)
            if hit is None:
                hit = (func, lower(func, target=self.target))
                LOWERED_IN_PROCESS.put(exact, self.target, hit)
            self._lowered[key] = hit
        return hit[1]

    def render(self, lowered: Any, name: str, restrict: bool | frozenset[int]) -> KernelSource:
        """The C of ``lowered`` as kernel ``name`` (or the source rendered for it before,
        under its first name); ``restrict`` as :func:`~toolchain.bundle.emit.render_kernel`
        takes it."""
        key = (id(lowered), restrict)  # lowered functions are kept in _lowered
        if key not in self._sources:
            self._sources[key] = self.backend.kernel(lowered, name, restrict=restrict)
        return self._sources[key]

    def emulated(self) -> KernelCache:
        """A cache of the same lowered functions whose sources are the SIMT emulation's."""
        twin = KernelCache(self.target, emulate=True)
        twin._lowered = self._lowered
        return twin

    def rendered(self, lowered: Any, restrict: bool | frozenset[int]) -> bool:
        """True if ``lowered`` already has a C function with this ``restrict``."""
        return (id(lowered), restrict) in self._sources


def _outer_values(node: Node, ins: list[Value], outs: list[Value]) -> list[Value]:
    """Map a kernel's inner parameter values to the outer graph's values."""
    inner: Graph = node.attrs["graph"]
    pos = {id(v): i for i, v in enumerate(inner.inputs)}
    result = []
    for v in ins:
        if id(v) in pos:
            outer = node.inputs[pos[id(v)]]
            if outer is None:
                raise UnsupportedError(f"{node.describe()}: kernel input {v.name!r} is absent")
            result.append(outer)
        elif v.data is not None:
            result.append(v)  # a constant of the kernel (packed weights, a table)
        else:
            raise UnsupportedError(f"{node.describe()}: kernel parameter {v.name!r} is neither "
                                   "an input of the fused group nor a constant")
    by_id = {id(v): v for v in node.outputs}
    for v in outs:
        if id(v) not in by_id:
            raise UnsupportedError(f"{node.describe()}: kernel output {v.name!r} is not an "
                                   "output of the fused group")
        result.append(v)
    return result


def _in_place_pairs(fused: Graph, plan: MemoryPlan) -> dict[str, list[tuple[str, str]]]:
    """Per node, the ``(output, input)`` tensor names ``plan`` puts in one buffer."""
    producer = {v.name: n.name for n in fused.nodes for v in n.outputs}
    pairs: dict[str, list[tuple[str, str]]] = {}
    for t in plan.tensors:
        if t.inplace_of and t.name in producer:
            pairs.setdefault(producer[t.name], []).append((t.name, t.inplace_of))
    return pairs


def _aliased(params: list[Value], pairs: list[tuple[str, str]]) -> frozenset[int]:
    """Positions of the parameters an in-place pair puts in one buffer."""
    names = {n for pair in pairs for n in pair}
    return frozenset(i for i, v in enumerate(params) if v.name in names)


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the system (glibc ``malloc_trim``).

    After a stage frees hundreds of MB (the parsed ONNX model, a model's IR), glibc keeps
    much of it mapped: its mmap threshold rose when the first large blocks were freed, so
    later blocks came from the heap, whose free holes it returns only when asked.
    Importing BERT-base left 846 MB resident instead of 505 MB. Elsewhere (no glibc)
    this does nothing.
    """
    import ctypes

    release_mapped_pages()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def build_spec(model: Any, target: str | Path | Target = "c-generic", *,
               input_shapes: dict[str, tuple[int, ...]] | None = None,
               name: str | None = None, dump_ir: str | Path | None = None,
               progress: bool | None | CompileProgress = None, emulate: bool = False,
               backend: str | None = None, weights: str | None = None,
               skip_passes: tuple[str, ...] = (), ram_budget: int | None = None,
               patch: tuple[Any, ...] | None = None,
               precision: str = "fp32", cuda_graph: bool = False,
               also_emulate: bool = False) -> BundleSpec:
    """Run the compile flow up to (not including) the rendered files; ``emulate``: a GPU
    target's kernels rendered as C for the CPU (the SIMT emulation, a C bundle);
    ``backend="llvm"``: the kernels as object code for the target's triple (LLVM), the rest
    of the bundle C as always; ``weights``: how the bundle stores its weights, one of
    :data:`~toolchain.bundle.weights.MODES` (None: ``auto``); ``skip_passes``: default graph
    passes left out; ``ram_budget``: the most arena bytes, met by running the first layers
    in patches where the plain plan needs more (docs/embedded.md, "Patch-based inference";
    None: no limit, no patches); ``patch``: a patch stage chosen by hand instead, as
    ``(first node, layers, (rows, columns) of tiles)``, with ``True`` after it for a stage
    that ends in the global average pool after those layers; ``precision``: ``fp16`` stores the
    model's float32 tensors as float16 (:func:`~toolchain.graph.passes.precision.to_fp16`;
    float32 inputs and outputs); ``cuda_graph``: a CUDA bundle whose launcher captures its
    launch sequence into a CUDA graph (:func:`~toolchain.bundle.render_cuda.cuda_graph_option`
    checks the target); ``also_emulate``: a CUDA bundle's spec whose ``emulation`` is the
    spec ``emulate=True`` gives, from the same schedules and lowered kernels (each
    rendered, planned and ordered for its backend as its own compile would: the same
    files), so a test checks the bundle nvcc builds and its emulation for one compile."""
    if also_emulate and (emulate or cuda_graph or backend is not None):
        raise OptionError("also_emulate renders a plain CUDA bundle's kernels a second "
                          "time; it does not go with emulate, cuda_graph or backend")
    if ram_budget is not None and ram_budget < 1:
        raise OptionError(f"--ram-budget {ram_budget}: must be a positive number of bytes")
    if dump_ir is not None:  # refused before any work, as a user error
        if Path(dump_ir).exists() and not Path(dump_ir).is_dir():
            raise OptionError(f"--dump-ir {dump_ir}: is a file, not a directory")
        try:
            Path(dump_ir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OptionError(f"--dump-ir {dump_ir}: cannot create the directory "
                              f"({exc.strerror or exc})") from None
    from toolchain.bundle.weights import MODES
    from toolchain.graph.passes import DEFAULT_PASSES
    from toolchain.graph.passes.pipeline import check_lowered
    from toolchain.graph.passes.precision import PRECISIONS, to_fp16

    unknown = sorted(set(skip_passes) - set(DEFAULT_PASSES))
    if unknown:
        raise OptionError(f"--skip-pass {', '.join(unknown)}: not a graph pass; the passes "
                          f"are: {', '.join(dict.fromkeys(DEFAULT_PASSES))}")
    passes = tuple(p for p in DEFAULT_PASSES if p not in skip_passes)

    if precision not in PRECISIONS:
        raise OptionError(f"precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if weights not in (None, *MODES):
        raise OptionError(f"weights {weights!r}: choose one of {', '.join(MODES)} "
                          "(docs/bundle.md, 'Weights')")
    if backend not in (None, "c", "llvm"):
        raise OptionError(f"backend {backend!r}: bundles are generated by 'c' (default) or "
                          "'llvm' (kernels as object files)")
    if backend == "llvm" and emulate:
        raise OptionError("--emulate renders a GPU target's kernels as C; it does not go "
                          "with --backend llvm")
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.layout import layout_for_target, parse_layout_target

    t = resolve_target(target)
    if also_emulate and t.kind != "cuda":
        raise OptionError(f"also_emulate: target {t.name!r} has kind {t.kind!r}; the SIMT "
                          "emulation is of a GPU target's kernels")
    twin: list[Any] | None = [] if also_emulate else None
    if cuda_graph:
        from toolchain.bundle.render_cuda import cuda_graph_option

        graph_option = cuda_graph_option(t, emulate)  # before the work: a wrong target fails fast
    if (ram_budget is not None or patch is not None) and (t.kind != "c" or emulate):
        raise OptionError(f"--ram-budget (patch stages) needs a CPU target whose bundle is C; "
                          f"target {t.name!r} has kind {t.kind!r}"
                          + (" and --emulate" if emulate else ""))
    accel = None
    if t.is_accelerator:
        if backend == "llvm" or emulate:
            raise OptionError(f"target {t.name!r} is an accelerator: its bundles are C "
                              "(no --backend llvm, no --emulate)")
        accel = AcceleratorPart(t)
        t = resolve_target_once(HOST_OF_ACCELERATOR)
        passes = (*passes[:passes.index("fuse")], accel.run, *passes[passes.index("fuse"):]) \
            if "fuse" in passes else (*passes, accel.run)
    bar = CompileProgress.of(progress)
    bar.stage("import")
    loadable, source, stem = _source_info(model)
    prefix = model_identifier(name if name is not None else stem)
    if not prefix.strip("_"):
        raise OptionError(f"model name {name or stem!r} gives no usable C identifier; pass "
                          "--name NAME")
    graph = from_onnx(loadable, input_shapes=input_shapes)
    del loadable
    if precision == "fp16":
        if "expand_recurrent" in passes:
            # LSTM/GRU/RNN take float32 only: their expansion (MatMul, Gemm, Slice, the
            # activations) is what goes to float16, as every other op does
            from toolchain.graph.passes.expand_recurrent import expand_recurrent

            graph = expand_recurrent(graph)
        graph = to_fp16(graph)
    check_lowered(graph, [p for p in passes if isinstance(p, str)])
    release_freed_memory()
    check_index_range(graph)
    # the accelerator's layers take NCHW tensors (their kernels pack them)
    layout = parse_layout_target("nchw") if accel is not None else layout_for_target(t)
    try:
        fused, kernels, plan = _kernels(graph, layout, t, prefix, dump_ir, bar, emulate,
                                        backend, passes, accel, ram_budget, patch, twin)
        layout_note = _layout_name(layout)
    except UnsupportedError as exc:
        if layout.kind == "nchw":
            raise
        # the target's blocked/NHWC layout needs a kernel Kiln cannot build yet: the whole
        # graph in NCHW still gives a correct bundle (recorded in metadata.json)
        layout_note = (f"nchw (the target's {_layout_name(layout)} failed: "
                       f"{str(exc).splitlines()[0][:160]})")
        fused, kernels, plan = _kernels(graph, parse_layout_target("nchw"), t, prefix,
                                        dump_ir, bar, emulate, backend, passes,
                                        ram_budget=ram_budget, patch=patch, twin=twin)
    release_freed_memory()
    plan.check()

    def options_for(emulated: bool) -> dict[str, Any]:
        options = {"input_shapes": {k: list(v) for k, v in
                                    sorted((input_shapes or {}).items())},
                   "name": prefix, "alignment": ALIGNMENT, "weights": weights or "auto"}
        if precision != "fp32":
            options["precision"] = precision  # float16 tensors inside, float32 at the API
        if emulated:
            options["emulate"] = True  # the GPU kernels' code as C, run thread by thread
        if cuda_graph:
            options["cuda_graph"] = graph_option  # True, or why it was ignored (--emulate)
        if backend == "llvm":
            options["backend"] = "llvm"  # kernels as object files (docs/llvm.md)
        if skip_passes:
            options["skip_passes"] = sorted(set(skip_passes))
        if ram_budget is not None and any(k.patch is not None for k in kernels):
            options["ram_budget"] = ram_budget  # only where it made a patch stage
        if patch is not None:
            options["patch"] = [patch[0], patch[1], list(patch[2])]
        return options

    emulation = None
    if twin:  # the spec an ``emulate=True`` compile gives, options included
        twin_fused, twin_kernels, twin_plan = twin[-1]
        twin_plan.check()
        emulation = BundleSpec(prefix, graph, twin_fused, t, layout_note, twin_kernels,
                               twin_plan, options_for(True), source)
    if not isinstance(progress, CompileProgress):
        bar.close()  # the caller's bar goes on to rendering and writing
    return BundleSpec(prefix, graph, fused, t, layout_note, kernels, plan,
                      options_for(emulate), source, accel, emulation)


#: kernels index tensors with 32-bit signed integers (loop variables and flat offsets)
MAX_ELEMENTS = 2**31 - 1


def check_index_range(graph: Graph) -> None:
    """Refuse a tensor with more elements than a 32-bit index reaches (the kernels' flat
    offsets would overflow: silent memory corruption), naming it and its size.

    >>> from toolchain.graph.ir import Node, Value
    >>> x, y = Value("x", (2,), "float32"), Value("y", (100_000, 100_000), "float32")
    >>> check_index_range(Graph("g", [x], [y], [Node("Expand", "e", [x], [y])]))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    toolchain.errors.ModelError: g: tensor 'y' float32[100000, 100000] has 10,000,000,000 ...
    """
    values = {id(v): v for n in graph.nodes for v in (*n.inputs, *n.outputs) if v is not None}
    values.update((id(v), v) for v in (*graph.inputs, *graph.outputs))
    for v in values.values():
        if v.size > MAX_ELEMENTS:
            raise ModelError(f"{graph.name}: tensor {v.name!r} {v.type} has {v.size:,} "
                             f"elements ({v.nbytes:,} bytes); Kiln's kernels index tensors "
                             f"with 32-bit integers, so a tensor may hold at most "
                             f"{MAX_ELEMENTS:,} elements")


def _layout_name(layout: Any) -> str:
    return f"nchw{layout.block}c" if layout.kind == "nchwc" else layout.kind


def _kernels(graph: Graph, layout: Any, t: Target, prefix: str, dump_ir: Any,
             bar: CompileProgress, emulate: bool = False, backend: str | None = None,
             passes: tuple[Any, ...] | None = None, accel: AcceleratorPart | None = None,
             ram_budget: int | None = None, patch: Any = None, twin: list[Any] | None = None
             ) -> tuple[Graph, list[CompiledKernel], MemoryPlan]:
    """The fused graph in ``layout`` (in the order its kernels run), its compiled kernels
    and its memory plan; ``twin``: gets the same of the kernels' SIMT emulation."""
    from toolchain.graph.passes import run_pipeline

    bar.stage("passes")
    fused = run_pipeline(graph, layout, dump_dir=dump_ir, passes=passes)
    bar.stage("scheduling")
    try:
        return _compile_kernels(fused, t, prefix, bar, emulate, backend, accel, ram_budget,
                                patch, twin)
    finally:
        # the memo keeps this model's IR alive; its entries rarely help another model
        memo.clear_cache()


@contextlib.contextmanager
def kiln_fault(node: Node, target: Target) -> Iterator[None]:
    """Errors while scheduling, lowering or rendering ``node``'s kernel are Kiln's fault
    (its computes and schedules, not the user's input) unless they say the model is
    unsupported: they become an :class:`~toolchain.errors.InternalError` naming the node
    and the target, which the CLI reports as a Kiln bug (exit status 1, never 2)."""
    try:
        yield
    except ModelError:  # UnsupportedError, NoScheduleError: the model, not Kiln
        raise
    except KilnError as exc:
        raise InternalError(f"{node.describe()} on target {target.name!r}: "
                            f"{type(exc).__name__}: {exc}") from exc


def _compile_kernels(fused: Graph, t: Target, prefix: str,
                     bar: CompileProgress, emulate: bool = False,
                     backend: str | None = None, accel: AcceleratorPart | None = None,
                     ram_budget: int | None = None, patch: Any = None,
                     twin: list[Any] | None = None
                     ) -> tuple[Graph, list[CompiledKernel], MemoryPlan]:
    """(``fused`` in the order the bundle runs it, one :class:`CompiledKernel` per Fused
    node in that order (a patch stage: one per layer), the memory plan).

    The kernels are scheduled and rendered in the file's order first: that gives each
    kernel's scratch and declared in-place inputs, which the order search needs
    (:func:`~toolchain.graph.order.plan_in_best_order`).  When it picks another order, the
    kernels whose in-place pairs change are rendered again (``restrict`` differs).  With a
    ``ram_budget`` the arena exceeds, a patch stage is chosen to meet it
    (:func:`toolchain.bundle.patching.meet_budget`)."""
    for node in fused.nodes:
        if node.op != "Fused":
            raise UnsupportedError(f"{node.describe()}: the pipeline left a node that is not "
                                   "a fused kernel")
    ks = KernelSet(t, KernelCache(t, emulate, backend), accel, prefix)
    ks.schedule(fused, bar.kernels(list(fused.nodes)))
    ordered, kernels, plan = ks.finish(fused)
    if twin is not None:  # (no patch stage, no budget: a CUDA target's kernels)
        twin.append(ks.emulated().finish(fused))
    if patch is not None:
        from toolchain.bundle.patching import patch_by_hand

        return patch_by_hand(ks, ordered, plan, *patch)
    if ram_budget is not None and plan.arena_bytes > ram_budget:
        from toolchain.bundle.patching import meet_budget

        return meet_budget(ks, ordered, kernels, plan, ram_budget)
    return ordered, kernels, plan


class KernelSet:
    """The scheduled kernels of a compile, by node name, and what the memory planner needs
    from them; :meth:`finish` plans and renders a fused graph made of them."""

    def __init__(self, t: Target, cache: KernelCache, accel: AcceleratorPart | None,
                 prefix: str) -> None:
        self.target, self.cache, self.accel, self.prefix = t, cache, accel, prefix
        self.reuse = ScheduleReuse(trusted=is_value_blind(lookup("Fused", t)))
        self.scheduled: dict[str, Any] = {}
        self.overwrite: dict[str, tuple[str, ...]] = {}
        #: node -> (input, lead): OpSchedule.overlap
        self.overlap: dict[str, tuple[str, int]] = {}
        self.names = bundle_namer({f"{prefix}_{s}" for s in RESERVED_SUFFIXES})

    def schedule_one(self, node: Node) -> tuple[Any, list[Value], str, Any, Any]:
        """(lowered function, outer parameter values, how, the input it may write over or
        None, (input, access order) or None) of one fused node."""
        t = self.target
        with kiln_fault(node, t):
            hit = self.reuse.find(node)
            if hit is None:
                with packing.recording() as rec, apply.kernel() as asked:
                    hit = _schedule(node, t, self.cache)
                self.reuse.remember(node, rec, *hit, note=frozenset(asked))
            else:  # built from the same records as the kernel it reuses
                apply.count_kernel(self.reuse.note)
            release_mapped_pages()  # the weights it read are packed by now
        func, ins, outs, how, host, lap = hit
        params = _outer_values(node, ins, outs)
        n_buf = sum(1 for p in func.params if hasattr(p, "data"))
        if n_buf != len(params) or n_buf != len(func.params):
            raise InternalError(f"{node.describe()}: kernel has {len(func.params)} "
                                f"parameters for {len(params)} tensors")
        return func, params, how, (None if host is None else params[
            next(i for i, v in enumerate(ins) if v is host)]), (
            None if lap is None or not any(v is lap[0] for v in ins) else
            (params[next(i for i, v in enumerate(ins) if v is lap[0])], lap[1]))

    def schedule(self, fused: Graph, nodes: Any) -> None:
        """Schedule the nodes not scheduled yet (a patch stage: its tile kernels)."""
        from toolchain.bundle.patching import schedule_stage

        accel = self.accel
        for node in nodes:
            if node.name in self.scheduled:
                continue
            if "patch" in node.attrs:
                self.scheduled[node.name] = schedule_stage(node, self.schedule_one)
                continue
            vta = inner_layer(node) if accel is not None else None
            if vta is not None:
                assert accel is not None and accel.partition is not None
                ak = accelerator_kernel(node, accel.partition.layers[vta.name],
                                        sum(isinstance(v[1], AcceleratorKernel)
                                            for v in self.scheduled.values()))
                self.scheduled[node.name] = (node, ak, ak.params, "accelerator")
                continue
            func, params, how, host, lap = self.schedule_one(node)
            if host is not None:
                self.overwrite[node.name] = (host.name,)
            if lap is not None:
                lead = lap[1].lead(ALIGNMENT)
                if lead is not None:
                    self.overlap[node.name] = (lap[0].name, lead)
            self.scheduled[node.name] = (node, func, params, how)

    def emulated(self) -> KernelSet:
        """This set's scheduled and lowered kernels (shared, not copied), to be rendered
        by the SIMT emulation under names of their own, as an ``emulate`` compile's."""
        twin = KernelSet(self.target, self.cache.emulated(), self.accel, self.prefix)
        twin.scheduled, twin.overwrite, twin.overlap = \
            self.scheduled, self.overwrite, self.overlap
        return twin

    def declared(self, fused: Graph) -> tuple[dict[str, tuple[str, ...]],
                                              dict[str, tuple[str, int]]]:
        """The in-place inputs and overlaps the kernels of ``fused``'s nodes declare."""
        names = {n.name for n in fused.nodes}
        return ({k: v for k, v in self.overwrite.items() if k in names},
                {k: v for k, v in self.overlap.items() if k in names})

    def finish(self, fused: Graph) -> tuple[Graph, list[CompiledKernel], MemoryPlan]:
        """Plan ``fused`` (every node scheduled), render its kernels, search the order."""
        from toolchain.bundle.patching import stage_scratch

        overwrite, overlap = self.declared(fused)
        args = (self.scheduled, overwrite, self.cache, self.names, self.prefix, self.target)
        plan = plan_memory(fused, alignment=ALIGNMENT, search_moves=0, overwrite=overwrite,
                           overlap=overlap)
        kernels = _render_kernels(fused, plan, *args)
        scratch = {k.node.name: k.source.scratch_bytes for k in kernels
                   if k.source.scratch_bytes and k.patch is None}
        scratch.update(stage_scratch(kernels, ALIGNMENT))
        pairs = _in_place_pairs(fused, plan)
        ordered, plan = plan_in_best_order(fused, alignment=ALIGNMENT, scratch=scratch,
                                           overwrite=overwrite, overlap=overlap)
        # the aliased pairs decide each kernel's `restrict`: render again when they changed
        # (another order; or overlaps chosen otherwise by the searched placement)
        if ordered is not fused or _in_place_pairs(ordered, plan) != pairs:
            kernels = _render_kernels(ordered, plan, *args)
        final = _in_place_pairs(ordered, plan)
        for k in kernels:
            if k.schedule != "accelerator" and k.in_place != (k.node.name in final):
                raise InternalError(f"{k.node.describe()}: rendered for in_place={k.in_place}, "
                                    "but the memory plan says otherwise")
        return ordered, kernels, plan


def _render_kernels(fused: Graph, plan: MemoryPlan, scheduled: dict[str, Any],
                    overwrite: dict[str, tuple[str, ...]], cache: KernelCache, names: Any,
                    prefix: str, t: Target) -> list[CompiledKernel]:
    """The kernels of ``fused``'s nodes in its order, rendered for the in-place pairs of
    ``plan`` (a plan of that order)."""
    in_place = _in_place_pairs(fused, plan)
    kernels: list[CompiledKernel] = []
    for i, n in enumerate(fused.nodes):
        if "patch" in n.attrs:  # a patch stage: its tile kernels, each restrict
            for node, func, params, how, call in scheduled[n.name]:
                with kiln_fault(node, t):
                    src = cache.render(func, "", True) if cache.rendered(func, True) else \
                        cache.render(func, names.fresh(node.attrs["kernel"],
                                                       prefix=f"{prefix}_"), True)
                kernels.append(CompiledKernel(i, node, src, params, how, call.flops, patch=call))
            continue
        node, func, params, how = scheduled[n.name]
        if isinstance(func, AcceleratorKernel):
            from toolchain.bundle.render import template_env

            src = func.artifact(names.fresh(node.attrs["kernel"], prefix=f"{prefix}_"),
                                template_env())
            kernels.append(CompiledKernel(i, node, src, params, how,
                                          get_op(node.op).flops_of(node)))
            continue
        restrict = _aliased(params, in_place[node.name]) if node.name in in_place else True
        with kiln_fault(node, t):
            if cache.rendered(func, restrict):
                src = cache.render(func, "", restrict)
            else:
                src = cache.render(func, names.fresh(node.attrs["kernel"], prefix=f"{prefix}_"),
                                   restrict)
        kernels.append(CompiledKernel(i, node, src, params, how, get_op(node.op).flops_of(node),
                                      node.name in in_place, overwrite.get(node.name, ())))
    return kernels


def c_type(dtype: str) -> str:
    """The C element type of a graph dtype in a bundle (its API, weights and kernels):
    float16 is ``kiln_f16``, its IEEE binary16 bits (``runtime_c/kiln_runtime.h``)."""
    t = BundleRenderer.type_map.get(dtype)
    if t is None or dtype == "handle":
        raise UnsupportedError(f"dtype {dtype} cannot cross a bundle's C API")
    return t


def weight_array(v: Value) -> np.ndarray:
    """The data of a constant as the C array stores it (C order)."""
    assert v.data is not None
    return np.ascontiguousarray(v.data)


__all__ = ["ALIGNMENT", "LOWERED_IN_PROCESS", "BundleSpec", "CompileProgress", "CompiledKernel",
           "build_spec", "c_type", "comment", "resolve_target", "weight_array"]

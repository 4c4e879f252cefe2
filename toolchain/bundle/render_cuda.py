"""Render a CUDA :class:`~toolchain.bundle.compiler.BundleSpec` (``--target cuda-sm80``).

The bundle has the CPU bundle's C API (``include/<m>.h``: ``<m>_run(&in, &out, arena)``
with host pointers; the arena argument is unused, ``<M>_ARENA_BYTES`` is 0) plus
``<m>_init()`` / ``<m>_release()``. Everything on the device lives in **one workspace**
allocated once by ``<m>_init`` (``<M>_WORKSPACE_BYTES``), laid out by the static memory
plan::

    [ arena (the plan's activations and kernel scratch) | inputs | outputs | weights ]

``<m>_init`` uploads the weights once (from the host copy: the same blob a CPU bundle
links, ``src/weights.bin`` + ``weights_blob.S`` by default, or the caller's with
``--weights external``, :mod:`toolchain.bundle.weights`); ``<m>_run`` copies the inputs
in, launches the kernels in order (each fused kernel is one or more ``__global__`` functions, see
:class:`~toolchain.codegen.backend.CUDABackend`), and copies the outputs back. No
allocation per run.

Files: ``include/<m>.h``, ``src/<m>.cu`` (the host launcher), ``src/kernels.cu`` /
``src/kernels.cuh``, the weights' files of a CPU bundle (``src/weights.bin``,
``src/weights_blob.S`` or ``src/weights.c``, ``src/weights.h``), ``main.c`` (the demo),
``Makefile`` (nvcc), ``CMakeLists.txt`` (CUDA language), ``metadata.json`` (with the
workspace layout).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from toolchain import __version__
from toolchain.bundle.compiler import ALIGNMENT, BundleSpec
from toolchain.bundle.names import bundle_namer
from toolchain.bundle.render import (
    Locations,
    io_tables,
    kernel_calls,
    kernel_preludes,
    metadata,
    output_copies,
    template_env,
    weights_context,
    weights_files,
)
from toolchain.codegen.cstyle import render_helpers
from toolchain.codegen.cuda import CUDARenderer

#: alignment of each region and weight array in the device workspace (bytes)
WS_ALIGN = 256


def _align(n: int, a: int = WS_ALIGN) -> int:
    return -(-n // a) * a


class _DeviceLocations(Locations):
    """Where each tensor lives on the device: an expression over the workspace ``a``."""

    def __init__(self, spec: BundleSpec, inputs: list[dict[str, Any]],
                 outputs: list[dict[str, Any]]) -> None:
        super().__init__(spec, inputs, outputs)
        off = _align(spec.plan.arena_bytes)
        for t in inputs + outputs:  # every input and output its own slot, after the arena
            t["ws_offset"] = off
            off = _align(off + max(t["bytes"], 1))
        self.weights_offset = off
        self.expr = {}
        for v, t in zip(spec.graph.inputs, inputs, strict=True):
            self.expr.setdefault(id(v), f"(void *)(a + {t['ws_offset']})")
        for v, t in zip(spec.fused.outputs, outputs, strict=True):
            # (an output that is a constant lives with the weights, uploaded by init: `of`
            # registers it, and run copies it to the output's slot)
            if id(v) not in self.expr and v.data is None:
                self.expr[id(v)] = f"(void *)(a + {t['ws_offset']})"
        self.by_input = {v.name: self.expr[id(v)] for v in spec.graph.inputs}
        self.model = spec.model

    def of(self, v: Any) -> str:
        if id(v) not in self.expr and v.data is not None:
            super().of(v)  # registers the weight array (its host copy in the blob)
            name = self.weights[-1]["name"]
            self.expr[id(v)] = f"(void *)(a + {self.model.upper()}_WS_{name.upper()})"
        return super().of(v)

    def weight_offsets(self) -> int:
        """Give each weight array its offset; return the workspace size."""
        off = self.weights_offset
        for w in self.weights:
            w["ws_offset"] = off
            off = _align(off + max(w["bytes"], 1))
        return off


def _launches(spec: BundleSpec, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per call that is not elided, its device launches with typed arguments: the tensors'
    places, then one pointer per intermediate buffer into the kernel's scratch."""
    out = []
    for k, call in zip(spec.kernels, calls, strict=True):
        if call["elided"]:
            continue
        src = k.source
        places = call["args"][:len(k.params)]  # (kernel_calls adds the CPU scratch pointer)
        if src.scratch_offsets:
            base = spec.plan.tensor(k.node.name + ":scratch").offset
            places += [f"(void *)(a + {base + o})" for o in src.scratch_offsets]
        args = [f"({t} *){a}" for t, a in zip(src.param_types, places, strict=True)]
        out.append({"index": call["index"], "kernel": src.name, "comment": call["comment"],
                    "ops": [n.op for n in k.node.attrs["graph"].nodes],
                    "shape": [list(v.shape) for v in k.node.outputs],
                    "launches": [{"name": ln["name"], "grid": ln["grid"],
                                  "block": ln["block"], "smem": ln.get("smem", 0),
                                  "args": args, "kind": launch_kind(ln)}
                                 for ln in src.launches]})
    n = 0
    for c in out:  # the profiling build's event index of each launch
        for ln in c["launches"]:
            ln["slot"] = n
            n += 1
    return out


def launch_kind(launch: dict[str, Any]) -> str:
    """What a device kernel is, read from its rendered body: ``wgmma`` (tensor cores
    through Hopper's warpgroup MMA), ``mma`` (through ``mma.sync``), ``wmma`` (through
    ``nvcuda::wmma``), ``tiled`` (shared-memory tiles) or ``simple`` (no shared memory:
    the generic schedule's one thread per output, or an element-wise kernel)."""
    body = "\n".join(launch.get("body") or ())
    if "kiln_wgmma_" in body:
        return "wgmma"
    if "kiln_mma_" in body:
        return "mma"
    if "nvcuda::wmma" in body or "kiln_wmma_" in body:
        return "wmma"
    return "tiled" if "__shared__" in body else "simple"


def launch_table(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``metadata.json``'s ``device.launch_table``: every device launch in order (the
    profiling build's ``<m>_profile_ms`` fills one time per row) with its step (the
    bundle kernel), ops, output shapes, function, grid, block and kind."""
    return [{"step": c["index"], "ops": c["ops"], "shape": c["shape"], "kernel": ln["name"],
             "grid": [str(g) for g in ln["grid"]], "block": [str(b) for b in ln["block"]],
             "kind": ln["kind"]}
            for c in calls for ln in c["launches"]]


#: ``metadata.json``'s ``options.cuda_graph`` where ``--emulate`` came with ``--cuda-graph``
GRAPH_IGNORED = ("ignored: --emulate runs the kernels on the CPU, one launch after another; "
                 "there is no CUDA graph")


def cuda_graph_option(target: Any, emulate: bool) -> bool | str:
    """What ``--cuda-graph`` records in ``metadata.json``'s ``options``: ``True`` for a CUDA
    bundle (its launcher captures the launch sequence into a CUDA graph), the note
    :data:`GRAPH_IGNORED` with ``--emulate`` (a C bundle: the same kernels, no graph; a
    :class:`~toolchain.errors.KilnWarning` says so); a target that is not CUDA is refused.

    >>> from toolchain.target import load_target
    >>> cuda_graph_option(load_target("cuda-sm90"), emulate=False)
    True
    >>> cuda_graph_option(load_target("c-generic"), emulate=False)
    Traceback (most recent call last):
    toolchain.errors.OptionError: --cuda-graph captures a CUDA bundle's kernel launches \
into a CUDA graph; target 'c-generic' has kind 'c' (use --target cuda-sm80 or cuda-sm90)
    """
    import warnings

    from toolchain.errors import KilnWarning, OptionError

    if target.kind != "cuda":
        raise OptionError(f"--cuda-graph captures a CUDA bundle's kernel launches into a CUDA "
                          f"graph; target {target.name!r} has kind {target.kind!r} (use "
                          "--target cuda-sm80 or cuda-sm90)")
    if emulate:
        warnings.warn(KilnWarning(f"--cuda-graph with --emulate: {GRAPH_IGNORED}; the "
                                  "kernels are those the graph would launch"), stacklevel=3)
        return GRAPH_IGNORED
    return True


def render_cuda_files(spec: BundleSpec) -> dict[str, Any]:
    """Every generated file of a CUDA bundle, by relative path (the weights as
    :class:`~toolchain.bundle.render.Streamed` writers)."""
    env = template_env()
    cuda_env = _cuda_env()
    reserved = {f"{spec.model}_{s}" for s in ("run", "inputs", "outputs", "weights", "init",
                                              "release")}
    inputs, outputs = io_tables(spec, bundle_namer(reserved))
    loc = _DeviceLocations(spec, inputs, outputs)
    calls = kernel_calls(spec, loc)
    copies = output_copies(spec, loc, outputs)
    slot = {t["field"]: t["ws_offset"] for t in outputs}
    for c in copies:
        c["dst"] = f"(void *)(a + {slot[c['field']]})"
    workspace = loc.weight_offsets()
    weight_bytes = sum(w["bytes"] for w in loc.weights)
    kernels, seen = [], set()
    for k, c in zip(spec.kernels, calls, strict=True):
        if c["elided"] or id(k.source) in seen:
            continue  # equal fused groups share one set of device functions
        seen.add(id(k.source))
        kernels.append({"index": k.index, "name": k.source.name, "params": k.source.params,
                        "launches": k.source.launches, "comment": c["comment"]})
    includes, preludes = kernel_preludes(spec)
    helpers = render_helpers((h for k in spec.kernels for h in k.source.helpers),
                             CUDARenderer.helper_qualifier)
    arch = spec.target.arch or "sm_80"
    if needs_arch_features(spec.kernels, spec.target):
        arch += "a"  # sm_90a: the architecture-specific features (wgmma) a kernel calls
    ctx = {"version": __version__, "model": spec.model, "MODEL": spec.model.upper(),
           "inputs": inputs, "outputs": outputs, "arena_bytes": 0,
           "device_arena_bytes": spec.plan.arena_bytes, "workspace_bytes": workspace,
           "arena_align": ALIGNMENT, "weight_bytes": weight_bytes, "weights": loc.weights,
           "align": ALIGNMENT, "calls": _launches(spec, calls), "copies": copies,
           "kernels": kernels, "target": spec.target.name, "arch": arch,
           "gencode": arch.replace("sm_", ""), "prelude_includes": includes,
           "preludes": preludes, "helpers": helpers, "cuda": True, "vector_types": [],
           "compiler": None, "arch_flags": "", **weights_context(spec, loc),
           "cuda_graph": spec.options.get("cuda_graph") is True}
    ctx["n_launches"] = sum(len(c["launches"]) for c in ctx["calls"])
    m = spec.model
    files: dict[str, Any] = {
        f"include/{m}.h": env.get_template("model.h.j2").render(ctx),
        f"src/{m}.cu": cuda_env.get_template("model.cu.j2").render(ctx),
        "src/kernels.cuh": cuda_env.get_template("kernels.cuh.j2").render(ctx),
        "src/kernels.cu": cuda_env.get_template("kernels.cu.j2").render(ctx),
        **weights_files(env, ctx, loc.blob),
        "main.c": env.get_template("main.c.j2").render(ctx),
        "Makefile": cuda_env.get_template("Makefile.j2").render(ctx),
        "CMakeLists.txt": cuda_env.get_template("CMakeLists.txt.j2").render(ctx),
    }
    meta = metadata(spec, inputs, outputs, loc, weight_bytes, ctx)
    meta["arena_bytes"] = 0
    meta["device"] = {
        "workspace_bytes": workspace, "arena_bytes": spec.plan.arena_bytes,
        "align": WS_ALIGN,
        "inputs": {t["field"]: t["ws_offset"] for t in inputs},
        "outputs": {t["field"]: t["ws_offset"] for t in outputs},
        "weights": {w["name"]: w["ws_offset"] for w in loc.weights},
        "launches": ctx["n_launches"],
        "launch_table": launch_table(ctx["calls"]),
    }
    meta["target"]["cflags"] = [f"-arch={arch}"]
    for entry, call in zip(meta["kernels"], calls, strict=True):
        entry["elided"] = call["elided"]
    files["metadata.json"] = json.dumps(meta, indent=2) + "\n"
    return files


def needs_arch_features(kernels: Any, target: Any) -> bool:
    """Whether a kernel of ``kernels`` calls an intrinsic that needs the architecture-
    specific feature set (``arch_features: true`` in ``target``'s descriptor: ``wgmma``):
    the bundle is then built for ``<arch>a`` (``sm_90a``), every other bundle as before."""
    return calls_arch_features((k.source.support for k in kernels), target)


def calls_arch_features(supports: Iterable[Any], target: Any) -> bool:
    """Whether code with these support sets (a kernel artifact's ``support``: the
    definitions its body calls) calls an intrinsic of ``target`` that needs the
    architecture-specific feature set; what :func:`needs_arch_features` asks of a bundle's
    kernels and the tuner's builder of one trial's kernel."""
    from toolchain.intrinsics import intrinsic_of_function, load_intrinsics

    if not any(s.get("arch_features") for s in target.intrinsics.values()):
        return False
    load_intrinsics(target)
    for support in supports:
        for d in support.definitions:
            spec = intrinsic_of_function(d.key)
            if spec is not None and spec.arch_features:
                return True
    return False


@functools.cache
def _cuda_env() -> Any:
    """:func:`~toolchain.bundle.render.template_env` overlaid with ``templates/bundle_cuda``
    first, made once: a fresh overlay compiled its five templates again for every CUDA
    bundle (some 30 ms of each compile)."""
    import jinja2

    from toolchain.bundle.render import TEMPLATES

    return template_env().overlay(loader=jinja2.ChoiceLoader(
        [jinja2.FileSystemLoader(str(TEMPLATES.parent / "bundle_cuda")),
         jinja2.FileSystemLoader(str(TEMPLATES))]))


__all__ = ["GRAPH_IGNORED", "WS_ALIGN", "calls_arch_features", "cuda_graph_option",
           "launch_kind", "launch_table", "needs_arch_features", "render_cuda_files"]

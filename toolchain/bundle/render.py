"""Render a :class:`~toolchain.bundle.compiler.BundleSpec` into a bundle directory.

Every text file comes from ``templates/bundle/*.j2``; the runtime is copied from
``runtime_c/``.  The bundle is written into a temporary directory next to the destination
and moved into place with :func:`os.replace` at the very end, so a failed compile leaves
nothing behind (and an existing bundle is only replaced by a complete one).

Layout (``<m>`` is the model's C prefix)::

    include/<m>.h    the API: sizes as macros, <m>_inputs / <m>_outputs, <m>_run()
    src/<m>.c        the call sequence with arena offsets
    src/kernels.c    the kernels; src/kernels.h their prototypes
    src/weights.bin  the constants: one blob, each array 64-byte aligned (--weights incbin,
                     the default, and external: docs/bundle.md "Weights")
    src/weights_blob.S  incbin: links weights.bin into the library (.incbin)
    src/weights.c    c-array: the blob as C string literals; external: <m>_set_weights()
    src/weights.h    where the blob is (<M>_WEIGHTS_DATA) and each array's offset
    runtime/         kiln_runtime.h / .c (error codes, alignment, timing hooks)
    main.c           a demo program (raw binary files in and out, --repeat N timing)
    Makefile, CMakeLists.txt, metadata.json
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from toolchain import __version__
from toolchain.bundle import weights as weights_mod
from toolchain.bundle.compiler import (
    ALIGNMENT,
    BundleSpec,
    c_type,
    schedule_fields,
    weight_array,
)
from toolchain.bundle.emit import RUNTIME_HEADER, BundleRenderer
from toolchain.bundle.names import bundle_namer, comment
from toolchain.bundle.patching import origin_tables
from toolchain.bundle.weights import WeightsBlob, format_bytes
from toolchain.codegen.artifact import KernelArtifact, merge_support
from toolchain.codegen.cstyle import render_helpers
from toolchain.codegen.names import Namer
from toolchain.errors import OptionError
from toolchain.graph.ir import Value
from toolchain.graph.ops.registry import get_op
from toolchain.runtime.build import LOOP_FLAGS
from toolchain.target import DEFAULT_LIBC, HOST_COMPILERS, LIBC_FLAGS, bare_metal
from toolchain.tir.ir import bits_of

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATES = ROOT / "templates" / "bundle"
RUNTIME = ROOT / "runtime_c"


@functools.cache
def template_env() -> jinja2.Environment:
    """The jinja2 environment of ``templates/bundle`` (strict: a missing value is an error;
    made once, so its compiled templates are reused by every bundle)."""
    loader = jinja2.FileSystemLoader(str(TEMPLATES))
    return jinja2.Environment(loader=loader, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


def io_tables(spec: BundleSpec, names: Namer
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The template rows of the graph's inputs and outputs (C field, type, sizes, macro)."""
    up = spec.model.upper()
    out: dict[str, list[dict[str, Any]]] = {"input": [], "output": []}
    for kind, values in (("input", spec.graph.inputs), ("output", spec.graph.outputs)):
        for v in values:
            field = names.fresh(v.name)
            out[kind].append({
                "kind": kind, "name": v.name, "field": field, "ctype": c_type(v.dtype),
                "dtype": v.dtype, "shape": list(v.shape), "count": v.size, "bytes": v.nbytes,
                "macro": f"{up}_{kind.upper()}_{field.upper()}",
                "comment": comment(f"{v.name} {v.dtype}{list(v.shape)}"),
            })
    return out["input"], out["output"]


class Locations:
    """Where each tensor lives, as a C expression in ``<m>_run``."""

    def __init__(self, spec: BundleSpec, inputs: list[dict[str, Any]],
                 outputs: list[dict[str, Any]]) -> None:
        self.spec = spec
        self.expr: dict[int, str] = {}
        for v, t in zip(spec.graph.inputs, inputs, strict=True):
            self.expr.setdefault(id(v), f"(const void *)inputs->{t['field']}")
        for v, t in zip(spec.fused.outputs, outputs, strict=True):
            # an input that is also an output stays an input; a constant output stays in
            # the weights (no kernel writes it: ``output_copies`` copies it out). The fused
            # graph's outputs: the passes may have folded one into a constant
            if id(v) not in self.expr and v.data is None:
                self.expr[id(v)] = f"(void *)outputs->{t['field']}"
        self.weights: list[dict[str, Any]] = []
        #: weights by (tensor, dtype, shape): a weight packed at compile time by several
        #: kernels (an unrolled LSTM's recurrence weights) is stored once
        self.stored: dict[tuple[str, str, tuple[int, ...]], list[tuple[Any, str]]] = {}
        self.names = bundle_namer()
        #: every weight array at its offset (``src/weights.bin``)
        self.blob = WeightsBlob(ALIGNMENT)
        #: views of a graph input (memory plan ``views``) are that input's pointer
        self.by_input = {v.name: self.expr[id(v)] for v in spec.graph.inputs}

    def of(self, v: Value) -> str:
        if id(v) in self.expr:
            return self.expr[id(v)]
        if v.data is not None:
            arr = weight_array(v)
            same = self.stored.setdefault((v.name, v.dtype, tuple(v.shape)), [])
            for prev, expr in same:
                if prev.dtype == arr.dtype and np.array_equal(prev, arr):
                    self.expr[id(v)] = expr
                    return expr
            name = self.names.fresh(v.name, prefix="w_")
            offset = self.blob.add(arr)
            self.weights.append({
                "name": name, "tensor": v.name, "ctype": c_type(v.dtype),
                "count": max(arr.size, 1), "dtype": v.dtype, "offset": offset,
                "shape": list(v.shape), "bytes": arr.nbytes,
                "comment": comment(f"{v.name} {v.dtype}{list(v.shape)}"),
            })
            self.expr[id(v)] = f"(const void *)({self.spec.model.upper()}_WEIGHTS_DATA + {offset})"
            same.append((arr, self.expr[id(v)]))
            return self.expr[id(v)]
        if v.name in self.spec.plan.views:
            return self.by_input[self.spec.plan.views[v.name]]
        if v.size == 0:  # an empty tensor has no bytes (and must not alias another's)
            return "NULL"
        return f"(void *)(a + {self.spec.plan.tensor(v.name).offset})"


#: a kernel runs on the thread pool only with at least this much work (FLOPs, or bytes it
#: reads and writes): waking the pool and the barriers cost microseconds, a few kFLOPs less
MIN_PARALLEL_FLOPS = 1_000_000
MIN_PARALLEL_BYTES = 1 << 20


def worth_threads(k: Any) -> bool:
    """Whether kernel ``k`` (rendered SPMD) is big enough to split across threads: below
    :data:`MIN_PARALLEL_FLOPS` and :data:`MIN_PARALLEL_BYTES` the pool's wake-up and
    barriers would cost more than the split saves, and it runs whole on the caller's
    thread (``kiln_thread`` 0 of 1).

    >>> from types import SimpleNamespace as K
    >>> worth_threads(K(flops=5_000_000, params=[])), worth_threads(K(flops=10, params=[]))
    (True, False)
    """
    return k.flops >= MIN_PARALLEL_FLOPS or \
        sum(v.nbytes for v in k.params) >= MIN_PARALLEL_BYTES


def kernel_calls(spec: BundleSpec, loc: Locations) -> list[dict[str, Any]]:
    """One entry per kernel; ``elided`` when the kernel is only a reshape whose output the
    plan puts in place over its input or makes a view of a graph input (the bytes are
    already where they must be)."""
    calls = []
    for k in spec.kernels:
        if k.patch is not None:
            calls.append(_patch_call(spec, loc, k))
            continue
        args = [loc.of(v) for v in k.params]
        if k.source.scratch_bytes:
            args.append(f"a + {spec.plan.tensor(k.node.name + ':scratch').offset}")
        inner = k.node.attrs["graph"].nodes
        ops = " ".join(n.op for n in inner)
        data = [i for i, v in enumerate(k.params[:-1]) if v.data is None]  # not shapes
        elided = (all(get_op(n.op).view for n in inner) and len(data) == 1
                  and args[data[0]] == args[len(k.params) - 1]
                  and k.params[data[0]].nbytes == k.params[-1].nbytes)
        view = spec.plan.views.get(k.params[-1].name) if elided else None
        threaded = k.source.threaded and not elided and worth_threads(k)
        if k.source.threaded and not threaded:  # an SPMD kernel run whole on this thread
            args = [*args, "0", "1"]
        calls.append({"index": k.index, "kernel": k.source.name, "args": args,
                      "error": "KILN_ERR_ACCELERATOR" if k.schedule == "accelerator"
                      else "KILN_ERR_KERNEL",
                      "elided": elided, "threaded": threaded, "patch": None,
                      "how": comment(f"a view of input {view}") if view else "in place",
                      "comment": comment(f"{ops} ({k.node.attrs['pattern']}), "
                                         f"{k.flops:,} FLOPs")})
    return calls


def _patch_call(spec: BundleSpec, loc: Locations, k: Any) -> dict[str, Any]:
    """The call of a patch stage's tile kernel, in its stage's tile loop
    (:mod:`toolchain.bundle.patching`)."""
    from toolchain.bundle.patching import loop_context, tile_args

    stage = k.patch.stage
    base = f"a + {spec.plan.tensor(stage.name + ':scratch').offset}"
    tiles = tile_args(k.patch, base, ALIGNMENT)
    args = [tiles.get(id(v)) or loc.of(v) for v in k.params]
    if k.source.scratch_bytes:
        args.append(tiles[0])
    if k.source.threaded:  # run whole on this thread: tiles are small
        args = [*args, "0", "1"]
    node = spec.fused.node(stage.name)
    x, y = node.inputs[0], node.outputs[0]
    assert x is not None
    ops = " ".join(n.op for n in k.node.attrs["graph"].nodes)
    return {"index": k.index, "kernel": k.source.name, "args": args,
            "error": "KILN_ERR_KERNEL", "elided": False, "threaded": False,
            "how": "", "comment": comment(f"{ops} ({k.node.attrs['pattern']}) on a tile, "
                                          f"{k.flops:,} FLOPs over the tiles"),
            "patch": loop_context(k.patch, spec.model, loc.of(x), loc.of(y), base, ALIGNMENT)}


def patch_stages(spec: BundleSpec) -> list[Any]:
    """The patch stages of ``spec``'s kernels, in call order."""
    out: list[Any] = []
    for k in spec.kernels:
        if k.patch is not None and k.patch.index == 0:
            out.append(k.patch)
    return out


def kernel_functions(spec: BundleSpec, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The C functions of ``kernels.c``: one per distinct kernel source that some call that
    is not elided uses (equal fused groups share one function, see ``KernelCache``)."""
    out: list[dict[str, Any]] = []
    by_source: dict[int, dict[str, Any]] = {}
    for k, call in zip(spec.kernels, calls, strict=True):
        if call["elided"]:
            continue
        entry = by_source.get(id(k.source))
        if entry is not None:
            entry["comment"] += f"; also kernel {k.index}"
            continue
        entry = {"index": k.index, "name": k.source.name, "params": k.source.params,
                 "body": k.source.body, "comment": call["comment"],
                 "object": f"src/kernels/{k.source.name}.o" if k.source.object_code else None}
        by_source[id(k.source)] = entry
        out.append(entry)
    return out


def output_copies(spec: BundleSpec, loc: Locations, outputs: list[dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """Outputs no kernel writes: graph inputs, constants, or a value listed twice."""
    produced = {id(v) for n in spec.fused.nodes for v in n.outputs}
    seen: set[int] = set()
    copies = []
    for v, t in zip(spec.fused.outputs, outputs, strict=True):
        first = id(v) not in seen
        seen.add(id(v))
        if first and id(v) in produced:
            continue
        src = loc.of(v)
        if src == f"(void *)outputs->{t['field']}" or v.nbytes == 0:
            continue
        what = ("a graph input" if v in spec.graph.inputs else
                "a constant" if v.data is not None else "another output")
        copies.append({"field": t["field"], "src": src, "bytes": v.nbytes, "what": what})
    return copies


def _vector_types(spec: BundleSpec) -> list[dict[str, Any]]:
    return vector_types_of(k.source for k in spec.kernels)


def vector_types_of(sources: Iterable[KernelArtifact]) -> list[dict[str, Any]]:
    """The vector typedefs ``kernels.c`` declares for ``sources``, each once, by name."""
    seen: dict[str, tuple[str, int]] = {}
    for src in sources:
        seen.update(src.vector_types)
    out = []
    for name, (elem, lanes) in sorted(seen.items()):
        ct = c_type(elem)
        size = max(bits_of(elem) // 8, 1)
        out.append({"name": name, "elem": ct, "lanes": lanes, "elem_bytes": size,
                     "bytes": size * lanes})
    return out


def kernel_preludes(spec: BundleSpec) -> tuple[list[str], list[str]]:
    """(``#include`` lines, definitions) every kernel's typed support asks for, each once
    (headers by name, definitions by key), in first-use order."""
    support = merge_support(k.source.support for k in spec.kernels)
    return [f"#include <{h}>" for h in support.headers], [d.text for d in support.definitions]


def helper_definitions(spec: BundleSpec) -> str:
    """C definitions of the helper functions the kernels call (``kiln_max_bool``, ...),
    each once, sorted by name ("" when none is called)."""
    return render_helpers((h for k in spec.kernels for h in k.source.helpers),
                          BundleRenderer.helper_qualifier)


def kernel_file(art: KernelArtifact, comment_text: str) -> str:
    """``kernels.c`` holding the one kernel ``art`` and what it needs (its support's
    headers and definitions, helpers, vector types), without the bundle's ``kernels.h``:
    the tuner's build of a trial (:mod:`toolchain.autotune.bundle_build`) compiles the C a
    bundle would."""
    support = art.support
    return template_env().get_template("kernels.c.j2").render({
        "version": __version__, "model": art.name, "kernels_header": False,
        "prelude_includes": [f"#include <{h}>" for h in support.headers],
        "preludes": [d.text for d in support.definitions],
        "helpers": render_helpers(art.helpers, BundleRenderer.helper_qualifier),
        "vector_types": vector_types_of([art]),
        "kernels": [{"index": 0, "name": art.name, "params": art.params, "body": art.body,
                     "comment": comment_text, "object": None}]})


def build_flags(spec: BundleSpec) -> list[str]:
    """Flags beyond ``-O3 -std=c99`` the kernels need: the target's ``-march`` and
    ``cflags`` (optimisation levels left to the Makefile), and the intrinsics' flags."""
    if spec.target.kind != "c":
        return []  # a GPU target's kernels emulated in C: portable code for this host
    return kernel_flags(spec.target, [k.source for k in spec.kernels])


def kernel_flags(target: Any, sources: Iterable[KernelArtifact]) -> list[str]:
    """The target's ``-march`` and ``cflags`` (optimisation levels left out), then the
    flags ``sources``' intrinsics need, each once."""
    flags = [f"-march={target.arch}"] if target.arch else []
    flags += [f for f in target.cflags if not f.startswith("-O") and f not in flags]
    for src in sources:
        flags += [f for f in src.flags if f not in flags]
    return flags


def default_threads(spec: BundleSpec, calls: list[dict[str, Any]]) -> str:
    """The Makefile's and CMake's default thread library: ``pthread`` for a bundle with
    threaded kernels built by the host's compiler; ``none`` otherwise (a single-threaded
    bundle, or a target with its own cross compiler, a board: no POSIX threads there;
    ``make THREADS=...`` chooses another)."""
    hosted = spec.target.compiler in HOST_COMPILERS
    return "pthread" if hosted and any(c["threaded"] for c in calls) else "none"


def max_threads(spec: BundleSpec) -> int:
    """Threads the bundle's parallel kernels may use: the target's ``cores``."""
    return max(spec.target.cores or 1, 1)


@dataclass(frozen=True, eq=False)
class Streamed:
    """A generated file too large to hold as one string: ``pieces()`` yields it piece by
    piece (bytes, or text written as UTF-8), for :meth:`write` (which
    :func:`write_bundle` calls in the staging directory) and :meth:`digest`; two are equal
    when their contents are.

    Example::

        >>> import tempfile, pathlib
        >>> f = Streamed(lambda: iter([b"\\x01", "A"]))
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> f.write(d / "w.bin")
        >>> (d / "w.bin").read_bytes(), f == Streamed(lambda: iter([b"\\x01A"]))
        (b'\\x01A', True)
    """

    pieces: Callable[[], Iterable[bytes | memoryview | str]]

    def write(self, path: Path) -> None:
        """Write the file at ``path``, a piece at a time."""
        with open(path, "wb") as f:
            for piece in self.pieces():
                f.write(piece.encode("utf-8") if isinstance(piece, str) else piece)

    def digest(self) -> str:
        """SHA-256 of the contents (read piece by piece)."""
        h = hashlib.sha256()
        for piece in self.pieces():
            h.update(piece.encode("utf-8") if isinstance(piece, str) else piece)
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Streamed) and self.digest() == other.digest()

    __hash__ = None  # type: ignore[assignment]


def weights_context(spec: BundleSpec, loc: Locations) -> dict[str, Any]:
    """The templates' values for the weights: their storage mode (``--weights``, ``auto``
    resolved by the blob's size), the blob's size, CRC-32 and alignment."""
    blob = loc.blob
    mode = weights_mod.resolve_mode(spec.options.get("weights"), blob.size)
    return {"weights_mode": mode, "blob_bytes": blob.size, "blob_crc32": blob.crc32(),
            "weights_align": ALIGNMENT}


def _c_array_pieces(env: jinja2.Environment, ctx: dict[str, Any], blob: WeightsBlob
                    ) -> Callable[[], Iterator[str]]:
    """The c-array ``weights.c`` as text pieces: one array's literals formatted at a
    time (:func:`format_bytes`), never the whole file."""
    def pieces() -> Iterator[str]:
        sizes = [min(weights_mod.CHUNK, len(p) - s) for p in blob.c_pieces()
                 for s in range(0, len(p), weights_mod.CHUNK)]
        texts = (format_bytes(p)[1].rstrip("\n") for p in blob.c_pieces())
        yield from env.get_template("weights.c.j2").generate(
            {**ctx, "chunk_sizes": sizes, "texts": texts})
    return pieces


def weights_files(env: jinja2.Environment, ctx: dict[str, Any], blob: WeightsBlob
                  ) -> dict[str, Any]:
    """The weights' files for ``ctx["weights_mode"]``: ``src/weights.h`` and the blob as
    ``weights.bin`` + ``weights_blob.S`` (incbin), ``weights.c`` (c-array), or
    ``weights.bin`` + ``weights.c`` with ``<m>_set_weights`` (external). The blob's bytes
    are written when the bundle is (:class:`Streamed`), never held as one string."""
    mode = ctx["weights_mode"]
    files: dict[str, Any] = {"src/weights.h": env.get_template("weights.h.j2").render(ctx)}
    if mode == "c-array":
        files["src/weights.c"] = Streamed(_c_array_pieces(env, ctx, blob))
        return files
    files["src/weights.bin"] = Streamed(blob.chunks)
    if mode == "incbin":
        files["src/weights_blob.S"] = env.get_template("weights_blob.S.j2").render(ctx)
    else:
        files["src/weights.c"] = env.get_template("weights_external.c.j2").render(ctx)
    return files


def render_files(spec: BundleSpec) -> dict[str, Any]:
    """Every generated file of the bundle, by relative path (text; the LLVM backend's
    kernel objects as bytes; the weights as :class:`Streamed` writers)."""
    env = template_env()
    reserved = {f"{spec.model}_{s}" for s in ("run", "inputs", "outputs", "weights")}
    inputs, outputs = io_tables(spec, bundle_namer(reserved))
    loc = Locations(spec, inputs, outputs)
    calls = kernel_calls(spec, loc)
    copies = output_copies(spec, loc, outputs)
    weight_bytes = sum(w["bytes"] for w in loc.weights)
    kernels = kernel_functions(spec, calls)
    includes, preludes = kernel_preludes(spec)
    # kernels.h declares kernels with kiln_f16 pointers: the runtime header first
    runtime_first = RUNTIME_HEADER in merge_support(k.source.support for k in spec.kernels
                                                    ).headers
    flags = build_flags(spec)
    ctx = {"version": __version__, "model": spec.model, "MODEL": spec.model.upper(),
           "inputs": inputs, "outputs": outputs, "arena_bytes": spec.plan.arena_bytes,
           "arena_align": ALIGNMENT, "weight_bytes": weight_bytes, "weights": loc.weights,
           "align": ALIGNMENT, "calls": calls, "copies": copies, "kernels": kernels,
           "vector_types": _vector_types(spec), "kernels_header": True,
           "target": spec.target.name, "arch_flags": "".join(f" {f}" for f in flags),
           "loop_flags": " ".join(LOOP_FLAGS),  # off where the compiler takes them
           "compiler": spec.target.compiler, "prelude_includes": includes,
           # no OS to link the demo against: make builds the library alone
           "bare_metal": bare_metal(spec.target.compiler),
           # ... and the C library's flags, without which `make` finds no <math.h>
           "libc_flags": " ".join(LIBC_FLAGS[DEFAULT_LIBC])
           if bare_metal(spec.target.compiler) else "",
           "helpers": helper_definitions(spec), "kernels_need_runtime": runtime_first,
           "preludes": preludes, "max_threads": max_threads(spec),
           "threaded": any(c["threaded"] for c in calls),
           "default_threads": default_threads(spec, calls),
           "patch_stages": origin_tables([p.stage for p in patch_stages(spec)]),
           "kernel_objects": [k["object"] for k in kernels if k["object"]],
           # the driver only where some layer runs on the accelerator
           "accelerator": spec.accelerator is not None and bool(accelerator_layers(spec)),
           **weights_context(spec, loc)}
    accel_files = accelerator_files(env, spec, ctx) if ctx["accelerator"] else {}
    # make DEVICE=rtl: the RTL sources the bundle carries (none: the fsim only)
    ctx["rtl_sources"] = [f for f in accel_files if f.startswith("rtl/") and
                          f.endswith(".sv")]   # in compile order: the package first
    ctx["rtl"] = bool(ctx["rtl_sources"])
    m = spec.model
    files: dict[str, Any] = {
        f"include/{m}.h": env.get_template("model.h.j2").render(ctx),
        f"src/{m}.c": env.get_template("model.c.j2").render(ctx),
        "src/kernels.h": env.get_template("kernels.h.j2").render(ctx),
        "src/kernels.c": env.get_template("kernels.c.j2").render(ctx),
        **weights_files(env, ctx, loc.blob),
        "main.c": env.get_template("main.c.j2").render(ctx),
        "Makefile": env.get_template("Makefile.j2").render(ctx),
        "CMakeLists.txt": env.get_template("CMakeLists.txt.j2").render(ctx),
    }
    files.update(accel_files)
    meta = metadata(spec, inputs, outputs, loc, weight_bytes, ctx)
    meta["target"]["cflags"] = flags
    for entry, call in zip(meta["kernels"], calls, strict=True):
        entry["elided"] = call["elided"]
        entry["threaded"] = call["threaded"]
    meta["max_threads"] = ctx["max_threads"]
    if ctx["kernel_objects"]:
        meta["kernel_objects"] = ctx["kernel_objects"]
        for k in spec.kernels:  # LLVM: the object code, and its IR to read
            if k.source.object_code:
                files[f"src/kernels/{k.source.name}.o"] = k.source.object_code
                files[f"src/kernels/{k.source.name}.ll"] = k.source.llvm_ir
    files["metadata.json"] = json.dumps(meta, indent=2) + "\n"
    return files


def accelerator_layers(spec: BundleSpec) -> list[dict[str, Any]]:
    """The accelerator kernels of ``spec`` in call order: node, kernel, tiles, sizes."""
    out: list[dict[str, Any]] = []
    for k in spec.kernels:
        if k.schedule != "accelerator":
            continue
        vta = k.node.attrs["graph"].nodes[0]
        layer = spec.accelerator.partition.layers[vta.name]  # type: ignore[union-attr]
        out.append({"node": vta.name, "kernel": k.source.name, "op": vta.op,
                    "tiles": str(layer.tiles), "instructions": len(layer.program.insns),
                    "planes": layer.planes,
                    "epilogue": "accelerator" if layer.requant is not None else "host",
                    "window_bytes": k.source.scratch_bytes,
                    "window_offset": spec.plan.tensor(k.node.name + ":scratch").offset})
    return out


def accelerator_files(env: jinja2.Environment, spec: BundleSpec, ctx: dict[str, Any]
                      ) -> dict[str, str]:
    """An accelerator bundle's extra files: the driver glue (``src/kiln_vta_bundle.*``)
    and the driver and simulator sources in ``runtime/``."""
    from toolchain.bundle.accel import RUNTIME_FILES, glue_context, rtl_files
    from toolchain.vta.config import config_from_target

    assert spec.accelerator is not None
    layers = [x["node"] for x in accelerator_layers(spec)]
    gctx = {**ctx, "target": spec.accelerator.target.name,
            **glue_context(config_from_target(spec.accelerator.target), layers)}
    files = {"src/kiln_vta_bundle.h": env.get_template("vta_bundle.h.j2").render(gctx),
             "src/kiln_vta_bundle.c": env.get_template("vta_bundle.c.j2").render(gctx)}
    for name in RUNTIME_FILES:
        files[f"runtime/{name}"] = (RUNTIME / name).read_text()
    files.update(rtl_files(config_from_target(spec.accelerator.target)))
    return files


def accelerator_metadata(spec: BundleSpec) -> dict[str, Any]:
    """``metadata.json``'s ``accelerator``: its target, the default device, where each node
    of the graph runs and why, and the accelerator layers."""
    assert spec.accelerator is not None and spec.accelerator.partition is not None
    from toolchain.bundle.accel import rtl_files
    from toolchain.vta.config import config_from_target

    t = spec.accelerator.target
    cfg = config_from_target(t)
    return {"target": t.name, "kind": t.kind, "host_target": spec.target.name,
            "config": {"batch": cfg.batch, "block_in": cfg.block_in,
                       "block_out": cfg.block_out, "latency_cycles": cfg.latency_cycles,
                       "bytes_per_cycle": cfg.bytes_per_cycle,
                       "bus_bytes": cfg.bus_width_bits // 8},
            "device": "fsim", "devices": ["fsim", "rtl"] if rtl_files(cfg) else ["fsim"],
            "placements": [p.to_dict() for p in spec.accelerator.partition.placements],
            "layers": accelerator_layers(spec)}


def metadata(spec: BundleSpec, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
             loc: Locations, weight_bytes: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """``metadata.json`` of a bundle (``ctx``: the templates' context, for the weights'
    storage)."""
    keep = ("name", "field", "dtype", "shape", "bytes")
    t = spec.target
    return {
        "format": "kiln-bundle/1",
        "kiln_version": __version__,
        "model": {"name": spec.model, "graph": spec.graph.name, **spec.source},
        "target": {"name": t.name, "kind": t.kind, "arch": t.arch,
                   "vector_width_bits": t.vector_width_bits, "layout": spec.layout,
                   "compiler": t.compiler, "cpu_flags": list(t.cpu_flags)},
        "options": spec.options,
        "inputs": [{k: x[k] for k in keep} for x in inputs],
        "outputs": [{k: x[k] for k in keep} for x in outputs],
        "arena_bytes": spec.plan.arena_bytes,
        "arena_align": ALIGNMENT,
        "weight_bytes": weight_bytes,
        "nodes_before_fusion": len(spec.graph.nodes),
        "kernel_count": len(spec.kernels),
        "total_flops": sum(k.flops for k in spec.kernels),
        "kernels": [{
            "index": k.index, "name": k.source.name, "kernel": k.node.attrs["kernel"],
            "pattern": k.node.attrs["pattern"],
            "ops": [n.op for n in k.node.attrs["graph"].nodes], "flops": k.flops,
            "scratch_bytes": k.source.scratch_bytes, "in_place": k.in_place,
            **schedule_fields(k.schedule), "inputs": [v.name for v in k.params[:len(k.params) - len(
                k.node.outputs)]], "outputs": [v.name for v in k.node.outputs],
        } for k in spec.kernels],
        "weights": [{k: w[k] for k in ("name", "tensor", "dtype", "shape", "bytes",
                                       "offset")} for w in loc.weights],
        "weights_storage": {
            "mode": ctx["weights_mode"],
            "file": None if ctx["weights_mode"] == "c-array" else "src/weights.bin",
            "bytes": ctx["blob_bytes"], "align": ALIGNMENT,
            "crc32": f"0x{ctx['blob_crc32']:08x}"},
        "memory_plan": spec.plan.to_dict(),
        **({"patch_stages": [{**p.stage.to_dict(), "arena_without": p.arena_without}
                             for p in patch_stages(spec)]} if patch_stages(spec) else {}),
        **({"accelerator": accelerator_metadata(spec)} if spec.accelerator is not None else {}),
    }


# ----------------------------------------------------------------------------- writing
def _nearest_existing(path: Path) -> Path:
    p = path.parent
    while not p.exists():
        p = p.parent
    return p


def check_destination(out: Path, force: bool) -> None:
    """Refuse an existing destination unless ``force`` (and then only a Kiln bundle or an
    empty folder is replaced)."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise OptionError(f"output {out} exists and is not a directory; choose another -o")
    if not force:
        raise OptionError(f"output directory {out} already exists; pass --force to replace it "
                          "(or choose another -o)")
    if any(out.iterdir()) and not (out / "metadata.json").is_file():
        raise OptionError(f"output directory {out} exists and is not a Kiln bundle (no "
                          "metadata.json); refusing to replace it even with --force")


#: characters encoded and written at a time (a large kernels.c)
_WRITE_SLICE = 1 << 24


def _write_text(path: Path, text: str | bytes | Streamed) -> None:
    """Write ``text`` as UTF-8 with ``\\n`` line ends, a slice at a time (no full-size
    encoded copy of a large file in memory); bytes (object code) as they are; a
    :class:`Streamed` file by its own writer."""
    if isinstance(text, Streamed):
        text.write(path)
        return
    if isinstance(text, bytes):
        path.write_bytes(text)
        return
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in range(0, len(text), _WRITE_SLICE):
            f.write(text[s:s + _WRITE_SLICE])


def write_bundle(files: dict[str, Any], out: str | Path, force: bool = False) -> Path:
    """Write ``files`` and a copy of the runtime to ``out`` atomically; return ``out``."""
    out = Path(out).absolute()
    check_destination(out, force)
    base = _nearest_existing(out)
    if not base.is_dir():
        raise OptionError(f"cannot create {out}: {base} is a file, not a directory")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.kiln-", dir=base))
    os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a bundle is an ordinary folder
    try:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_text(path, text)
        # the accelerator's driver and simulator (kiln_vta*) are not part of a CPU bundle
        # (an accelerator bundle's files list them: see accelerator_files)
        shutil.copytree(RUNTIME, tmp / "runtime", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.o", "kiln_vta*"))
        install_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def install_dir(tmp: Path, out: Path) -> None:
    """Move the finished directory ``tmp`` to ``out`` (replacing what is there, already
    checked by :func:`check_destination`): the last step of every atomic write, so a failed
    command never leaves a half-written ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / "bundle")
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_dir(out: Path) -> Path:
    """A fresh temporary directory beside ``out`` (same file system: ``install_dir`` is a
    rename), for work that must finish before ``out`` is replaced."""
    base = _nearest_existing(out)
    if not base.is_dir():
        raise OptionError(f"cannot create {out}: {base} is a file, not a directory")
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.kiln-stage-", dir=base))

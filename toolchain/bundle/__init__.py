"""The self-contained C bundle: ``kiln compile`` writes one, ``kiln run DIR`` runs one.

* :func:`compile_model` — ONNX model + target -> bundle directory (see
  :mod:`toolchain.bundle.compiler` for the flow, :mod:`toolchain.bundle.render` for the
  layout);
* :class:`~toolchain.bundle.host.BundleModule` — build a bundle on the host and call it
  from Python (ctypes).

Example::

    >>> from toolchain.bundle import compile_model, load_bundle        # doctest: +SKIP
    >>> compile_model("model.onnx", "c-generic", "build/model")        # doctest: +SKIP
    >>> outputs = load_bundle("build/model")({"input": x})             # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.bundle.compiler import BundleSpec, build_spec
from toolchain.bundle.progress import CompileProgress
from toolchain.bundle.render import check_destination, render_files, write_bundle
from toolchain.bundle.render_cuda import render_cuda_files
from toolchain.gcpause import paused_gc


def compile_model(model: Any, target: Any = "c-generic", output: str | Path = "bundle", *,
                  input_shapes: dict[str, tuple[int, ...]] | None = None,
                  name: str | None = None, dump_ir: str | Path | None = None,
                  force: bool = False, progress: bool | None = None,
                  emulate: bool = False, backend: str | None = None,
                  weights: str | None = None, skip_passes: tuple[str, ...] = (),
                  ram_budget: int | None = None, patch: Any = None,
                  precision: str = "fp32", cuda_graph: bool = False) -> Path:
    """Compile ``model`` (a path, bytes or ModelProto) for ``target`` into the bundle
    directory ``output`` (written atomically); returns its path. ``emulate`` (GPU targets):
    a C bundle whose kernels are the GPU kernels' own code run thread by thread on the CPU
    (:class:`~toolchain.codegen.backend.SimtCBackend`), to check them without a GPU.
    ``backend="llvm"``: the kernels as object files for the target's triple
    (``src/kernels/*.o``, ``docs/llvm.md``) next to the same C runtime, model and weights.
    ``weights``: how the weights are stored, one of
    :data:`~toolchain.bundle.weights.MODES` (None: ``auto``, i.e. ``incbin`` up to 2 GiB,
    ``external`` above; docs/bundle.md). ``skip_passes``: graph passes of
    :data:`~toolchain.graph.passes.DEFAULT_PASSES` left out (``("fuse_attention",)``: the
    attention pattern stays separate kernels, for comparisons). ``ram_budget``: the most
    arena bytes; the first layers run in patches where the plain plan needs more
    (docs/embedded.md, "Patch-based inference"); ``patch``: a stage chosen by hand,
    ``(first node, layers, (rows, columns))``. ``precision="fp16"``:
    float16 tensors and weights inside the bundle, float32 at its API, float32 sums
    (:mod:`toolchain.graph.passes.precision`; tensor cores on CUDA: docs/cuda.md).
    ``cuda_graph`` (CUDA targets): ``<model>_init`` captures the kernel launches into one
    CUDA graph that ``<model>_run`` launches (docs/cuda.md, "CUDA graphs"); with
    ``emulate`` it is ignored and ``metadata.json`` says so."""
    check_destination(Path(output).absolute(), force)
    # no cyclic garbage collection while the stages build their IR (toolchain.gcpause):
    # it would only traverse it, alive until the bundle is written; freed by reference
    # counting when _compile returns, the IR is gone before the collector runs again
    with paused_gc():
        return _compile(model, target, output, input_shapes=input_shapes, name=name,
                        dump_ir=dump_ir, force=force, progress=progress, emulate=emulate,
                        backend=backend, weights=weights, skip_passes=skip_passes,
                        ram_budget=ram_budget, patch=patch, precision=precision,
                        cuda_graph=cuda_graph)


def _compile(model: Any, target: Any, output: str | Path, *,
             input_shapes: dict[str, tuple[int, ...]] | None, name: str | None,
             dump_ir: str | Path | None, force: bool, progress: bool | None, emulate: bool,
             backend: str | None, weights: str | None, skip_passes: tuple[str, ...],
             ram_budget: int | None = None, patch: Any = None,
             precision: str = "fp32", cuda_graph: bool = False) -> Path:
    bar = CompileProgress(progress)  # names the stage: import ... writing
    try:
        spec = build_spec(model, target, input_shapes=input_shapes, name=name,
                          dump_ir=dump_ir, progress=bar, emulate=emulate, backend=backend,
                          weights=weights, skip_passes=skip_passes, ram_budget=ram_budget,
                          patch=patch, precision=precision, cuda_graph=cuda_graph)
        bar.stage("rendering")
        cuda = spec.target.kind == "cuda" and not emulate
        files = render_cuda_files(spec) if cuda else render_files(spec)
        bar.stage("writing")
        return write_bundle(files, output, force=force)
    finally:
        bar.close()


def load_bundle(path: str | Path, **options: Any) -> Any:
    """A callable :class:`~toolchain.bundle.host.BundleModule` for the bundle at ``path``."""
    from toolchain.bundle.host import BundleModule

    return BundleModule(path, **options)


__all__ = ["BundleSpec", "build_spec", "compile_model", "load_bundle", "render_cuda_files",
           "render_files", "write_bundle"]

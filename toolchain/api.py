"""The Python API, mirroring the ``tvmc`` flow: :func:`load`, :func:`compile`, :func:`run`.

::

    import toolchain
    model = toolchain.load("model.onnx", shape_dict={"input": (1, 3, 96, 96)})
    package = toolchain.compile(model, target="c-generic", output="build/model")
    result = toolchain.run(package, {"input": x}, check=True)
    print(result)                   # outputs and, with check=True, the error per output
    result["probs"]                 # one output as a numpy array

``compile`` writes the same bundle as ``kiln compile``; ``run`` builds it for this host
(cached) and calls it through ctypes, like ``kiln run DIR``.

Example::

    >>> import numpy as np, toolchain                                   # doctest: +SKIP
    >>> pkg = toolchain.compile(toolchain.load("examples/lenet5.onnx"),
    ...                         output="/tmp/lenet5", force=True)       # doctest: +SKIP
    >>> toolchain.run(pkg, check=True).ok                               # doctest: +SKIP
    True
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.errors import InputError, ModelError, OptionError


@dataclass
class Model:
    """An ONNX model to compile: where it came from and the static input shapes chosen."""

    source: Any  # a path (str) or an onnx.ModelProto
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    name: str | None = None

    def graph(self) -> Any:
        """The imported :class:`~toolchain.graph.ir.Graph` (reference executor input)."""
        from toolchain.frontend.onnx import from_onnx

        return from_onnx(self.source, input_shapes=self.input_shapes or None,
                         shapes_option="shape_dict")


@dataclass
class Package:
    """A compiled bundle directory and its ``metadata.json``."""

    path: Path
    metadata: dict[str, Any]
    model: Model | None = None

    @property
    def name(self) -> str:
        return str(self.metadata["model"]["name"])


class UnknownOutputError(InputError, KeyError):
    """``result[name]`` of an output the model does not have: a Kiln error naming the
    outputs there are, and a KeyError for code that treats a result as a mapping."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass
class RunResult:
    """Outputs of one run, and with ``check=True`` the comparison rows (name, max_abs,
    max_rel, ok) against the reference executor."""

    outputs: dict[str, np.ndarray]
    check: list[dict[str, Any]] | None = None
    #: an accelerator bundle's per-layer counters of this run
    #: (:meth:`toolchain.bundle.host.BundleModule.accelerator_counters`); empty otherwise
    accelerator: list[dict[str, Any]] = field(default_factory=list)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.outputs:
            raise UnknownOutputError(f"no output {name!r}; the outputs are: "
                                     f"{', '.join(self.outputs) or 'none'}")
        return self.outputs[name]

    @property
    def ok(self) -> bool:
        """True unless a checked output is above tolerance."""
        return all(r["ok"] for r in self.check or [])

    def __str__(self) -> str:
        from toolchain.commands.run_cmd import summary

        lines = [summary(k, v) for k, v in self.outputs.items()]
        if self.check is not None:
            from toolchain.bundle.check import format_rows

            lines.append(format_rows(self.check))
        return "\n".join(lines)


def load(path: str | Path | Any, shape_dict: Mapping[str, Any] | None = None,
         name: str | None = None) -> Model:
    """An ONNX model from a file (or a ModelProto), with static shapes for dynamic inputs.

    The model is imported once here so that an unsupported op or a bad shape is reported
    now, not at compile time."""
    if isinstance(path, (str, Path)):
        if Path(path).is_dir():
            raise ModelError(f"load: {path}: is a directory, not an ONNX model file")
        if not Path(path).is_file():
            raise InputError(f"load: model file {path} does not exist")
        source: Any = str(path)
    else:
        source = path
    shapes = input_shapes(shape_dict)
    model = Model(source, shapes, name)
    model.graph()
    return model


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def input_shapes(shape_dict: Mapping[str, Any] | None) -> dict[str, tuple[int, ...]]:
    """``shape_dict`` checked: input names to sequences of integers (an
    :class:`OptionError` naming the input otherwise).

    >>> input_shapes({"input": [1, 3, 96, 96]})
    {'input': (1, 3, 96, 96)}
    >>> input_shapes({"input": (1, 3.5)})
    Traceback (most recent call last):
    ...
    toolchain.errors.OptionError: shape_dict['input'] = (1, 3.5): dimension 1 is 3.5, not an integer
    """
    if shape_dict is None:
        return {}
    if not isinstance(shape_dict, Mapping):
        raise OptionError("shape_dict: expected a mapping of input names to shapes, e.g. "
                          f"{{'input': (1, 3, 96, 96)}}; got a {type(shape_dict).__name__}")
    shapes = {}
    for k, v in shape_dict.items():
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise OptionError(f"shape_dict[{k!r}] = {v!r}: expected a sequence of integers, "
                              "e.g. (1, 3, 96, 96)")
        dims = tuple(v)
        for i, d in enumerate(dims):
            if not _is_int(d):
                raise OptionError(f"shape_dict[{k!r}] = {v!r}: dimension {i} is {d!r}, "
                                  "not an integer")
        shapes[str(k)] = tuple(int(d) for d in dims)
    return shapes


def _check_patch(patch: Any) -> None:
    """``patch``: ``(first node, layers, (rows, columns))``, optionally with a fourth
    ``pool`` flag; an :class:`OptionError` saying which part is wrong otherwise."""
    form = "expected (first node name, layers, (rows, columns)[, pool])"
    if not isinstance(patch, (tuple, list)) or len(patch) not in (3, 4):
        raise OptionError(f"patch={patch!r}: {form}")
    first, layers, grid = patch[:3]
    if not isinstance(first, str):
        raise OptionError(f"patch={patch!r}: the first node {first!r} is not a node name; {form}")
    if not _is_int(layers):
        raise OptionError(f"patch={patch!r}: layers {layers!r} is not an integer; {form}")
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2
            or not all(_is_int(g) and g >= 1 for g in grid)):
        raise OptionError(f"patch={patch!r}: the tile grid {grid!r} is not two positive "
                          f"integers; {form}")


def compile(model: Model | str | Path | Any, target: Any = "c-generic",  # noqa: A001
            output: str | Path | None = None, *, name: str | None = None,
            force: bool = False, dump_ir: str | Path | None = None,
            backend: str | None = None, weights: str | None = None,
            records: str | Path | None = None, ram_budget: int | None = None,
            patch: Any = None, cuda_graph: bool = False) -> Package:
    """Compile ``model`` (a :class:`Model`, a path or a ModelProto) into a bundle at
    ``output`` (default: a new temporary directory); returns the :class:`Package`.
    ``backend="llvm"``: the kernels as object files compiled by LLVM (``docs/llvm.md``);
    ``weights``: ``incbin``, ``c-array`` or ``external`` (default ``auto``: docs/bundle.md);
    ``records``: a tuning records file (``kiln tune``): the best record per kernel is
    applied, the other kernels keep their default schedules (``docs/tuning.md``);
    ``ram_budget``: the most arena bytes, met by patch-based inference of the first layers
    where needed (``docs/embedded.md``); ``patch``: a patch stage chosen by hand,
    ``(first node, layers, (rows, columns) of tiles)``; ``cuda_graph`` (CUDA targets): the
    launcher captures the kernel launches into one CUDA graph (``docs/cuda.md``)."""
    import contextlib

    from toolchain.bundle import compile_model
    from toolchain.bundle.host import read_metadata

    if ram_budget is not None and (not _is_int(ram_budget) or ram_budget < 1):
        raise OptionError(f"ram_budget={ram_budget!r}: expected a positive number of bytes "
                          "(an int)")
    if patch is not None:
        _check_patch(patch)
    m = model if isinstance(model, Model) else load(model)
    if output is None:
        output = Path(tempfile.mkdtemp(prefix="kiln-bundle-")) / (name or m.name or "model")
    steer: Any = contextlib.nullcontext()
    rows: list[Any] = []
    if records is not None:
        from toolchain.autotune.apply import applying
        from toolchain.autotune.records import best_traces, load_records

        rows = load_records(records)
        steer = applying(best_traces(rows, f"records file {records}"))
    with steer as applied:
        path = compile_model(m.source, target, output, input_shapes=m.input_shapes or None,
                             name=name or m.name, dump_ir=dump_ir, force=force,
                             progress=False, backend=backend, weights=weights,
                             ram_budget=ram_budget, patch=patch, cuda_graph=cuda_graph)
    if records is not None:  # as kiln compile --records warns
        from toolchain.autotune.conditions import warn_mixed

        warn_mixed(rows, applied, f"records file {records}")
    return Package(path, read_metadata(path), m)


def _default_inputs(meta: Mapping[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    from toolchain.graph.ir import np_dtype

    rng = np.random.default_rng(seed)
    out = {}
    for t in meta["inputs"]:
        dt = np_dtype(t["dtype"])
        if np.issubdtype(dt, np.floating):
            out[t["name"]] = rng.standard_normal(t["shape"]).astype(dt)
        else:
            out[t["name"]] = np.zeros(t["shape"], dt)
    return out


def run(package: Package | str | Path, inputs: Mapping[str, np.ndarray] | None = None, *,
        check: bool = False, tolerance: float = 1e-4, device: str = "fsim") -> RunResult:
    """Build ``package`` for this host (cached), run it on ``inputs`` (default: seeded
    random floats, zero integers) and, with ``check``, compare with the reference. An
    accelerator bundle runs its layers on ``device`` (``fsim`` or ``rtl``) and the result
    carries their counters (``RunResult.accelerator``)."""
    from toolchain.bundle.check import compare, float16_inside, reference_outputs
    from toolchain.bundle.host import BundleModule

    if not isinstance(package, (Package, str, Path)):
        raise OptionError(f"run: expected a Package or a bundle directory, got "
                          f"{type(package).__name__}")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise InputError("run: inputs must map input names to arrays, e.g. "
                         f"{{'input': x}}; got a {type(inputs).__name__}")
    if (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.floating))
            or not tolerance > 0):
        raise OptionError(f"run: tolerance={tolerance!r}: must be a positive number")
    path = package.path if isinstance(package, Package) else Path(package)
    module = BundleModule(path, device=device)
    feeds = dict(inputs) if inputs is not None else _default_inputs(module.metadata)
    outputs = module(feeds)
    rows = None
    if check:
        src = package.model.source if isinstance(package, Package) and package.model else None
        rows = compare(outputs, reference_outputs(module.metadata, feeds, src), tolerance,
                       float16=float16_inside(module.metadata))
    return RunResult(outputs, rows, module.accelerator_counters())


__all__ = ["Model", "Package", "RunResult", "UnknownOutputError", "compile", "input_shapes", "load",
           "run"]

"""Shared helpers of the bundle tests: tiny ONNX models, onnxruntime, strict builds."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: the strictest flags the generated C must pass (issue 5); -Wcast-qual: no cast drops
#: const (MISRA C:2012 rule 11.8; docs/bundle.md, "Into your own build")
STRICT = ("-Wall", "-Wextra", "-Werror", "-pedantic", "-Wcast-qual")
RTOL = 1e-4
#: how a test builds a bundle it broke on purpose and expects to be far off the reference:
#: at gcc's -O0 (the same C, about 0.4 CPU s a build less than the -O3 of ``kiln run``,
#: which every bundle meant to be right keeps)
BROKEN_BUILD = {"extra_flags": ("-O0",)}

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
               np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL}


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, tuple[Any, list[int]]],
               outputs: Mapping[str, tuple[Any, list[int] | None]],
               inits: Mapping[str, np.ndarray] | None = None, opset: int = 17,
               name: str = "g") -> onnx.ModelProto:
    """An ONNX model from nodes; inputs/outputs map names to (numpy dtype, shape)."""
    g = helper.make_graph(
        list(nodes), name,
        [helper.make_tensor_value_info(k, _NP_TO_ONNX[np.dtype(t)], s)
         for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(k, _NP_TO_ONNX[np.dtype(t)], s)
         for k, (t, s) in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m



def layer_norm_model(shape: list[int], seed: int) -> onnx.ModelProto:
    """LayerNormalization over the last axis of ``shape`` (epsilon 1e-5), with seeded
    normal scale and bias."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    return make_model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"],
                                        axis=-1, epsilon=1e-5)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, shape)},
                      {"g": rng.standard_normal(n).astype(np.float32),
                       "b": rng.standard_normal(n).astype(np.float32)})

def random_inputs(model: onnx.ModelProto, seed: int = 0,
                  shapes: Mapping[str, tuple[int, ...]] | None = None,
                  vocab: int = 4) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input (normal floats, small integers, booleans)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = (shapes or {}).get(vi.name) or tuple(d.dim_value for d in tt.shape.dim)
        if tt.elem_type == TensorProto.FLOAT:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
        elif tt.elem_type == TensorProto.BOOL:
            out[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[vi.name] = rng.integers(0, vocab, shape).astype(
                np.int64 if tt.elem_type == TensorProto.INT64 else np.int32)
    return out


def run_ort(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs (one thread, no graph optimisation), by name."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(inputs)), strict=True))


def max_rel(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref| (exact match required for non-float outputs)."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
    return float(diff.max()) / scale if scale > 0 and diff.size else float(diff.max(initial=0))


def assert_matches(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                   rtol: float = RTOL) -> None:
    assert set(got) == set(ref)
    for k, r in ref.items():
        if np.issubdtype(r.dtype, np.floating):
            err = max_rel(got[k], r)
            assert err <= rtol, f"output {k!r}: max rel err {err:.3e} > {rtol}"
        else:
            np.testing.assert_array_equal(got[k], r, err_msg=f"output {k!r}")


def compile_run(model: onnx.ModelProto, tmp: Path, inputs: Mapping[str, np.ndarray],
                **kw: Any) -> tuple[Path, dict[str, np.ndarray]]:
    """Compile ``model`` into ``tmp/bundle``, build it with the strict flags, run it."""
    from toolchain.bundle import compile_model, load_bundle

    path = compile_model(model, kw.pop("target", "c-generic"), tmp / "bundle", **kw)
    return path, load_bundle(path, extra_flags=STRICT)(inputs)


def emulated_matches_reference(model: onnx.ModelProto, out: Path, seed: int,
                               target: str = "cuda-sm90", rtol: float = 1e-4,
                               atol: float = 1e-4) -> Path:
    """Compile ``model`` for ``target`` with ``--emulate`` (its CUDA kernels run thread by
    thread on this CPU) into ``out``, build it with :data:`STRICT`, run it on random
    inputs (``seed``) and compare every output with the reference executor's; returns
    the bundle."""
    from toolchain.bundle import compile_model, load_bundle
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    feeds = random_inputs(model, seed=seed)
    want = run_graph(from_onnx(model), feeds)
    d = compile_model(model, target, out, progress=False, emulate=True)
    got = load_bundle(d, extra_flags=STRICT)(feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)
    return d


def gpu_matches_reference(model: onnx.ModelProto, out: Path, seed: int,
                          target: str = "cuda-sm90") -> None:
    """Compile ``model`` for ``target`` into ``out``, run it twice on this machine's GPU
    (the second run reuses the device workspace) on random inputs (``seed``) and compare
    every output with the reference executor's."""
    from toolchain.bundle import compile_model, load_bundle
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    feeds = random_inputs(model, seed=seed)
    want = run_graph(from_onnx(model), feeds)
    mod = load_bundle(compile_model(model, target, out, progress=False))
    for _ in range(2):
        got = mod(feeds)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-4, err_msg=k)


def recording_nvcc(folder: Path) -> tuple[Path, Path]:
    """A stand-in ``nvcc`` in ``folder`` (and its log): each call appends its arguments
    to the log as a JSON list and writes an empty file at its ``-o``, so a build's nvcc
    commands can be checked where no CUDA toolkit is installed."""
    folder.mkdir(parents=True, exist_ok=True)
    exe, log = folder / "nvcc", folder / "nvcc.log"
    exe.write_text(f"#!{sys.executable}\n"
                   "import json, pathlib, sys\n"
                   f"with open({str(log)!r}, 'a') as f:\n"
                   "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
                   "if '-o' in sys.argv:\n"
                   "    pathlib.Path(sys.argv[sys.argv.index('-o') + 1]).write_bytes(b'')\n")
    exe.chmod(0o755)
    return exe, log


def logged_calls(log: Path, start: int = 0) -> list[list[str]]:
    """The argument lists a :func:`recording_nvcc` logged, from call ``start`` on."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines[start:]]


def nvcc_object(bundle: Path, source: str | Path, out: Path,
                flags: Sequence[str] = (), device_only: bool = False,
                sm90: str = "90") -> subprocess.CompletedProcess:
    """``source`` compiled by nvcc in ``bundle``'s folder (its ``include``, ``runtime`` and
    ``src`` on the include path) to object code for sm_80 and sm_90 in one run, every
    warning an error (``flags`` added: ``-DKILN_PROFILE``); the caller checks
    ``returncode`` and shows ``stderr``.

    ``device_only`` is for a source with no host code (a bundle's ``kernels.cu``): nvcc
    makes the fat binary of the two architectures' object code (``-fatbin``) and stops
    there. The device side is the same commands as ``-c``'s (the preprocessor, ``cicc``
    with its warnings promoted and ``ptxas --warning-as-error`` for each architecture:
    ``nvcc --dryrun`` lists them); what it leaves out is the host side, ``cudafe++`` and
    the host compiler over the kernels' launch stubs, half of nvcc's fixed cost of about
    1 CPU s a run (and, on a large unit, the host compiler over every kernel's launch stub:
    about 3 CPU s for the zoo's 205). A bundle's kernels still go through the host side
    with its launcher in ``test_weights_storage.py`` (the Makefile and Kiln's host build),
    ``test_tensorcore.py``'s 48 KiB bundle and the tuner's harness.

    ``sm90="90a"`` builds the Hopper code for sm_90a instead (the architecture-specific
    features a ``wgmma`` kernel needs; everything sm_90 builds, sm_90a builds)."""
    gencode = ["-gencode", "arch=compute_80,code=sm_80",
               "-gencode", f"arch=compute_{sm90},code=sm_{sm90}"]
    return subprocess.run(["nvcc", "-O3", *gencode, *flags, "-Werror", "all-warnings",
                           "-Iinclude", "-Iruntime", "-Isrc",
                           "-fatbin" if device_only else "-c", str(source), "-o", str(out)],
                          cwd=bundle, capture_output=True, text=True, check=False)


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)


def _bundle_of(source: Path) -> Path:
    """The bundle folder a source lives in (``<bundle>/src/x.cu``)."""
    return source.resolve().parent.parent


def _resolve(name: str, quoted: bool, here: Path, dirs: Sequence[Path]) -> Path | None:
    """Where the preprocessor finds ``name``: the including file's folder first for a
    quoted include, then ``dirs`` in order; None for a header outside them (the system's)."""
    for d in ([here] if quoted else []) + list(dirs):
        if (d / name).is_file():
            return (d / name).resolve()
    return None


def nvcc_unit(bundles: Sequence[Sequence[Path]], unit: Path) -> list[str]:
    """Write one CUDA translation unit holding several bundles' sources (``bundles[i]``:
    bundle ``i``'s sources, its launcher first, then its kernels) and return the include
    flags to compile it with (run from any folder): nvcc's fixed cost per run (the CUDA
    headers through the preprocessor, ``cudafe++``, ``cicc`` and the host compiler, about
    0.9 CPU s) is paid once for all of them instead of once a bundle.

    Each bundle's sources go into a namespace of their own (``kiln_unit_<i>``: their static
    names -- ``kiln_workspace``, the device helpers -- stay apart), and every macro a source
    defines is ``#undef``-ed after it, so no bundle sees another's. The kernels' dynamic
    shared memory (``extern __shared__ ... kiln_smem[]``, declared in ``extern "C"``
    functions, so one name across the namespaces) is renamed ``kiln_smem_<i>`` by a macro:
    nvcc refuses one array declared with two alignments (the ``.sw128`` tiles' 1024, the
    others' 128). The headers the
    sources include from outside their own bundle's ``src`` and ``include`` (the system's
    and the CUDA toolkit's, the runtime's ``kiln_runtime.h``) are included once, at file
    scope, just before the first source that needs them, in the sources' order: the first
    sources of every bundle (the launchers) all come before any second source (the
    kernels), so a launcher still cannot lean on what only the kernels include, as in a
    launcher-then-kernels unit of one bundle. ``extern "C"`` names (the kernels, the API)
    carry each model's name, so the models must be distinct. Raises ``ValueError`` where
    a bundle's quoted include would find another bundle's header, the runtime headers
    differ, or two bundles have the same model header."""
    roots = [_bundle_of(srcs[0]) for srcs in bundles]
    runtime = roots[0] / "runtime"
    for r in roots[1:]:
        for h in (r / "runtime").glob("*.h"):
            if h.read_bytes() != (runtime / h.name).read_bytes():
                raise ValueError(f"{h} differs from {runtime / h.name}")
    names = [h.name for r in roots for h in (r / "include").glob("*.h")]
    if len(names) != len(set(names)):
        raise ValueError(f"two bundles have the same model header: {sorted(names)}")
    search = [*(r / "include" for r in roots), runtime]
    hoisted: list[str] = []
    text: list[str] = []

    def outside(path: Path, root: Path, seen: set[Path]) -> list[str]:
        """The includes ``path`` reaches (through its bundle's own headers) that are not
        its bundle's own, as ``#include`` lines."""
        if path in seen:
            return []
        seen.add(path)
        own = [root / "include", root / "runtime", root / "src"]
        found = []
        for kind, name in _INCLUDE.findall(path.read_text()):
            quoted = kind == '"'
            mine = _resolve(name, quoted, path.parent, own)
            merged = _resolve(name, quoted, path.parent, search)
            if mine != merged and not (mine and mine.parent == root / "runtime"):
                raise ValueError(f"{path}: #include {name} would find {merged}, not {mine}")
            if mine is not None and mine.parent != root / "runtime":
                found += outside(mine, root, seen)
            else:
                found.append(f'#include "{merged}"' if merged else f"#include <{name}>")
        return found

    for step in range(max(len(srcs) for srcs in bundles)):
        for i, srcs in enumerate(bundles):
            if step >= len(srcs):
                continue
            src = srcs[step].resolve()
            for line in outside(src, roots[i], set()):
                if line not in hoisted:
                    hoisted.append(line)
                    text.append(line + "\n")
            macros = sorted(set(_DEFINE.findall(src.read_text())))
            text.append(f"#define kiln_smem kiln_smem_{i}\n"
                        f'namespace kiln_unit_{i} {{\n#include "{src}"\n}}\n' +
                        "".join(f"#undef {m}\n" for m in macros) + "#undef kiln_smem\n")
    unit.write_text("".join(text))
    return [f"-I{d}" for d in search]


def nvcc_kernels(bundles: Sequence[Path], out: Path) -> subprocess.CompletedProcess:
    """The kernels (``src/kernels.cu``, no host code) of several bundles of distinct model
    names compiled by one nvcc run to the fat binary of sm_80 and sm_90 object code
    (:func:`nvcc_object`'s ``device_only``), every warning an error, as one translation
    unit (:func:`nvcc_unit`: one fixed cost, not one a bundle); an error names the
    bundle's file. The caller checks ``returncode`` and shows ``stderr``."""
    unit = out / "kernels_unit.cu"
    include = nvcc_unit([[b / "src" / "kernels.cu"] for b in bundles], unit)
    # a bundle built for sm_90a (wgmma) has the run make sm_90a code instead of sm_90's
    sm90 = "90a" if any("-arch=sm_90a" in json.loads((b / "metadata.json").read_text())
                        ["target"].get("cflags", []) for b in bundles) else "90"
    return nvcc_object(bundles[0], unit, out / "kernels_unit.fatbin", include,
                       device_only=True, sm90=sm90)


#: the device-only nvcc checks of the GPU tests that share one nvcc run (the session fixture
#: ``kernels_nvcc``, ``tests/conftest.py``): check name -> (the test module that defines it,
#: a builder of its bundles in a folder: ``cuda-sm90`` bundles by model name, each model
#: compiled under a name of its own, since one translation unit holds them all)
NVCC_KERNEL_CHECKS: dict[str, tuple[str, Callable[[Path], dict[str, Path]]]] = {}


def nvcc_kernel_check(name: str) -> Callable[[Callable[[Path], dict[str, Path]]],
                                             Callable[[Path], dict[str, Path]]]:
    """Register a builder of check ``name``'s bundles (:data:`NVCC_KERNEL_CHECKS`)."""
    def register(build: Callable[[Path], dict[str, Path]]) -> Callable[[Path], dict[str, Path]]:
        NVCC_KERNEL_CHECKS[name] = (build.__module__, build)
        return build
    return register


@dataclass
class KernelChecks:
    """The bundles of several device-only nvcc checks (by check name; or the error its
    builder raised) and whether one nvcc run (:func:`nvcc_kernels`: the fat binary of
    sm_80 and sm_90 object code, every warning an error) built all their kernels: nvcc's
    fixed cost (about 0.7 CPU s a device-only run) paid once, not once a check."""

    bundles: dict[str, dict[str, Path] | Exception]
    built: bool
    #: the shared run's errors where it failed
    errors: str = ""

    @classmethod
    def build(cls, names: Sequence[str], out: Path) -> KernelChecks:
        bundles: dict[str, dict[str, Path] | Exception] = {}
        for name in names:
            try:
                bundles[name] = NVCC_KERNEL_CHECKS[name][1](out / name)
            except Exception as e:  # (its own test raises it)
                bundles[name] = e
        ok = [d for got in bundles.values() if isinstance(got, dict) for d in got.values()]
        res = nvcc_kernels(ok, out) if ok and shutil.which("nvcc") else None
        return cls(bundles, res is not None and res.returncode == 0,
                   res.stderr if res is not None else "")

    def of(self, name: str) -> dict[str, Path]:
        """Check ``name``'s bundles; raises what its builder raised."""
        got = self.bundles[name]
        if isinstance(got, Exception):
            raise got
        return got

    def check(self, name: str, tmp: Path) -> None:
        """Assert that nvcc built check ``name``'s kernels: in the shared run, or -- where
        that run failed -- in a run of their own, whose errors are this check's; and that
        the shared run's errors do not name its kernels (they built alone)."""
        if self.built:
            return
        res = nvcc_kernels(list(self.of(name).values()), tmp)
        assert res.returncode == 0, f"{name}: {res.stderr[-3000:]}"
        # (built alone but not with the others: the shared unit broke them, and every
        # check would pay nvcc's fixed cost again)
        assert not any(f"{d.resolve()}/" in self.errors for d in self.of(name).values()), \
            f"{name}: its kernels build alone, not in the shared run: {self.errors[-3000:]}"


def make(bundle: Path, *args: str, cflags: str | None = None) -> subprocess.CompletedProcess:
    """``make`` in a bundle (quiet); raises with the output on failure (skips the test
    when make is not installed)."""
    from tests.tools import require

    require("make")
    cmd = ["make", "-s", "-C", str(bundle), *args]
    if cflags is not None:
        cmd.append(f"CFLAGS={cflags}")
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def run_main(bundle: Path, inputs: Mapping[str, np.ndarray], meta: Mapping[str, Any],
             prefix: Sequence[str] = (), timeout: float = 120,
             options: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Run the bundle's demo ``main`` (with ``options``, e.g. ``--threads 2``) on raw .bin
    files; the outputs by name."""
    from toolchain.graph.ir import np_dtype

    files = []
    for t in meta["inputs"]:
        f = bundle / f"in_{t['field']}.bin"
        np.ascontiguousarray(inputs[t["name"]]).tofile(f)
        files.append(str(f))
    outs = [bundle / f"out_{t['field']}.bin" for t in meta["outputs"]]
    res = subprocess.run([*prefix, str(bundle / "main"), *options, *files, *map(str, outs)],
                         capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return {t["name"]: np.fromfile(f, np_dtype(t["dtype"])).reshape(t["shape"])
            for t, f in zip(meta["outputs"], outs, strict=True)}


def clip_softmax_clip(hi2: float) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``Clip(0, 6) -> Softmax -> Clip(0, hi2)`` on a [1, 16] input, and that input: two
    Clips whose bounds are baked into the code, equal only when ``hi2`` is 6."""
    f = np.float32
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["a"]),
             helper.make_node("Softmax", ["a"], ["t"], axis=-1),
             helper.make_node("Clip", ["t", "lo", "hi2"], ["y"])]
    inits = {"lo": np.array(0.0, f), "hi": np.array(6.0, f), "hi2": np.array(hi2, f)}
    model = make_model(nodes, {"x": (f, [1, 16])}, {"y": (f, [1, 16])}, inits)
    return model, {"x": np.linspace(-8, 8, 16, dtype=f)[None]}


@dataclass(frozen=True)
class ZooBundle:
    """A zoo model's bundle as Kiln compiled it (read it; build in :meth:`copy`), with the
    model, its inputs and onnxruntime's outputs on them."""

    path: Path
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    ref: dict[str, np.ndarray]

    def copy(self, dest: Path) -> ZooBundle:
        """The bundle copied to ``dest``, for a test that builds in it (``make``)."""
        shutil.copytree(self.path, dest)
        return replace(self, path=dest)


def cores(n: int, base: str = "c-generic") -> Any:
    """``base`` with ``cores: n`` (what a descriptor that extends it would say)."""
    from toolchain.target import load_target

    return replace(load_target(base), cores=n)

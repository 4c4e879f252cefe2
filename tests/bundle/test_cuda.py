"""CUDA bundles: files and workspace layout, nvcc object code for sm_80 and sm_90, the SIMT
emulation of every zoo model against the reference executor (no GPU needed), and on a
machine with a GPU the bundles themselves (``-m gpu``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.bundle.helpers import STRICT, nvcc_object, nvcc_unit
from toolchain.bundle import (
    build_spec,
    compile_model,
    load_bundle,
    render_cuda_files,
    render_files,
    write_bundle,
)
from toolchain.bundle.host import gpu_available
from toolchain.errors import OptionError, TargetError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.zoo import ZOO

MODELS = [n for n, s in ZOO.items() if not s.slow]
NVCC = shutil.which("nvcc")


def _rel_err(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k])))
               / max(1e-6, float(np.max(np.abs(want[k])))) for k in want)


def _reference(name: str) -> tuple[object, dict, dict]:
    spec = ZOO[name]
    model = spec.build()
    feeds = spec.inputs(model)
    return model, feeds, run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)


@pytest.fixture(scope="module")
def lenet_cuda(tmp_path_factory) -> Path:
    return compile_model(ZOO["lenet5"].build(), "cuda-sm80",
                         tmp_path_factory.mktemp("cuda") / "lenet5", progress=False)


def test_bundle_files_and_workspace_layout(lenet_cuda: Path) -> None:
    d = lenet_cuda
    for f in ("include/lenet5.h", "src/lenet5.cu", "src/kernels.cu", "src/kernels.cuh",
              "src/weights.bin", "src/weights_blob.S", "main.c", "Makefile",
              "CMakeLists.txt", "metadata.json", "runtime/kiln_runtime.h"):
        assert (d / f).is_file(), f
    meta = json.loads((d / "metadata.json").read_text())
    dev = meta["device"]
    assert meta["arena_bytes"] == 0 and dev["arena_bytes"] == meta["memory_plan"]["arena_bytes"]
    # inputs, outputs and weights after the arena, aligned, not overlapping, all inside
    spans = sorted([(o, t["bytes"]) for t in meta["inputs"] for f, o in dev["inputs"].items()
                    if f == t["field"]] +
                   [(o, t["bytes"]) for t in meta["outputs"] for f, o in dev["outputs"].items()
                    if f == t["field"]] +
                   [(o, w["bytes"]) for w in meta["weights"]
                    for n, o in dev["weights"].items() if n == w["name"]])
    assert spans[0][0] >= dev["arena_bytes"]
    for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
        assert a % dev["align"] == 0 and a + n <= b
    assert spans[-1][0] + spans[-1][1] <= dev["workspace_bytes"]
    header = (d / "include/lenet5.h").read_text()
    assert "int lenet5_init(void);" in header and "LENET5_WORKSPACE_BYTES" in header
    assert "__global__" in (d / "src/kernels.cu").read_text()
    # every kernel that is not elided (a reshape: no copy) launches once or more
    live = [k for k in meta["kernels"] if not k["elided"]]
    assert len(live) < meta["kernel_count"] and dev["launches"] >= len(live)


#: the host compiler's warnings too, as errors, in every nvcc check of a bundle's host code
STRICT_HOST = ("-Xcompiler", "-Wall,-Wextra,-Werror,-Wcast-qual")


@dataclass
class NvccBatch:
    """Bundles Kiln compiled (by test name; or the error its compile raised) and nvcc's
    runs over all of them as one translation unit each (``nvcc_unit``), None where no unit
    could be made of them (or nvcc is not installed); ``emulated``: the same compiles'
    SIMT emulations (``build_spec(..., also_emulate=True)``), where they were made."""

    bundles: dict[str, Path | Exception]
    runs: list[subprocess.CompletedProcess] | None
    emulated: dict[str, Path | Exception] = field(default_factory=dict)

    def bundle(self, name: str) -> Path:
        """The bundle of ``name``; raises what its compile raised."""
        got = self.bundles[name]
        if isinstance(got, Exception):
            raise got
        return got

    def emulation(self, name: str) -> Path:
        """The emulated bundle of ``name``; raises what its compile raised."""
        got = self.emulated[name]
        if isinstance(got, Exception):
            raise got
        return got

    @property
    def built(self) -> bool:
        """Whether nvcc's runs built every bundle of the batch, warnings as errors."""
        return self.runs is not None and all(r.returncode == 0 for r in self.runs)

    def assert_not_named(self, name: str) -> None:
        """For a bundle that built alone after a run of the batch failed: no run's errors
        may name it (the shared unit broke it, which every test of the batch would
        otherwise pass over, paying nvcc's fixed cost again each time)."""
        errors = "".join(r.stderr for r in self.runs or [])
        assert f"{self.bundle(name).resolve()}/" not in errors, \
            f"{name}: builds alone, not in the batch's nvcc runs: {errors[-3000:]}"


def _nvcc_batch(bundles: dict[str, Path | Exception], sources: object, out: Path,
                flags: tuple[str, ...] | list[str], kernels: object = None) -> NvccBatch:
    """``sources(bundle)`` of every bundle Kiln built, compiled to object code by one nvcc
    run; with ``kernels``, ``kernels(bundle)`` (sources of device code alone) by a second
    one, device-only (``nvcc_object``'s ``device_only``), with the same flags."""
    built = [d for d in bundles.values() if isinstance(d, Path)]
    if NVCC is None:
        return NvccBatch(bundles, None)
    units = [(sources, "unit", False)] + ([(kernels, "kernels_unit", True)] if kernels else [])
    runs = []
    for srcs, stem, device_only in units:
        try:
            include = nvcc_unit([srcs(d) for d in built], out / f"{stem}.cu")
        except ValueError:
            return NvccBatch(bundles, None)
        runs.append(nvcc_object(built[0], out / f"{stem}.cu",
                                out / f"{stem}.{'fatbin' if device_only else 'o'}",
                                [*include, *flags], device_only=device_only))
    return NvccBatch(bundles, runs)


def _launcher(d: Path) -> Path:
    return d / "src" / f"{json.loads((d / 'metadata.json').read_text())['model']['name']}.cu"


def _sm90_bundles(names: list[str], out: Path, **options: object) -> dict[str, Path | Exception]:
    got: dict[str, Path | Exception] = {}
    for name in names:
        spec = ZOO[name]
        try:
            got[name] = compile_model(spec.build(), "cuda-sm90", out / name, progress=False,
                                      input_shapes=spec.input_shapes, **options)
        except Exception as e:  # (its own test raises it)
            got[name] = e
    return got


def _sm90_and_emulated(names: list[str], out: Path
                       ) -> tuple[dict[str, Path | Exception], dict[str, Path | Exception]]:
    """Each model's ``cuda-sm90`` bundle and its SIMT emulation from one compile (the same
    files as a plain and an ``emulate`` compile: ``test_also_emulate_...`` below)."""
    cuda: dict[str, Path | Exception] = {}
    emulated: dict[str, Path | Exception] = {}
    for name in names:
        spec = ZOO[name]
        try:
            both = build_spec(spec.build(), "cuda-sm90", progress=False, also_emulate=True,
                              input_shapes=spec.input_shapes)
            assert both.emulation is not None
            cuda[name] = write_bundle(render_cuda_files(both), out / name)
            emulated[name] = write_bundle(render_files(both.emulation), out / f"{name}_emu")
        except Exception as e:  # (its own tests raise it)
            cuda[name] = emulated[name] = e
    return cuda, emulated


@pytest.fixture(scope="module")
def cuda_sm90_zoo(tmp_path_factory) -> NvccBatch:
    """Every fast zoo model's ``cuda-sm90`` bundle, and nvcc's builds of all of them for
    sm_80 and sm_90, every warning an error, the host compiler's ``-Wall -Wextra`` too:
    the host call sequences (the launchers) to object code as one translation unit, and
    the kernels, which have no host code, as another, device-only (``-fatbin``: the same
    preprocessor, ``cicc`` and ``ptxas`` runs for each architecture as ``-c``'s; what it
    leaves out is the host compiler over nvcc's own launch stubs of the kernels, about
    3 CPU s at ``-O3`` for the 205 kernels, which a bundle's kernels still get in
    ``test_weights_storage.py``, ``test_tensorcore.py``'s 48 KiB bundle and the tuner's
    harness). A launcher's ``<<<...>>>`` calls meet the kernels' declarations
    (``kernels.cuh``) and the kernels' definitions include the same header, so a
    mismatch still fails. Two runs, where a run a bundle paid nvcc's fixed cost (the CUDA
    headers through its front end, ``cudafe++`` and the host compiler, about 0.9 CPU s)
    twelve times; the users share an xdist group (``SHARED_BUILDS``). With each bundle its
    SIMT emulation, from the same compile: one schedule and lowering a model, not two
    (the zoo's ``cuda-sm80`` and ``cuda-sm90`` kernels are the same text, so the emulation
    checks the kernels nvcc builds)."""
    out = tmp_path_factory.mktemp("sm90")
    cuda, emulated = _sm90_and_emulated(MODELS, out)
    batch = _nvcc_batch(cuda, lambda d: [_launcher(d)], out, STRICT_HOST,
                        kernels=lambda d: [d / "src/kernels.cu"])
    batch.emulated = emulated
    return batch


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed: "
                    "https://developer.nvidia.com/cuda-downloads")
@pytest.mark.parametrize("name", MODELS)
def test_nvcc_builds_object_code_for_sm80_and_sm90(name: str, cuda_sm90_zoo: NvccBatch,
                                                   tmp_path: Path) -> None:
    """The bundle's two CUDA sources (the kernels and the host call sequence) built by
    nvcc for both architectures, warnings as errors: with the other zoo bundles in
    ``cuda_sm90_zoo``'s two runs (the launchers to object code, the kernels device-only),
    or -- where a run failed -- as a unit of their own to object code (the call sequence
    first, so it cannot lean on what the kernels include), whose errors are this model's,
    and then the failed runs' errors must not name it. Each source alone goes through
    nvcc in ``tests/bundle/test_weights_storage.py`` (the bundle's Makefile and Kiln's host
    build)."""
    d = cuda_sm90_zoo.bundle(name)
    if cuda_sm90_zoo.built:
        return
    unit = tmp_path / "bundle.cu"
    unit.write_text("".join(f'#include "{f.resolve()}"\n'
                            for f in (_launcher(d), d / "src" / "kernels.cu")))
    res = nvcc_object(d, unit, tmp_path / "bundle.o", STRICT_HOST)
    assert res.returncode == 0, res.stderr[-3000:]
    cuda_sm90_zoo.assert_not_named(name)


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_the_profiling_build_times_every_launch_listed_in_the_metadata(
        lenet_cuda: Path, tmp_path: Path) -> None:
    """``-DKILN_PROFILE`` puts an event before every launch and one after the last, and
    ``device.launch_table`` lists the launches in the order of their events."""
    launcher = (lenet_cuda / "src/lenet5.cu").read_text()
    table = json.loads((lenet_cuda / "metadata.json").read_text())["device"]["launch_table"]
    launches = [ln.split("<<<")[0].strip() for ln in launcher.splitlines() if "<<<" in ln
                and "kiln_profile_wait" not in ln]  # (the profiling build's head start)
    assert [r["kernel"] for r in table] == launches and len(launches) > 3
    marks = [ln.strip() for ln in launcher.splitlines() if ln.strip().startswith("KILN_MARK(")]
    assert marks == [f"KILN_MARK({i});" for i in range(len(launches) + 1)]
    assert {r["kind"] for r in table} <= {"tiled", "simple", "wmma", "mma"}
    assert table[0]["ops"][0] == "Conv" and table[0]["shape"] == [[1, 6, 28, 28]]
    res = nvcc_object(lenet_cuda, lenet_cuda / "src/lenet5.cu", tmp_path / "p.o",
                      ["-DKILN_PROFILE"])
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.parametrize("name", MODELS)
def test_simt_emulation_matches_the_reference(name: str, cuda_sm90_zoo: NvccBatch) -> None:
    """The CUDA kernels' own lowered code, run thread by thread on the CPU: the emulation
    of the very kernels nvcc builds in ``cuda_sm90_zoo``."""
    _, feeds, want = _reference(name)
    d = cuda_sm90_zoo.emulation(name)
    meta = json.loads((d / "metadata.json").read_text())
    assert meta["options"]["emulate"] and meta["target"]["kind"] == "cuda"
    assert _rel_err(load_bundle(d, extra_flags=STRICT)(feeds), want) < 1e-4


def _files(d: Path) -> dict[Path, bytes]:
    return {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_also_emulate_gives_the_files_of_two_compiles(lenet_cuda: Path, tmp_path: Path) -> None:
    """``build_spec(..., also_emulate=True)``: the CUDA bundle and its ``emulation`` are
    byte for byte a plain compile's and an ``emulate`` compile's (``cuda_sm90_zoo`` leans
    on it); it refuses what it does not render twice before any work."""
    model = ZOO["lenet5"].build()
    both = build_spec(model, "cuda-sm80", progress=False, also_emulate=True)
    assert both.emulation is not None and both.emulation.emulation is None
    cuda = write_bundle(render_cuda_files(both), tmp_path / "cuda" / "lenet5")
    emu = write_bundle(render_files(both.emulation), tmp_path / "emu" / "lenet5")
    alone = compile_model(model, "cuda-sm80", tmp_path / "alone" / "lenet5", progress=False,
                          emulate=True)
    assert _files(cuda) == _files(lenet_cuda)
    assert _files(emu) == _files(alone)
    for target, options in (("c-generic", {}), ("cuda-sm80", {"cuda_graph": True}),
                            ("cuda-sm80", {"emulate": True})):
        with pytest.raises(OptionError, match="also_emulate"):
            build_spec(model, target, progress=False, also_emulate=True, **options)


@pytest.mark.skipif(gpu_available(), reason="checks the message on a machine without a GPU")
def test_running_a_cuda_bundle_without_a_gpu_says_what_to_do(lenet_cuda: Path) -> None:
    with pytest.raises(TargetError, match="needs an NVIDIA GPU.*--emulate"):
        load_bundle(lenet_cuda)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", MODELS)
def test_cuda_bundle_on_the_gpu_matches_the_reference(name: str, tmp_path: Path) -> None:
    model, feeds, want = _reference(name)
    d = compile_model(model, "cuda-sm90", tmp_path / name, input_shapes=ZOO[name].input_shapes,
                      progress=False)
    mod = load_bundle(d)
    assert _rel_err(mod(feeds), want) < 1e-4
    assert _rel_err(mod(feeds), want) < 1e-4  # a second run reuses the workspace
    assert mod.device_time(feeds, repeat=3) > 0  # the kernels alone (<m>_run_device)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
def test_the_profiling_build_on_the_gpu_gives_each_launchs_time(tmp_path: Path) -> None:
    model, feeds, want = _reference("lenet5")
    mod = load_bundle(compile_model(model, "cuda-sm90", tmp_path / "lenet5", progress=False),
                      profile=True)
    assert _rel_err(mod(feeds), want) < 1e-4  # the events change nothing else
    rows = mod.launch_times(feeds, repeat=3)
    assert len(rows) == mod.metadata["device"]["launches"]
    assert all(r["ms"] > 0 for r in rows)


def test_an_int8_model_emulated_gives_the_cpu_bundles_numbers(tmp_path: Path) -> None:
    """QDQ DS-CNN (Kiln's quantization): the GPU kernels compute the integer ops exactly as
    the portable CPU kernels do (bit for bit, float input quantization included)."""
    from toolchain.zoo.quantized import kiln_qdq

    spec = ZOO["ds_cnn"]
    model = kiln_qdq(spec.build())
    feeds = spec.inputs(model)
    cpu = load_bundle(compile_model(model, "c-generic", tmp_path / "cpu", progress=False))
    emu = load_bundle(compile_model(model, "cuda-sm80", tmp_path / "emu", progress=False,
                                    emulate=True))
    want, got = cpu(feeds), emu(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


# --cuda-graph: <m>_init captures the launch sequence into one CUDA graph, <m>_run launches it

@pytest.fixture(scope="module")
def lenet_graph(tmp_path_factory) -> Path:
    """LeNet-5's graph bundle through the Python API (``kiln.compile(..., cuda_graph=True)``)."""
    from toolchain.api import compile as kiln_compile

    return kiln_compile(ZOO["lenet5"].build(), "cuda-sm80",
                        tmp_path_factory.mktemp("graph") / "lenet5", cuda_graph=True).path


def test_the_graph_bundle_differs_from_the_plain_one_in_its_launcher_alone(
        lenet_cuda: Path, lenet_graph: Path) -> None:
    """Same kernels, weights, demo and build files; the launcher captures the very launch
    sequence of the plain one (same functions, grids, blocks and arguments, in order) on
    its own stream, and the metadata records the option."""
    plain = {p.relative_to(lenet_cuda): p.read_bytes() for p in lenet_cuda.rglob("*")
             if p.is_file()}
    graph = {p.relative_to(lenet_graph): p.read_bytes() for p in lenet_graph.rglob("*")
             if p.is_file()}
    assert plain.keys() == graph.keys()
    differ = {str(f) for f in plain if plain[f] != graph[f]}
    assert differ == {"src/lenet5.cu", "include/lenet5.h", "metadata.json"}
    meta = json.loads(graph[Path("metadata.json")])
    assert meta["options"]["cuda_graph"] is True
    assert "cuda_graph" not in json.loads(plain[Path("metadata.json")])["options"]
    old, new = plain[Path("src/lenet5.cu")].decode(), graph[Path("src/lenet5.cu")].decode()
    assert "cudaGraph" not in old and "cudaStream" not in old
    def launches(src: str) -> list[str]:  # (less the profiling build's head start)
        return [ln.strip() for ln in src.splitlines() if "<<<" in ln
                and "kiln_profile_wait" not in ln]

    assert [ln.replace(", 0, s>>>", ">>>") for ln in launches(new)] == launches(old)
    assert all(ln.endswith(");") and ", s>>>(" in ln for ln in launches(new))
    for call in ("cudaStreamBeginCapture(kiln_stream", "cudaStreamEndCapture(kiln_stream",
                 "cudaGraphInstantiateWithFlags(&kiln_graph_exec", "cudaGraphExecDestroy(",
                 "cudaGraphDestroy(", "cudaStreamDestroy(", "cudaStreamSynchronize("):
        assert call in new, call
    run = new[new.index('extern "C" int lenet5_run('):]
    assert run.count("cudaGraphLaunch(kiln_graph_exec, kiln_stream)") == 1 and "<<<" not in run
    # every CUDA call of the launcher is checked (its result compared or kept)
    unchecked = [ln.strip() for ln in new.splitlines()
                 if re.match(r"\s*(?!cudaEventDestroy)cuda\w+\(", ln)]
    assert not unchecked and "cudaEventDestroy" in new  # (the regex sees the calls)


GRAPH_MODELS = ["lenet5", "transformer_encoder"]


@pytest.fixture(scope="module")
def cuda_graph_launchers(tmp_path_factory, cuda_sm90_zoo: NvccBatch
                         ) -> tuple[NvccBatch, NvccBatch]:
    """The graph bundles (``cuda_graph=True``, ``cuda-sm90``) of :data:`GRAPH_MODELS`, and
    nvcc's runs over their launchers as one translation unit: plain, and the profiling
    build (``-DKILN_PROFILE``), warnings as errors (the host compiler's ``-Wall -Wextra``
    too). A bundle's kernels go in too only where they differ from its plain bundle's,
    which ``cuda_sm90_zoo`` compiles with the same flags."""
    out = tmp_path_factory.mktemp("graph")
    bundles = _sm90_bundles(GRAPH_MODELS, out, cuda_graph=True)
    plain = cuda_sm90_zoo.bundles

    def sources(d: Path) -> list[Path]:
        kernels = d / "src" / "kernels.cu"
        same = isinstance(plain[d.name], Path) and \
            (plain[d.name] / "src" / "kernels.cu").read_bytes() == kernels.read_bytes()
        return [_launcher(d)] if same else [_launcher(d), kernels]

    (out / "profile").mkdir()
    return (_nvcc_batch(bundles, sources, out, STRICT_HOST),
            _nvcc_batch(bundles, sources, out / "profile", ["-DKILN_PROFILE", *STRICT_HOST]))


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_nvcc_builds_the_graph_launcher_for_sm80_and_sm90(
        name: str, cuda_graph_launchers: tuple[NvccBatch, NvccBatch], tmp_path: Path) -> None:
    """The graph launcher, plain and the profiling build, warnings as errors (the host
    compiler's -Wall -Wextra too), each build of both models' launchers one nvcc run
    (``cuda_graph_launchers``; where a run failed, this model's launcher alone says
    whether it is the one). ``KILN_PROFILE`` changes the launcher alone (``model.cu.j2``;
    the kernels' file has no such branch, checked here), and the kernels are the plain
    bundle's (``--cuda-graph`` changes the launcher only), which
    ``test_nvcc_builds_object_code_for_sm80_and_sm90`` compiles: the kernels go through
    nvcc here only where they differ."""
    plain, profile = cuda_graph_launchers
    d = plain.bundle(name)
    kernels = (d / "src" / "kernels.cu").read_text()
    assert "KILN_PROFILE" not in kernels
    for batch, flags in ((plain, []), (profile, ["-DKILN_PROFILE"])):
        if batch.built:
            continue
        unit = tmp_path / "bundle.cu"
        unit.write_text("".join(f'#include "{f.resolve()}"\n'
                                for f in (_launcher(d), d / "src" / "kernels.cu")))
        res = nvcc_object(d, unit, tmp_path / "bundle.o", [*flags, *STRICT_HOST])
        assert res.returncode == 0, (flags, res.stderr[-3000:])
        batch.assert_not_named(name)


def test_cuda_graph_is_refused_for_a_cpu_target_before_any_work(tmp_path: Path) -> None:
    from toolchain.cli import main
    from toolchain.errors import OptionError

    with pytest.raises(OptionError, match=r"--cuda-graph .* target 'c-generic' has kind 'c' "
                       r"\(use --target cuda-sm80 or cuda-sm90\)"):
        compile_model(ZOO["lenet5"].build(), "c-generic", tmp_path / "cpu", progress=False,
                      cuda_graph=True)
    assert not (tmp_path / "cpu").exists()
    assert main(["compile", "examples/lenet5.onnx", "--target", "x86_64-avx2", "--cuda-graph",
                 "-o", str(tmp_path / "cli")]) == 2
    assert not (tmp_path / "cli").exists()


def test_cuda_graph_with_emulate_is_ignored_with_a_warning_and_a_note() -> None:
    """The emulation runs the kernels on the CPU one by one: the option changes nothing
    there but metadata.json's note (the same files otherwise), and says so."""
    from toolchain.bundle import build_spec, render_files
    from toolchain.bundle.render import Streamed
    from toolchain.bundle.render_cuda import GRAPH_IGNORED
    from toolchain.errors import KilnWarning

    model, shapes = ZOO["mlp"].build(), ZOO["mlp"].input_shapes
    plain = render_files(build_spec(model, "cuda-sm80", input_shapes=shapes, progress=False,
                                    emulate=True))
    with pytest.warns(KilnWarning, match="--cuda-graph with --emulate: ignored"):
        spec = build_spec(model, "cuda-sm80", input_shapes=shapes, progress=False,
                          emulate=True, cuda_graph=True)
    graph = render_files(spec)
    assert spec.options["cuda_graph"] == GRAPH_IGNORED
    assert json.loads(graph["metadata.json"])["options"]["cuda_graph"] == GRAPH_IGNORED
    def content(c: object) -> object:  # (the weights blob is streamed: its digest)
        return c.digest() if isinstance(c, Streamed) else c

    assert plain.keys() == graph.keys()
    assert {f for f in plain if content(plain[f]) != content(graph[f])} == {"metadata.json"}


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", ["lenet5", "transformer_encoder"])
def test_cuda_graph_bundle_on_the_gpu_matches_the_reference(name: str, tmp_path: Path) -> None:
    """Captured once, launched every run; released (graph, stream, workspace) and
    captured again; LeNet-5's profiling build times the launches one by one."""
    import ctypes

    model, feeds, want = _reference(name)
    d = compile_model(model, "cuda-sm90", tmp_path / name, input_shapes=ZOO[name].input_shapes,
                      progress=False, cuda_graph=True)
    mod = load_bundle(d)
    assert _rel_err(mod(feeds), want) < 1e-4
    assert _rel_err(mod(feeds), want) < 1e-4  # the same graph, launched again
    assert mod.device_time(feeds, repeat=3) > 0  # <m>_run_device: the graph alone
    assert getattr(ctypes.CDLL(str(mod.library)), f"{mod.model}_release")() == 0
    assert _rel_err(mod(feeds), want) < 1e-4  # init again: a new workspace, a new graph
    if name != "lenet5":
        return  # (one profiling build is enough: step 1 of cuda_check.sh has 90 s)
    prof = load_bundle(d, profile=True)
    assert _rel_err(prof(feeds), want) < 1e-4
    rows = prof.launch_times(feeds, repeat=3)
    assert len(rows) == prof.metadata["device"]["launches"] and all(r["ms"] > 0 for r in rows)
    assert _rel_err(prof(feeds), want) < 1e-4  # the graph still runs after the timed launches


def _outputs_not_computed() -> object:
    """y = Relu(x), and three outputs no kernel computes: z = x (an input), w = c (a
    constant), v = y again (an output listed twice)."""
    from onnx import TensorProto, helper, numpy_helper

    def info(name: str, shape: list[int]) -> object:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["z"]),
             helper.make_node("Identity", ["c"], ["w"]), helper.make_node("Identity", ["y"], ["v"])]
    c = numpy_helper.from_array(np.linspace(-1, 2, 8, dtype=np.float32), "c")
    g = helper.make_graph(nodes, "passthrough", [info("x", [2, 8])],
                          [info("y", [2, 8]), info("z", [2, 8]), info("w", [8]),
                           info("v", [2, 8])], [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_output_that_is_a_constant_is_uploaded_and_copied_to_its_slot(
        tmp_path: Path) -> None:
    """The device copy of a constant output comes from the weights init uploads (it used to
    be copied from its own, never written, output slot onto itself)."""
    d = compile_model(_outputs_not_computed(), "cuda-sm80", tmp_path / "p", progress=False,
                      name="pt")
    dev = json.loads((d / "metadata.json").read_text())["device"]
    assert list(dev["weights"]) == ["w_w"]
    launcher = (d / "src/pt.cu").read_text()
    assert "cudaMemcpy(kiln_workspace + PT_WS_W_W, PT_WEIGHTS_DATA + 0, 32u" in launcher
    assert (f"cudaMemcpy((void *)(a + {dev['outputs']['w']}), (void *)(a + PT_WS_W_W), 32u, "
            "cudaMemcpyDeviceToDevice)") in launcher


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("graph", [False, True], ids=["plain", "cuda_graph"])
def test_outputs_no_kernel_computes_on_the_gpu(graph: bool, tmp_path: Path) -> None:
    model = _outputs_not_computed()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    want = run_graph(from_onnx(model), {"x": x})
    mod = load_bundle(compile_model(model, "cuda-sm90", tmp_path / "p", progress=False,
                                    name="pt", cuda_graph=graph))
    for _ in range(2):
        got = mod({"x": x})
        for k in ("y", "z", "w", "v"):
            np.testing.assert_array_equal(got[k], want[k])


def test_one_translation_unit_keeps_each_bundle_apart(tmp_path: Path) -> None:
    """``nvcc_unit``, what the nvcc batches above compile: a namespace a bundle, every macro
    a source defines undone after it, the headers from outside a bundle once, each just
    before the first source that needs it, and every launcher before any kernels (so a
    launcher cannot lean on what only the kernels include). Two bundles of one model name
    (the same API and kernel names) are refused."""
    model = _outputs_not_computed()
    a, b = (compile_model(model, "cuda-sm80", tmp_path / n, progress=False, name=n)
            for n in ("pa", "pb"))
    nvcc_unit([[_launcher(d), d / "src/kernels.cu"] for d in (a, b)], tmp_path / "u.cu")
    lines = (tmp_path / "u.cu").read_text().splitlines()
    sources = [ln for ln in lines if ln.startswith('#include "') and "/src/" in ln]
    assert sources == [f'#include "{f.resolve()}"' for f in (
        a / "src/pa.cu", b / "src/pb.cu", a / "src/kernels.cu", b / "src/kernels.cu")]
    for i, src in enumerate(sources):
        at = lines.index(src)
        assert lines[at - 1] == f"namespace kiln_unit_{i % 2} {{" and lines[at + 1] == "}"
        defined = re.findall(r"^\s*#\s*define\s+(\w+)", Path(src[10:-1]).read_text(), re.M)
        assert defined or i >= 2
        undone = lines[at + 2:at + 2 + len(set(defined))]
        assert undone == [f"#undef {m}" for m in sorted(set(defined))]
    outside = [ln for ln in lines if ln.startswith("#include") and ln not in sources]
    assert len(outside) == len(set(outside)) and '#include <math.h>' in outside
    assert lines.index('#include <math.h>') > lines.index(sources[1])  # the kernels' own
    assert lines.index("#include <cuda_runtime.h>") < lines.index(sources[0])
    twin = compile_model(model, "cuda-sm80", tmp_path / "again", progress=False, name="pa")
    with pytest.raises(ValueError, match="same model header"):
        nvcc_unit([[_launcher(d)] for d in (a, twin)], tmp_path / "v.cu")

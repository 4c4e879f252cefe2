"""``kiln tune`` for CUDA targets (``toolchain.autotune.cuda``): refused without a GPU with
the reason; ``--runner emulate`` builds each point with nvcc and checks it by the SIMT
emulation (records that are never applied); timed records apply in ``kiln compile
--target cuda-sm80 --records`` and change the generated ``kernels.cu``, and the emulated
bundle with them matches the reference; the GPU harness compiles with nvcc, and on a GPU
(tests marked ``gpu``) times kernels."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.bundle.helpers import logged_calls, make_model, random_inputs, recording_nvcc
from toolchain.autotune.cuda import CudaBuilder, GpuRunner
from toolchain.autotune.measure import BuildInput
from toolchain.autotune.records import Record, best_records, load_records
from toolchain.autotune.tasks import dense_task, extract_tasks
from toolchain.bundle import load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.cli import main
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.target import load_target

NVCC = shutil.which("nvcc")
TARGET = "cuda-sm80"
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")


def mlp(tmp: Path) -> Path:
    """``relu(x @ W + b)`` at batch 16: one tiled GEMM kernel (a ``cuda_gemm`` task)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]),
             helper.make_node("Add", ["t", "b"], ["u"]), helper.make_node("Relu", ["u"], ["y"])]
    m = make_model(nodes, {"x": (np.float32, [16, 32])}, {"y": (np.float32, [16, 24])},
                   {"w": rng.standard_normal((32, 24)).astype(np.float32),
                    "b": rng.standard_normal(24).astype(np.float32)})
    path = tmp / "models" / "mlp.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(m, path)
    return path


@pytest.mark.skipif(gpu_available(), reason="a GPU is here: the CUDA runner is not refused")
def test_tune_for_a_cuda_target_without_a_gpu_is_refused_with_the_reason(tmp_path, capsys):
    model = mlp(tmp_path)
    out = tmp_path / "out" / "r.jsonl"
    out.parent.mkdir()
    assert main(["tune", str(model), "--target", TARGET, "--trials", "4", "-o", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "times kernels on a GPU" in err and "--runner emulate" in err, err
    assert list(out.parent.iterdir()) == []  # nothing written


def test_a_cpu_target_refuses_the_emulate_runner(tmp_path, capsys):
    model = mlp(tmp_path)
    assert main(["tune", str(model), "--target", "c-generic", "--trials", "2", "-o",
                 str(tmp_path / "r.jsonl"), "--runner", "emulate", "--no-progress"]) == 2
    assert "is not a CUDA target" in capsys.readouterr().err


def test_fp16_precision_is_refused_for_a_target_without_tensor_cores(tmp_path, capsys):
    """(It used to tune nothing, or the fp32 kernels, without a word.)"""
    model = mlp(tmp_path)
    out = tmp_path / "r.jsonl"
    for extra in (["--spaces"], ["--trials", "2", "-o", str(out), "--no-progress"]):
        assert main(["tune", str(model), "--target", "c-generic", "--precision", "fp16",
                     *extra]) == 2
        assert "is not one (leave --precision out)" in capsys.readouterr().err
    assert not out.exists()


@needs_nvcc
def test_emulate_runner_checks_points_and_its_records_are_never_applied(tmp_path, capsys):
    """(Three nvcc runs, ``-fatbin`` for sm_80: the two points and the default's, about
    0.8 CPU s together; session 16, with a fresh cache.)"""
    model = mlp(tmp_path)
    out = tmp_path / "check.jsonl"
    assert main(["tune", str(model), "--target", TARGET, "--runner", "emulate", "--trials",
                 "2", "--batch", "2", "--jobs", "1", "-o", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "never applies these records" in text
    # nothing timed, so no speed-up: it printed 'best 1 check (1.00x the default)'
    assert "2 trials, 2 of 2 points pass the check against the default" in text, text
    assert "x the default" not in text
    recs = load_records(out)
    assert len(recs) == 2 and {r.runner for r in recs} == {"cuda-emulate"}
    assert all(r.conditions == {} for r in recs)  # a check: the same on any machine
    assert all(r.unit == "check" and r.error is None and r.cost < 1.0001 for r in recs)
    assert best_records(recs) == {}


def _kernels(tmp: Path, name: str, model: Path, records: Path | None,
             emulate: bool = False) -> str:
    out = tmp / name
    argv = ["compile", str(model), "--target", TARGET, "-o", str(out), "--no-progress"]
    argv += ["--records", str(records)] if records else []
    argv += ["--emulate"] if emulate else []
    assert main(argv) == 0
    return (out / "src" / ("kernels.c" if emulate else "kernels.cu")).read_text()


def test_timed_records_apply_and_change_the_generated_kernels(tmp_path, capsys):
    model = mlp(tmp_path)
    (task,) = extract_tasks(str(model), TARGET)
    s = task.space
    assert s.kind == "cuda_gemm"
    other = s.canonical({**s.default(), "ty": 4, "tx": 8, "ry": 2, "rx": 1, "bk": 8,
                         "double_buffer": False})
    path = tmp_path / "r.jsonl"
    rows = [Record(s.workload, s.kind, TARGET, s.trace(s.default()), [2e-6], runner="cuda-gpu"),
            Record(s.workload, s.kind, TARGET, s.trace(other), [1e-6], runner="cuda-gpu")]
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    checked = tmp_path / "c.jsonl"  # an emulate run's record: never applied
    checked.write_text(json.dumps(Record(s.workload, s.kind, TARGET, s.trace(other), [1.0],
                                         runner="cuda-emulate", unit="check").to_json()) + "\n")
    default = _kernels(tmp_path, "default", model, None)
    tuned = _kernels(tmp_path, "tuned", model, path)
    assert re.search(r"1 of its 1 tuned workload serves (\d+) kernels? of this compile: "
                     r"\1 kernels? \(1 workload\) built with a tuned schedule that differs "
                     r"from the default", capsys.readouterr().out)
    assert tuned != default

    def blocks(name: str) -> list[list[str]]:
        meta = json.loads((tmp_path / name / "metadata.json").read_text())
        return [row["block"] for row in meta["device"]["launch_table"]]

    assert blocks("default") == [["16", "2", "1"]] and blocks("tuned") == [["8", "4", "1"]]
    assert _kernels(tmp_path, "checked", model, checked) == default
    # the tuned kernel, emulated in a bundle, computes what the reference executor does
    _kernels(tmp_path, "emu", model, path, emulate=True)
    m = onnx.load(model)
    feeds = random_inputs(m, seed=3)
    got = load_bundle(tmp_path / "emu")(feeds)
    want = run_graph(from_onnx(m), feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)


@needs_nvcc
def test_the_gpu_harness_compiles_with_the_kernels_launches(tmp_path):
    """(One nvcc build of a host program, what every GPU trial pays once: about 1.9 CPU s,
    the suite's only build of the harness.)"""
    task = dense_task(32, 64, 48, TARGET)
    s = task.space
    p = s.canonical({**s.default(), "split_k": 2, "bk": 8})
    (b,) = CudaBuilder(TARGET, "gpu").build([BuildInput(task.node, task.target, s.workload,
                                                        s.trace(p))])
    assert b.error is None, b.error
    trial = Path(b.lib)
    assert trial.name == "trial" and trial.stat().st_mode & 0o111
    src = (trial.parent / "trial.cu").read_text()
    # split-K: two launches, the partial sums in the kernel's scratch; the L2 flushed
    assert src.count("<<<") == 2 and "scratch + 0" in src
    assert "cudaMemsetAsync(flush" in src and "cudaEventElapsedTime" in src


def test_the_tuners_builds_of_wgmma_points_are_for_sm90a(tmp_path, monkeypatch):
    """A tensor-core point on wgmma is built for sm_90a (its trial file says so too), as
    its bundle would be: built for plain sm_90 the wgmma calls are traps, which the SIMT
    emulation cannot see (it runs the host path) and a GPU trial would only report as a
    failed launch; a wmma point stays sm_90. (nvcc stood in for: the commands are what is
    checked.)"""
    from tests.bundle.test_cuda_fp16 import gemm_model

    exe, log = recording_nvcc(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    model, _ = gemm_model(64, 32, 64)
    sm90 = load_target("cuda-sm90")
    (task,) = [t for t in extract_tasks(model, sm90, precision="fp16")
               if t.space.kind == "cuda_tensorcore"]
    s = task.space
    wg = s.canonical({**s.default(), "intrinsic": "wgmma", "wy": 4, "wx": 1, "fm": 1,
                      "fn": 4, "kf": 2, "stages": 2, "pad": 8, "vector": 8,
                      "async_copy": True, "in_flight": 0})
    assert s.problems(wg) == [] and s.default()["intrinsic"] == "wmma"
    (b,) = CudaBuilder("cuda-sm90", "emulate").build(
        [BuildInput(task.node, task.target, s.workload, s.trace(wg))])
    assert b.error is None, b.error
    # the point's build, then the default's (which emulate checks the point against)
    point, default = [c for c in logged_calls(log) if "-o" in c]
    assert "-arch=sm_90a" in point and "-arch=sm_90" in default, (point, default)
    heads = {p.read_text().splitlines()[0].split(" for ")[-1]
             for p in (tmp_path / "cache").rglob("kernels.cu")}
    assert heads == {"cuda-sm90 (sm_90a). Do not edit. */",
                     "cuda-sm90 (sm_90). Do not edit. */"}, heads


@pytest.mark.gpu
@needs_gpu
def test_the_gpu_runner_times_kernels_on_the_gpu(tmp_path):
    task = dense_task(256, 256, 256, TARGET)
    s = task.space
    builds = CudaBuilder(TARGET, "gpu").build(
        [BuildInput(task.node, task.target, s.workload, s.trace(s.default()))])
    (res,) = GpuRunner(repeat=3).run(builds)
    assert res.error is None, res.error
    assert len(res.costs) == 3 and all(0 < c < 0.1 for c in res.costs)


@pytest.mark.gpu
@needs_gpu
def test_kiln_tune_on_the_gpu_writes_records_that_compile_applies(tmp_path, capsys):
    model = mlp(tmp_path)
    out = tmp_path / "gpu.jsonl"
    # (random search: the GPU machines have no xgboost)
    assert main(["tune", str(model), "--target", TARGET, "--trials", "4", "--batch", "4",
                 "--search", "random", "-o", str(out), "--no-progress"]) == 0
    recs = load_records(out)
    assert len(recs) == 4 and any(r.ok and r.unit == "s" for r in recs)
    # how they were timed: the repeats and the GPU, as nvidia-smi names it
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.splitlines()[0]
    assert {json.dumps(r.conditions) for r in recs} == {json.dumps(
        {"repeat": 3, "gpu": gpu.strip()})}
    capsys.readouterr()
    _kernels(tmp_path, "tuned", model, out)
    # (the best of 4 random points may be the default one: counted apart, not as tuned)
    text = capsys.readouterr().out
    assert "1 of its 1 tuned workload serves " in text
    assert f"  measured: 1 kernel (1 workload) with --repeat 3, GPU {gpu.strip()!r}" in text

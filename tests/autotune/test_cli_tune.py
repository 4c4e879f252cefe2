"""``kiln tune`` and ``kiln compile --records`` end to end on the LeNet-5 example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolchain.autotune.conditions import cpu_model
from toolchain.autotune.records import Record, load_records
from toolchain.autotune.tasks import extract_tasks
from toolchain.cli import main

MODEL = str(Path(__file__).resolve().parents[2] / "examples" / "lenet5.onnx")
TARGET = "x86_64-avx2"


def test_tune_writes_records_and_resumes(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    args = ["tune", MODEL, "--target", TARGET, "-o", str(out), "--jobs", "1",
            "--no-progress", "--repeat", "1", "--batch", "2"]
    assert main([*args, "--trials", "3", "--plot", str(tmp_path / "svg")]) == 0
    recs = load_records(out)
    assert len(recs) == 3 and all(r.target == TARGET and r.features for r in recs)
    assert not (tmp_path / "r.jsonl.partial").exists()
    assert list((tmp_path / "svg").glob("*.svg"))
    capsys.readouterr()
    assert main([*args, "--trials", "5"]) == 0  # two more, the first three kept
    again = load_records(out)
    assert len(again) == 5 and [r.to_json() for r in again[:3]] == [r.to_json() for r in recs]
    text = capsys.readouterr().out
    assert "2 new trials (5 in all)" in text
    # the first three tasks' defaults were timed by the first run, the last two's by this
    lines = [ln for ln in text.splitlines() if "x the default" in ln]
    assert len(lines) == 5
    assert sum("x the default, timed in an earlier run)" in ln for ln in lines) == 3, text
    # every record says how it was measured; resuming them measured otherwise is refused
    assert {json.dumps(r.conditions) for r in again} == {json.dumps(
        {"repeat": 1, "flush_mb": 8, "cold_mb": 0, "machine": cpu_model(), "cores": 1})}
    before = out.read_text()
    assert main([*args, "--trials", "6", "--repeat", "2"]) == 2
    assert (f"{out}: 5 earlier trials of this run's kernels measured with --repeat 1; this "
            "run measures with --repeat 2, and costs measured differently do not compare: run "
            "with --repeat 1 to resume them, or write to another file (-o)"
            in capsys.readouterr().err)
    assert out.read_text() == before and not (tmp_path / "r.jsonl.partial").exists()


@pytest.mark.parametrize("argv, words", [
    (["tune", "nope.onnx", "--trials", "4"], "model file nope.onnx does not exist"),
    (["tune", MODEL, "--trials", "0"], "--trials 0: must be at least 1"),
    (["tune", MODEL, "--trials", "2", "--cold-mb", "-1"], "--cold-mb -1: must be 0 or more"),
    # every trial failed (0) or an internal error (below 0); the others taken silently
    (["tune", MODEL, "--trials", "2", "--timeout", "0"], "--timeout 0: must be more than 0"),
    (["tune", MODEL, "--trials", "2", "--timeout", "-1"], "--timeout -1: must be more than"),
    (["tune", MODEL, "--trials", "2", "--jobs", "0"], "--jobs 0: must be at least 1"),
    (["tune", MODEL, "--trials", "2", "--ray", "local", "--ray-devices", "0"],
     "--ray-devices 0: must be at least 1"),
    (["tune", MODEL, "--trials", "2", "--cold-mb", "8", "--runner", "qemu"],
     "--runner qemu counts instructions"),
    # a cross target's kernels cannot be timed on this CPU: every trial would fail
    (["tune", MODEL, "--trials", "2", "--target", "cortex-m4"],
     "target 'cortex-m4' is built with arm-none-eabi-gcc, whose code does not run here; "
     "use --runner qemu"),
    (["tune", MODEL, "--trials", "2", "--target", "aarch64-neon", "--runner", "local"],
     "target 'aarch64-neon' is built with aarch64-linux-gnu-gcc"),
])
def test_bad_input_is_refused_and_writes_nothing(tmp_path, capsys, argv, words):
    out = tmp_path / "r.jsonl"
    assert main([*argv, "-o", str(out), "--no-progress"]) == 2
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _bundle(tmp_path: Path, name: str, records: Path | None) -> dict[str, str]:
    out = tmp_path / name
    argv = ["compile", MODEL, "--target", TARGET, "-o", str(out), "--no-progress"]
    assert main(argv + (["--records", str(records)] if records else [])) == 0
    return {p.name: p.read_text() for p in (out / "src").glob("kernels.c")}


def test_records_apply_and_change_the_generated_schedule(tmp_path, capsys):
    task = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "conv2d")
    s = task.space
    other = next(p for p in s.valid_points() if p["rw"] != s.default()["rw"]
                 and p["order"] != s.default()["order"])
    path = tmp_path / "r.jsonl"
    rows = [Record(s.workload, s.kind, TARGET, s.trace(s.default()), [2.0]),
            Record(s.workload, s.kind, TARGET, s.trace(other), [1.0]),  # the best
            Record("gemm|unrelated", "gemm", TARGET, s.trace(other), [0.1])]
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    unrelated = tmp_path / "u.jsonl"
    unrelated.write_text(json.dumps(rows[2].to_json()) + "\n")
    default = _bundle(tmp_path, "default", None)
    tuned = _bundle(tmp_path, "tuned", path)
    assert (f"tuning records from {path}: 1 of its 2 tuned workloads serves 1 kernel of "
            "this compile: 1 kernel (1 workload) built with a tuned schedule that differs "
            "from the default; every other kernel default" in capsys.readouterr().out)
    assert tuned != default
    # records of other workloads change nothing: the default schedules, byte for byte
    assert _bundle(tmp_path, "same", unrelated) == default
    # ... and the summary says why none applied
    assert (f"tuning records from {unrelated}: none of its 1 tuned workload is a workload "
            f"of this compile's kernels (tuned for {TARGET}): every kernel default"
            in capsys.readouterr().out)
    # the Python API applies them the same way
    import toolchain

    pkg = toolchain.compile(MODEL, TARGET, tmp_path / "api", records=path)
    assert {p.name: p.read_text() for p in (pkg.path / "src").glob("kernels.c")} == tuned


def test_records_whose_best_point_is_the_default_are_not_counted_as_tuned(tmp_path, capsys):
    """A records file whose best point for a workload is the default schedule builds the
    default bundle byte for byte, and the summary counts it apart from the tuned schedules
    (it said "1 kernel schedule from R"); LeNet-5's two convolutions are two workloads."""
    tasks = extract_tasks(MODEL, TARGET)
    conv = [t.space for t in tasks if t.space.kind == "conv2d"][:2]
    assert len(conv) == 2
    s, t = conv
    other = next(p for p in t.valid_points() if p != t.canonical(t.default()))
    path = tmp_path / "r.jsonl"
    rows = [Record(s.workload, s.kind, TARGET, s.trace(s.default()), [1.0]),  # the best
            Record(s.workload, s.kind, TARGET, s.trace(next(
                p for p in s.valid_points() if p != s.canonical(s.default()))), [2.0]),
            Record(t.workload, t.kind, TARGET, t.trace(other), [1.0])]
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    only_default = tmp_path / "d.jsonl"
    only_default.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows[:2]))
    assert _bundle(tmp_path, "d", only_default) == _bundle(tmp_path, "default", None)
    out = capsys.readouterr().out
    assert (f"tuning records from {only_default}: 1 of its 1 tuned workload serves 1 kernel "
            "of this compile: 0 kernels built with a tuned schedule that differs from the "
            "default, 1 kernel (1 workload) whose best record is the default schedule; every "
            "other kernel default" in out)
    _bundle(tmp_path, "both", path)
    assert (f"tuning records from {path}: 2 of its 2 tuned workloads serve 2 kernels of "
            "this compile: 1 kernel (1 workload) built with a tuned schedule that differs "
            "from the default, 1 kernel (1 workload) whose best record is the default "
            "schedule;" in capsys.readouterr().out)


def _twin_convs(path: Path) -> Path:
    """Two 3x3 convolutions of one shape (8 -> 8 channels on 8x8, each with a ReLU),
    their weights different: two kernels of one workload."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(
        np.float32), f"w{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4, kernel_shape=[3, 3]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1] * 4, kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "twin", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 8, 8])], w)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_summary_counts_kernels_as_well_as_workloads(tmp_path, capsys):
    """One workload serving two kernels (the second's schedule reused from the first,
    which never asks for the record again): the summary said "1 of its 1 tuned workload
    is a kernel of this compile: 1 built with a tuned schedule", counting the workload as
    one kernel. It says both, and the bundle runs both kernels tuned, correctly."""
    model = _twin_convs(tmp_path / "twin.onnx")
    (task,) = extract_tasks(model, TARGET)
    s = task.space
    assert task.weight == 2
    other = s.check({**s.default(), "rw": 4, "order": "window_outer"})
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(Record(s.workload, s.kind, TARGET, s.trace(other),
                                      [1.0]).to_json()) + "\n")
    out = tmp_path / "b"
    assert main(["compile", str(model), "--target", TARGET, "-o", str(out), "--no-progress",
                 "--records", str(path)]) == 0
    assert (f"tuning records from {path}: 1 of its 1 tuned workload serves 2 kernels of this "
            "compile: 2 kernels (1 workload) built with a tuned schedule that differs from "
            "the default; every other kernel default" in capsys.readouterr().out)
    import toolchain

    res = toolchain.run(out, check=True)
    assert res.check and res.ok, res


def test_records_of_two_runners_for_one_workload_are_refused(tmp_path, capsys):
    """Two records files concatenated (local-cpu seconds and qemu-icount instructions of
    the same kernel): the best of 900 instructions against 2 ms was taken silently. Refused
    naming the file and the workload, nothing written, by the CLI and the API; a Ray
    runner's seconds go with its device's, and a workload of one runner is not refused."""
    import toolchain
    from toolchain.errors import InputError

    s = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "conv2d").space
    other = next(p for p in s.valid_points() if p != s.canonical(s.default()))
    path = tmp_path / "cat.jsonl"
    rows = [Record(s.workload, s.kind, TARGET, s.trace(s.default()), [2e-3]),
            Record(s.workload, s.kind, TARGET, s.trace(other), [900.0], runner="qemu-icount",
                   unit="instructions"),
            Record("gemm|another", "gemm", TARGET, s.trace(other), [1.0], runner="rtl",
                   unit="cycles")]
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    out = tmp_path / "b"
    assert main(["compile", MODEL, "--target", TARGET, "-o", str(out), "--no-progress",
                 "--records", str(path)]) == 2
    assert (f"records file {path}: workload {s.workload} has timed trials from 2 runners, "
            "local-cpu (s) and qemu-icount (instructions), whose costs do not compare"
            in capsys.readouterr().err)
    assert not out.exists()
    with pytest.raises(InputError, match="workload conv2d.*2 runners"):
        toolchain.compile(MODEL, TARGET, out, records=path)
    assert not out.exists()
    ray = tmp_path / "ray.jsonl"  # the same device: applied as before
    ray.write_text("".join(json.dumps(r.to_json()) + "\n" for r in (
        rows[0], Record(s.workload, s.kind, TARGET, s.trace(other), [1e-3],
                        runner="ray-local-cpu"))))
    _bundle(tmp_path, "ray", ray)
    assert "1 kernel (1 workload) built with a tuned schedule that differs" in \
        capsys.readouterr().out


def test_a_record_that_is_no_longer_a_valid_point_falls_back_with_a_warning(tmp_path,
                                                                            capsys):
    task = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "conv2d")
    s = task.space
    bad = Record(s.workload, s.kind, TARGET,
                 type(s.trace(s.default()))(s.kind, (("ob", 12345),)), [1.0])
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(bad.to_json()) + "\n")
    assert _bundle(tmp_path, "fallback", path) == _bundle(tmp_path, "default", None)
    out, err = capsys.readouterr()
    assert "tuning record not applied" in err
    assert ("1 of its 1 tuned workload serves 1 kernel of this compile: 0 kernels built "
            "with a tuned schedule that differs from the default, 1 kernel (1 workload) not "
            "applied (no longer a valid point, warned above)" in out)


def test_cold_mb_reaches_the_local_runner(tmp_path, monkeypatch):
    """``--cold-mb N``: the local runner cycles each kernel's arguments through N MiB of
    copies (``rotate_bytes``), as ``benchmarks/tune.py --resnet`` tunes."""
    from toolchain.autotune import measure

    seen, make = {}, measure.make_runner

    def spy(kind, **options):
        seen.update(options)
        return make(kind, **options)

    monkeypatch.setattr(measure, "make_runner", spy)
    out = tmp_path / "r.jsonl"
    assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--jobs", "1",
                 "--no-progress", "--repeat", "1", "--trials", "1", "--cold-mb", "16"]) == 0
    assert seen["rotate_bytes"] == 16 << 20 and len(load_records(out)) == 1


def test_records_path_under_a_file_says_so(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "r.jsonl"
    assert main(["tune", MODEL, "--trials", "1", "-o", str(out), "--no-progress"]) == 2
    assert f"folder {tmp_path / 'afile'} is a file, not a directory" in capsys.readouterr().err


def test_the_summary_says_when_the_default_point_failed(tmp_path, monkeypatch, capsys):
    """A best point against a failed default: the summary printed ``best 4.1 GFLOP/s ()``."""
    from toolchain.autotune import measure, tasks

    dense = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "gemm")
    monkeypatch.setattr(tasks, "extract_tasks", lambda *a, **k: [dense])
    make = measure.make_runner

    class DefaultTimesOut:
        def __init__(self, inner):
            self.inner, self.name, self.unit = inner, inner.name, inner.unit

        def run(self, builds):
            got = self.inner.run(builds)
            return [measure.MeasureResult(None, "run: timed out after 10 s"), *got[1:]]

        def close(self):
            self.inner.close()

    monkeypatch.setattr(measure, "make_runner", lambda kind, **o: DefaultTimesOut(make(kind,
                                                                                     **o)))
    out = tmp_path / "r.jsonl"
    assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--jobs", "1",
                 "--no-progress", "--repeat", "1", "--trials", "2", "--batch", "2"]) == 0
    text = capsys.readouterr().out
    assert (f"  {dense.name}: 2 trials (1 failed), best " in text
            and " GFLOP/s (the default point failed: no speed-up to quote)" in text), text
    assert [r.error for r in load_records(out)] == ["run: timed out after 10 s", None]


@pytest.mark.parametrize("failing", [("conv2d", "gemm"), ("conv2d",)])
def test_the_use_hint_is_printed_only_with_something_to_use(tmp_path, monkeypatch, capsys,
                                                          failing):
    """Every trial of a task failed: `use: kiln compile ... --records` was printed even when
    no task had a successful trial; now it says there is nothing to use, or names the tasks
    that keep their default schedule. (A runner that fails the kinds ``failing`` and gives
    the others a cost: no kernel is run.)"""
    from toolchain.autotune import measure, tasks

    picked = [next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == kind)
              for kind in ("conv2d", "gemm")]
    monkeypatch.setattr(tasks, "extract_tasks", lambda *a, **k: picked)

    class Fails:
        name, unit = "local-cpu", "s"

        def run(self, builds):
            return [measure.MeasureResult(None, "run: crashed") if b.trace.space in failing
                    else measure.MeasureResult([1e-3]) for b in builds]

        def close(self):
            pass

    monkeypatch.setattr(measure, "make_runner", lambda kind, **o: Fails())
    out = tmp_path / "r.jsonl"
    assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--jobs", "1",
                 "--no-progress", "--trials", "2", "--batch", "2"]) == 0
    text = capsys.readouterr().out
    assert len(load_records(out)) == 2
    conv = picked[0].name
    if len(failing) == 2:
        assert "use: kiln compile" not in text
        assert (f"  nothing to use: no trial of any task succeeded ({out} holds the errors, "
                "see each task above); kiln compile --records would build every kernel with "
                "the default schedule") in text, text
    else:
        assert (f"use: kiln compile {MODEL} --target {TARGET} --records {out} -o DIR ({conv}: "
                "no successful trial, it keeps the default schedule)") in text, text


def test_resuming_trials_of_another_machine_is_refused_and_old_ones_are_noted(tmp_path,
                                                                              capsys):
    """Records measured on another CPU were resumed as this machine's costs (the records
    did not say where they were measured): refused, naming the file, both CPUs and what
    to do. Records an earlier Kiln wrote do not say: resumed, with a note."""
    s = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "gemm").space
    cond = {"repeat": 1, "flush_mb": 8, "cold_mb": 0, "machine": "Imaginary CPU 9000",
            "cores": 1}
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps(Record(s.workload, s.kind, TARGET, s.trace(s.default()),
                                     [1e-3], conditions=cond).to_json()) + "\n")
    before = out.read_text()
    argv = ["tune", MODEL, "--target", TARGET, "-o", str(out), "--trials", "1", "--repeat",
            "1", "--no-progress"]
    assert main(argv) == 2
    assert (f"{out}: 1 earlier trial of this run's kernels measured on CPU 'Imaginary CPU "
            f"9000'; this run measures on CPU {cpu_model()!r}, and costs measured differently "
            "do not compare: resume them on the machine that measured them, or write to "
            "another file (-o)" in capsys.readouterr().err)
    assert out.read_text() == before
    old = json.dumps(Record(s.workload, s.kind, TARGET, s.trace(s.default()),
                            [1e-3]).to_json()) + "\n"
    out.write_text(old)
    assert main(argv) == 0  # the budget spent already: nothing measured
    assert (f"note: 1 earlier trial of this run's kernels in {out} does not say how it was "
            "measured (written by an earlier Kiln): resumed as if measured as this run "
            f"measures (--repeat 1, --flush-mb 8, --cold-mb 0, CPU {cpu_model()!r}, 1 core)"
            in capsys.readouterr().out)
    assert out.read_text() == old


def test_compile_reports_how_the_applied_records_were_measured(tmp_path, capsys):
    """``kiln compile --records`` says, per set of conditions, how many kernels' records
    were measured so, and names another machine's CPU; a workload whose records come from
    two conditions (files concatenated) is warned of. Applied either way: a record only
    chooses among valid points."""
    conv = [t.space for t in extract_tasks(MODEL, TARGET) if t.space.kind == "conv2d"][:2]
    s, t = conv
    far = {"repeat": 3, "flush_mb": 8, "cold_mb": 0, "machine": "Imaginary CPU 9000",
           "cores": 1}
    other = [s.check({**s.default(), "rw": 2}), t.check({**t.default(), "rw": 2})]
    rows = [Record(s.workload, s.kind, TARGET, s.trace(other[0]), [1.0], conditions=far),
            Record(t.workload, t.kind, TARGET, t.trace(other[1]), [1.0])]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    _bundle(tmp_path, "a", path)
    got = capsys.readouterr()
    assert ("  measured: 1 kernel (1 workload) with --repeat 3, --flush-mb 8, --cold-mb 0, "
            f"CPU 'Imaginary CPU 9000', 1 core (not this machine's CPU, {cpu_model()!r}); 1 "
            "kernel (1 workload) in conditions not recorded (written by an earlier Kiln)"
            in got.out), got.out
    assert "measured with" not in got.err
    cat = tmp_path / "cat.jsonl"
    cat.write_text(path.read_text() + json.dumps(Record(
        s.workload, s.kind, TARGET, s.trace(s.default()), [2.0],
        conditions=dict(far, repeat=5)).to_json()) + "\n")
    _bundle(tmp_path, "b", cat)
    said = (f"records file {cat}: workload {s.workload} has records measured with --repeat 3 "
            "and with --repeat 5, whose costs do not compare; the least of them was applied")
    assert said in capsys.readouterr().err
    import toolchain
    from toolchain.errors import KilnWarning

    with pytest.warns(KilnWarning) as seen:  # the Python API warns the same
        toolchain.compile(MODEL, TARGET, tmp_path / "api", records=cat)
    assert [str(w.message) for w in seen if said in str(w.message)]


def test_resuming_another_runners_trials_is_refused(tmp_path, capsys):
    """A records file's trials of these kernels measured by another runner (instructions
    under QEMU here) were resumed as if they were seconds: the search, the summary's
    speed-up and the file's best mixed the two. Refused, the file untouched; the header
    says which earlier trials are this run's."""
    s = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "gemm").space
    out = tmp_path / "r.jsonl"
    rows = [Record(s.workload, s.kind, TARGET, s.trace(s.default()), [5000.0],
                   runner="qemu-icount", unit="instructions"),
            Record("gemm|another model", "gemm", TARGET, s.trace(s.default()), [1e-3])]
    out.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    before = out.read_text()
    assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--trials", "4",
                 "--no-progress"]) == 2
    got = capsys.readouterr()
    assert f"(2 earlier trials in {out}, 1 of this run's kernels: the rest kept" in got.out
    assert (f"{out}: 1 earlier trial of this run's kernels measured by qemu-icount "
            "(instructions); this run measures by local-cpu (s)") in got.err, got.err
    assert out.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


class _TestTerminated(Exception):
    pass


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_keeps_its_trials_says_so_and_closes_its_workers(
        tmp_path, monkeypatch, capsys, how):
    """Ctrl-C or SIGTERM mid-run: the trials so far stay in OUT.partial and the message
    says so (it said 'kiln: interrupted' alone); SIGTERM stops the run as Ctrl-C does —
    it killed the process outright and left the build pool's workers running."""
    import os
    import signal

    from toolchain.autotune import measure, tuner

    closed = []
    monkeypatch.setattr(measure.LocalBuilder, "close", lambda self: closed.append(self))

    def tune_tasks(tasks, trials, *, writer, **kw):
        s = tasks[0].space
        writer.append(Record(s.workload, s.kind, TARGET, s.trace(s.default()), [1e-3]))
        if how == "SIGINT":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the run")

    def terminated(signum, frame):  # what SIGTERM does here if kiln tune leaves it be
        raise _TestTerminated

    monkeypatch.setattr(tuner, "tune_tasks", tune_tasks)
    before = signal.signal(signal.SIGTERM, terminated)
    try:
        out = tmp_path / "r.jsonl"
        assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--trials", "8",
                     "--no-progress"]) == 130
        assert signal.getsignal(signal.SIGTERM) is terminated  # put back
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert (f"kiln tune: interrupted: 1 new trial kept in {out}.partial (1 in all); run the "
            "same command to resume") in err, err
    assert len(closed) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl.partial"]
    assert len(load_records(f"{out}.partial")) == 1


def test_the_header_names_the_partial_file_it_resumes_from(tmp_path, monkeypatch, capsys):
    """An interrupted run's OUT.partial is what the next run resumes, OUT or no OUT; the
    header named OUT (perhaps deleted to start afresh) as the trials' file."""
    from toolchain.autotune import tuner

    s = next(t for t in extract_tasks(MODEL, TARGET) if t.space.kind == "gemm").space
    out = tmp_path / "r.jsonl"
    Path(f"{out}.partial").write_text(json.dumps(
        Record(s.workload, s.kind, TARGET, s.trace(s.default()), [1e-3]).to_json()) + "\n")
    monkeypatch.setattr(tuner, "tune_tasks", lambda *a, **k: [])
    assert main(["tune", MODEL, "--target", TARGET, "-o", str(out), "--trials", "1",
                 "--no-progress"]) == 0
    assert f"(1 earlier trial in {out}.partial)" in capsys.readouterr().out
    assert len(load_records(out)) == 1 and not Path(f"{out}.partial").exists()


class _FakeRay:
    """Ray's ``remote``/``wait``/``get`` in this process: each submitted task is one
    reference, finished by ``wait`` in submission order; counts the most in flight."""

    def __init__(self):
        self.pending, self.most = 0, 0

    def remote(self, **_options):
        def wrap(fn):
            fake = self

            class Task:
                @staticmethod
                def remote(inp, kind):
                    fake.pending += 1
                    fake.most = max(fake.most, fake.pending)
                    return ("ref", id(inp), inp)
            return Task
        return wrap

    def wait(self, refs, num_returns=1):
        self.pending -= 1
        return refs[:1], refs[1:]

    def get(self, ref):
        return ref[2]


@pytest.mark.parametrize("jobs, most", [(2, 2), (None, 5)])
def test_jobs_caps_the_ray_build_tasks_in_flight(monkeypatch, jobs, most):
    """``kiln tune --ray ADDRESS --jobs N`` ignored N (documented: Ray's workers build):
    now at most N build tasks are on the cluster at once, results in order; without
    --jobs a batch's builds are submitted together, as before."""
    from toolchain.autotune import ray_backend

    fake = _FakeRay()
    monkeypatch.setattr(ray_backend, "_ray", lambda: fake)
    builder = ray_backend.RayBuilder("local", jobs)
    items = [object() for _ in range(5)]
    assert builder.build(items) == items
    assert fake.most == most and fake.pending == 0


def test_jobs_and_flush_mb_reach_the_ray_backend(tmp_path, monkeypatch):
    """--jobs and --flush-mb were not passed to the Ray backend (its runner flushed the
    default 8 MiB whatever --flush-mb said); they are (measured here by the local pool
    standing in for the cluster: starting Ray costs seconds)."""
    from toolchain.autotune import measure, ray_backend

    seen = []

    def fake(address, runner, target, **options):
        seen.append((address, options))
        return measure.LocalBuilder(1), measure.make_runner(
            "local", repeat=1, flush_bytes=options["flush_bytes"])

    monkeypatch.setattr(ray_backend, "ray_measurement", fake)
    args = ["tune", MODEL, "--target", TARGET, "--trials", "1", "--no-progress",
            "--repeat", "1", "--ray", "local"]
    assert main([*args, "-o", str(tmp_path / "a.jsonl"), "--jobs", "3", "--flush-mb",
                 "0"]) == 0
    assert main([*args, "-o", str(tmp_path / "b.jsonl")]) == 0
    assert [(a, o["jobs"], o["flush_bytes"]) for a, o in seen] == [("local", 3, 0),
                                                                   ("local", None, 8 << 20)]

"""The search spaces of the generic CPU schedules of the other ops (``cpu_ops``: the rule
-driven schedule of fused groups without a complex anchor — softmax, layer norm, an
element-wise chain, pooling, a transpose, a reduction) and of ``FusedAttention``
(``attention``): the defaults are the heuristics and build the kernels they built before,
traces round-trip, invalid points are refused, ``kiln tune``'s task extraction finds them,
every knob value gives the reference's results through a bundle, and records change the
generated C."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import RTOL, compile_run, make_model, random_inputs
from tests.schedules._cpu_targets import RUNNABLE
from toolchain.autotune.apply import applying, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.autotune.tasks import extract_tasks
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph

F = np.float32
N = helper.make_node
TARGET = "x86_64-avx2" if "x86_64-avx2" in RUNNABLE else "c-generic"


def ops_model():
    """Small groups of every kind the ``cpu_ops`` rules schedule differently: a softmax
    row, a layer norm, the GELU chain, a transpose, a 3 x 3 stride-2 max pool, a mean over
    the middle axis; and the attention pattern (``FusedAttention``)."""
    half, one = np.array(0.5, F), np.array(1.0, F)
    inits = {"sq2": np.array(math.sqrt(2.0), F), "half": half, "one": one,
             "g": np.linspace(0.5, 1.5, 24).astype(F), "b": np.linspace(-1, 1, 24).astype(F),
             "c": np.array(4.0, F)}
    nodes = [
        N("Softmax", ["x"], ["sm"], axis=-1),
        N("LayerNormalization", ["sm", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        N("Div", ["ln", "sq2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]),
        N("Mul", ["ln", "a"], ["m"]), N("Mul", ["m", "half"], ["gelu"]),
        N("Transpose", ["gelu"], ["t"], perm=[0, 2, 1]),
        N("ReduceMean", ["t"], ["rm"], axes=[1], keepdims=0),
        N("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        # attention: softmax(q k^T / 4) v, heads of 16
        N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["s0"]),
        N("Div", ["s0", "c"], ["s1"]), N("Softmax", ["s1"], ["pr"], axis=-1),
        N("MatMul", ["pr", "v"], ["y"]),
    ]
    inputs = {"x": (F, [2, 40, 24]), "p": (F, [1, 8, 12, 12]), "q": (F, [1, 2, 16, 16]),
              "k": (F, [1, 2, 24, 16]), "v": (F, [1, 2, 24, 16])}
    outputs = {"rm": (F, [2, 40]), "mp": (F, [1, 8, 6, 6]), "y": (F, [1, 2, 16, 16])}
    return make_model(nodes, inputs, outputs, inits)


@pytest.fixture(scope="module")
def tasks():
    return extract_tasks(ops_model(), TARGET, generic=True)


def test_kiln_tune_finds_the_groups_without_an_anchor(tasks) -> None:
    """``kiln tune --generic`` (``extract_tasks(generic=True)``) takes the groups without
    a complex anchor; without it only the anchors' (here the attention)."""
    assert [t.space.kind for t in extract_tasks(ops_model(), TARGET)] == ["attention"]
    kinds = sorted(t.space.kind for t in tasks)
    assert kinds.count("attention") == 1
    assert kinds.count("cpu_ops") >= 5   # softmax, layer norm, GELU, transpose+mean, pool
    ops = {t.space.workload.split("|")[1] for t in tasks if t.space.kind == "cpu_ops"}
    assert {"Softmax", "LayerNormalization"} <= ops and ops & {"MaxPool", "LayoutPool"}
    assert any("Erf" in o for o in ops)   # the GELU chain, with the transpose and the mean
    # a target with one float lane (Cortex-M) declares no cpu_ops space
    assert not [t for t in extract_tasks(ops_model(), "cortex-m4", generic=True)
                if t.space.kind == "cpu_ops"]


def test_defaults_are_the_heuristics_and_traces_round_trip(tasks) -> None:
    from toolchain.codegen import get_renderer
    from toolchain.schedules.registry import schedule_for
    from toolchain.target import load_target
    from toolchain.tir.transform.pipeline import lower

    t = load_target(TARGET)
    for task in tasks:
        s = task.space
        if s.kind == "cpu_ops":
            assert s.default()["vector_bits"] == t.vector_width_bits
            assert all(v for k, v in s.default().items() if k in ("rfactor", "attach"))
        for p in s.valid_points()[:8]:
            tr = s.trace(p)
            assert Trace.from_json(tr.to_json()) == tr and s.point_of(tr) == p
        code = [get_renderer("c", openmp=False).render(
            lower(op.schedule.mod, target=t), name=None).code for op in
            (schedule_for(task.node, t), _forced(task, s.default()))]
        assert code[0] == code[1], task.name


def _forced(task, point):
    from toolchain.schedules.registry import schedule_for

    with forcing({task.space.workload: task.space.trace(point)}):
        return schedule_for(task.node, task.target)


def test_invalid_points_are_refused(tasks) -> None:
    sm = next(t for t in tasks if t.space.workload.startswith("cpu_ops|Softmax"))
    with pytest.raises(InvalidPoint, match="vector_bits=64 is not one of"):
        sm.space.check({**sm.space.default(), "vector_bits": 64})
    with pytest.raises(InvalidPoint, match="unknown knob 'tile'"):
        sm.space.check({**sm.space.default(), "tile": 8})   # no transpose in a softmax
    from toolchain.schedules.registry import schedule_for

    with pytest.raises(InvalidPoint, match="rfactor='yes' is not one of"):
        with forcing({sm.space.workload: Trace("cpu_ops", (("rfactor", "yes"),))}):
            schedule_for(sm.node, sm.target)
    at = next(t for t in tasks if t.space.kind == "attention")
    assert at.space.knob("rows").choices == (1, 2, 4, 8, 16)
    with pytest.raises(InvalidPoint, match="rows=3 is not one of"):
        at.space.check({**at.space.default(), "rows": 3})


def _extremes(space) -> list[dict]:
    """Points that together take every value of every knob: the i-th point takes each
    knob's i-th choice (its last where it has fewer); where that breaks a rule, the later
    knobs fall back to their first choice one by one until it holds."""
    out = []
    for i in range(max(len(k.choices) for k in space.knobs)):
        p = {k.name: k.choices[min(i, len(k.choices) - 1)] for k in space.knobs}
        for k in space.knobs[1:]:
            if space.is_valid(p):
                break
            p[k.name] = k.choices[0]
        assert space.is_valid(p), p
        out.append(space.canonical(p))
    return out


def test_every_knob_value_matches_the_reference_through_a_bundle(tasks, tmp_path) -> None:
    """Bundles (host build, strict flags) with every task at the i-th choice of each of its
    knobs, i = 0 .. the most choices: every knob value in some bundle; the outputs equal
    the reference executor's (slow-ish: five small bundles, ~10 s)."""
    model = ops_model()
    feeds = random_inputs(model, seed=3)
    want = run_graph(from_onnx(model), feeds)
    points = {t.space.workload: (t.space, _extremes(t.space)) for t in tasks}
    rounds = max(len(p) for _, p in points.values())
    seen = {w: set() for w in points}
    for i in range(rounds):
        traces = {}
        for w, (s, ps) in points.items():
            p = ps[min(i, len(ps) - 1)]
            traces[w] = s.trace(p)
            seen[w].update((k, repr(v)) for k, v in p.items())
        with applying(traces) as applied:
            _, got = compile_run(model, tmp_path / f"r{i}", feeds, target=TARGET,
                                 progress=False)
        assert len(applied) == len(traces)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=RTOL, atol=1e-5, err_msg=f"{k} {i}")
    for w, (s, _) in points.items():   # every value of every knob was built
        assert {(k.name, repr(c)) for k in s.knobs for c in k.choices} <= seen[w], w


def test_records_change_the_generated_c(tasks, tmp_path) -> None:
    """Records change their kernels and no other: twice the vector width for the GELU
    chain (loops of twice the lanes), no attach for the layer norm, one block of
    the 16 query rows for the attention."""
    from toolchain.bundle import compile_model

    gelu = next(t for t in tasks if "Erf" in t.space.workload)
    ln = next(t for t in tasks if t.space.workload.startswith("cpu_ops|LayerNorm"))
    at = next(t for t in tasks if t.space.kind == "attention")
    v = gelu.space.default()["vector_bits"]
    records = {gelu.space.workload: gelu.space.trace({**gelu.space.default(),
                                                      "vector_bits": 2 * v}),
               ln.space.workload: ln.space.trace({**ln.space.default(), "attach": False}),
               at.space.workload: at.space.trace({**at.space.default(), "rows": 16,
                                                   "score_vectors": 1, "acc_vectors": 1})}
    base = compile_model(ops_model(), TARGET, tmp_path / "base", progress=False)
    with applying(records) as applied:
        tuned = compile_model(ops_model(), TARGET, tmp_path / "tuned", progress=False)
    assert set(applied) == set(records)
    a, b = ((d / "src" / "kernels.c").read_text() for d in (base, tuned))
    assert a != b

    def body(code: str, kernel: str) -> str:
        start = re.search(rf"_{kernel}\((?:const )?float", code).start()
        return code[start:code.index("\n}\n", start)]

    for task in (gelu, ln, at):
        assert body(a, task.name) != body(b, task.name), task.name
    for task in tasks:   # the kernels without a record are unchanged
        if task.space.workload not in records:
            assert body(a, task.name) == body(b, task.name), task.name
    # twice the lanes: more of the GELU chain's loops run 2 x lanes steps
    steps = f"< {v // 16}; ++"
    assert body(b, gelu.name).count(steps) > body(a, gelu.name).count(steps)


def test_kiln_tune_generic_lists_the_cpu_ops_spaces(tmp_path, capsys) -> None:
    import onnx

    from toolchain.cli import main

    path = tmp_path / "ops.onnx"
    onnx.save(ops_model(), path)
    assert main(["tune", str(path), "--target", "c-generic", "--spaces"]) == 0
    plain = capsys.readouterr().out
    assert main(["tune", str(path), "--target", "c-generic", "--spaces", "--generic"]) == 0
    generic = capsys.readouterr().out
    assert "space attention" in plain and "space cpu_ops" not in plain
    assert "space cpu_ops for cpu_ops|Softmax" in generic and "vector_bits: 64" not in generic

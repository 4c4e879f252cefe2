"""Seeds: the points a space asks the tuner to measure right after the default (the
schedule's priors, :mod:`toolchain.schedules.generic.conv_seeds`, and the best points of
similar workloads' records, :func:`toolchain.autotune.tuner.transfer_seeds`). Invalid
seeds are dropped, the tuner measures the valid ones in its first batch, and the seeded
convolution points run in bundles within 1e-5 of onnxruntime."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.autotune.conv_models import bundle_at_point, conv_model, nchw_variant
from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.records import Record
from toolchain.autotune.space import Knob, Rule, Space
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.autotune.tuner import SimpleTask, Tuner, synthetic_measure, transfer_seeds
from toolchain.target import load_target, runs_here


def toy(seeds: tuple = ()) -> Space:
    return Space("toy", "toy|n=8", (Knob("a", tuple(range(8)), 0),
                                    Knob("b", tuple(range(8)), 0)),
                 (Rule("a + b <= 10", lambda p: p["a"] + p["b"] <= 10),), seeds)


def test_invalid_unknown_and_repeated_seeds_are_dropped():
    s = toy(({"a": 5}, {"a": 7, "b": 7}, {"c": 1}, {"a": 9}, {"a": 5, "b": 0}, {"b": 0},
             {"b": 3}))
    assert s.seed_points() == [{"a": 5, "b": 0}, {"a": 0, "b": 3}]
    assert s.seed_points(({"a": 1, "b": 1}, {"a": 5})) == [
        {"a": 5, "b": 0}, {"a": 0, "b": 3}, {"a": 1, "b": 1}]


def test_the_tuner_measures_the_seeds_right_after_the_default():
    seen: list[dict] = []
    measure = synthetic_measure(lambda p: seen.append(dict(p)) or 1.0 + p["a"] + p["b"])
    s = toy(({"a": 6, "b": 2}, {"a": 1}))
    t = Tuner([SimpleTask("toy", s)], measure, lambda st, p: s.encode(p), strategy="random",
              batch=4, seed=0, seeds={"toy|n=8": [{"a": 3, "b": 3}, {"a": 1}]})
    t.run(8)
    assert seen[:4] == [{"a": 0, "b": 0}, {"a": 6, "b": 2}, {"a": 1, "b": 0},
                        {"a": 3, "b": 3}]
    assert len({s.key(p) for p in seen}) == 8  # no point measured twice


def test_seeds_beyond_the_first_batch_come_next():
    seen: list[dict] = []
    measure = synthetic_measure(lambda p: seen.append(dict(p)) or 1.0)
    s = toy(tuple({"a": i} for i in range(1, 6)))
    Tuner([SimpleTask("toy", s)], measure, lambda st, p: s.encode(p), strategy="xgb",
          batch=3, seed=0).run(6)
    assert [p["a"] for p in seen] == [0, 1, 2, 3, 4, 5]


def _rec(workload: str, space: str, decisions: tuple, cost: float) -> Record:
    from toolchain.autotune.space import Trace

    return Record(workload, space, "t", Trace(space, decisions), [cost], None, "local", "s",
                  0)


def test_transfer_seeds_are_the_best_valid_points_of_other_workloads():
    s = toy()
    recs = [_rec("toy|n=16", "toy", (("a", 2), ("b", 2)), 3.0),
            _rec("toy|n=16", "toy", (("a", 4), ("b", 1)), 1.0),
            _rec("toy|n=16", "toy", (("a", 5), ("b", 5)), 2.0),
            _rec("toy|n=16", "toy", (("a", 7), ("b", 7)), 0.5),   # breaks a rule here
            _rec("toy|n=32", "toy", (("a", 1), ("b", 1)), 9.0),
            _rec("toy|n=8", "toy", (("a", 6), ("b", 0)), 0.1),    # this workload: resumed
            _rec("toy|n=16", "other", (("a", 3), ("b", 3)), 0.1)]  # another kind
    assert transfer_seeds(s, recs) == [{"a": 4, "b": 1}, {"a": 1, "b": 1}, {"a": 5, "b": 5}]
    assert all(math.isfinite(r.cost) for r in recs)


def test_the_known_best_families_are_seeds_of_resnet18_layers():
    """The points that measured best (docs/tuning.md, Results) are among the seeds."""
    def has(space: Space, knobs: dict) -> bool:
        return any(all(p[k] == v for k, v in knobs.items()) for p in space.seed_points())

    t = "x86_64-avx512"
    c1 = conv_task((1, 3, 224, 224), 64, 7, 2, t).space
    assert has(c1, {"ry": 1, "rw": 7, "order": "channels_outer", "unroll_kw": False,
                    "unroll_cb": False, "epilogue": "transposed", "epilogue_at": "rows",
                    "pack": "partitioned"})
    c4 = conv_task((1, 64, 56, 56), 128, 3, 2, t).space
    assert has(c4, {"ry": 2, "rw": 7, "cb": 1, "order": "window_outer", "unroll_kw": False,
                    "epilogue": "transposed", "epilogue_at": "rows", "pack": "partitioned"})
    assert has(c4, {"ry": 1, "rw": 14, "cb": 16, "epilogue": "transposed"})
    c9 = conv_task((1, 256, 14, 14), 256, 3, 1, t).space
    assert has(c9, {"algorithm": "winograd4h", "wino_mr": 16, "wino_nr": 16})
    c8 = conv_task((1, 128, 28, 28), 256, 1, 2, t).space
    assert has(c8, {"algorithm": "direct", "ob": 64, "ry": 2, "rw": 2, "cb": 1})
    assert has(c8, {"algorithm": "gemm", "b_pack": "rows"})
    c3 = conv_task((1, 64, 56, 56), 64, 1, 1, t).space
    assert has(c3, {"algorithm": "gemm", "b_pack": "in_place", "gemm_epilogue": "fused",
                    "mr": 8, "nr": 32})
    c5 = conv_task((1, 64, 56, 56), 128, 1, 2, t).space
    assert has(c5, {"algorithm": "gemm", "b_pack": "rows", "gemm_epilogue": "fused",
                    "mr": 16, "nr": 16, "mc_tiles": 1})
    assert has(c5, {"algorithm": "direct", "ry": 1, "rw": 14, "cb": 1,
                    "direct_pack": "none", "epilogue": "transposed", "epilogue_at": "rows"})
    assert has(c8, {"algorithm": "direct", "ry": 1, "rw": 14, "cb": 1,
                    "direct_pack": "none"})
    c2 = conv_task((1, 64, 56, 56), 64, 3, 1, t).space
    assert has(c2, {"algorithm": "winograd4h", "wino_pad": "partitioned"})
    for s in (c1, c4, c9, c8, c3, c5, c2):
        assert all(s.is_valid(p) for p in s.seed_points())
        assert s.key(s.default()) not in {s.key(p) for p in s.seed_points()}


@pytest.mark.parametrize("stride, kernel", [(2, 3), (2, 1)])
def test_seeded_points_run_in_bundles_within_1e5(tmp_path: Path, stride: int, kernel: int):
    import toolchain

    base = "x86_64-avx512"
    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    target = str(nchw_variant(base, tmp_path))
    model = conv_model(stride, kernel)
    onnx.save(model, tmp_path / "m.onnx")
    task, = extract_tasks(model, target)
    s = task.space
    seeds = s.seed_points()
    assert len(seeds) >= (3 if kernel == 3 else 1)
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    for i, p in enumerate(seeds[:4]):
        with applying({s.workload: s.trace(p)}) as applied:
            pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / str(i))
        assert set(applied) == {s.workload}
        got = toolchain.run(pkg, {"x": x}).outputs["y"]
        assert max_rel(got, ref) <= 1e-5, p


def test_in_place_b_is_offered_for_stride_1_and_refused_where_panels_pad():
    s = conv_task((1, 64, 56, 56), 64, 1, 1, "x86_64-avx512").space  # C3: 3136 pixels
    knob = s.knob("b_pack")
    assert knob.choices == ("panels", "in_place") and knob.default == "panels"
    p = s.canonical({**s.default(), "b_pack": "in_place", "mc_tiles": 4})
    assert s.point_of(type(s.trace(p)).from_json(s.trace(p).to_json())) == p
    assert not s.is_valid({**p, "nr": 48})  # 3136 pixels are not whole panels of 48
    assert s.canonical({**p, "algorithm": "direct"})["b_pack"] == "panels"
    strided = conv_task((1, 64, 56, 56), 128, 1, 2, "x86_64-avx512").space
    assert "in_place" not in strided.knob("b_pack").choices


@pytest.mark.parametrize("nr", [16, 32, 64])
def test_in_place_b_runs_in_bundles_within_1e5(tmp_path: Path, nr: int):
    base = "x86_64-avx512"
    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    src, err = bundle_at_point(conv_model(1, 1), str(nchw_variant(base, tmp_path)), tmp_path,
                               {"b_pack": "in_place", "nr": nr, "mr": 4, "mc_tiles": 1},
                               seed=3)
    assert "B_packed" not in src and "X_sub" not in src
    assert err <= 1e-5


def test_blocked_strided_conv_seeds_two_vectors_of_channels_first(tmp_path: Path):
    """A ``NCHW16c`` output's heuristic tile is one vector of output channels; the first
    seeds take two (half the broadcasts per FMA), and the first runs in a bundle within
    1e-5 of onnxruntime."""
    base = "x86_64-avx512"
    task, = extract_tasks(conv_model(2, 3), base)
    s = task.space
    assert s.default()["ob"] == 16
    first = s.seed_points()[0]
    assert first["ob"] == 32 and first["rw"] == 8
    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    _, err = bundle_at_point(conv_model(2, 3), base, tmp_path, first, seed=4)
    assert err <= 1e-5

"""``wino_pad=partitioned``: the Winograd input's zero-padded copy cut into border and
interior loops (no padding condition or clamped index in the interior) — offered to
Winograd points only, replayed from its trace, and run through compiled bundles within
1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.autotune.conv_models import conv_model
from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here


def test_offered_to_winograd_points_only():
    s = conv_task((1, 64, 56, 56), 64, 3, 1, "x86_64-avx512").space  # C2
    knob = s.knob("wino_pad")
    assert knob.choices == ("select", "partitioned") and knob.default == "select"
    p = s.canonical({**s.default(), "algorithm": "winograd4", "wino_pad": "partitioned"})
    assert p["wino_pad"] == "partitioned"
    assert s.point_of(type(s.trace(p)).from_json(s.trace(p).to_json())) == p
    assert s.canonical({**p, "algorithm": "direct"})["wino_pad"] == "select"
    assert {sd.get("wino_pad") for sd in s.seed_points()} >= {"select", "partitioned"}
    strided = conv_task((1, 64, 56, 56), 128, 3, 2, "x86_64-avx512").space  # no Winograd
    assert "wino_pad" not in [k.name for k in strided.knobs]


@pytest.mark.parametrize("target,algorithm", [("x86_64-avx512", "winograd4"),
                                              ("c-generic", "winograd2")])
def test_partitioned_pad_runs_in_bundles_within_1e5(tmp_path: Path, target: str,
                                                    algorithm: str):
    import toolchain

    if not runs_here(load_target(target)):
        pytest.skip(f"{target} code does not run on this machine")
    model = conv_model(1, 3)
    onnx.save(model, tmp_path / "m.onnx")
    task, = extract_tasks(model, target)
    s = task.space
    p = s.canonical({**s.default(), "algorithm": algorithm, "wino_pad": "partitioned"})
    x = np.random.default_rng(5).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    with applying({s.workload: s.trace(p)}) as applied:
        pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / "b")
    assert set(applied) == {s.workload}
    src = (Path(pkg.path) / "src" / "kernels.c").read_text()
    pads = [ln for ln in src.splitlines() if ln.lstrip().startswith("wino_pad[")]
    assert pads and not any("select" in ln for ln in pads)  # no per-element test
    got = toolchain.run(pkg, {"x": x}).outputs["y"]
    assert max_rel(got, ref) <= 1e-5

"""``wino_pad=partitioned``: the Winograd input's zero-padded copy cut into border and
interior loops (no padding condition or clamped index in the interior) — offered to
Winograd points only, replayed from its trace, and run through compiled bundles within
1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.autotune.conv_models import bundle_at_point, conv_model
from toolchain.autotune.tasks import conv_task
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
    if not runs_here(load_target(target)):
        pytest.skip(f"{target} code does not run on this machine")
    src, err = bundle_at_point(conv_model(1, 3), target, tmp_path,
                               {"algorithm": algorithm, "wino_pad": "partitioned"}, seed=5)
    pads = [ln for ln in src.splitlines() if ln.lstrip().startswith("wino_pad[")]
    assert pads and not any("select" in ln for ln in pads)  # no per-element test
    assert err <= 1e-5

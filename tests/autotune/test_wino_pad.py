"""``wino_pad=partitioned``: the Winograd input's zero-padded copy cut into border and
interior loops (no padding condition or clamped index in the interior) — offered to
Winograd points only, replayed from its trace, and run through compiled bundles within
1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.autotune.conv_models import bundle_at_point, conv_model, kernels_at_point
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


def test_pad_order_offered_for_channel_blocked_inputs_only():
    """``wino_pad_order`` exists where the Winograd input is ``NCHW{b}c`` (a bundle's
    ``LayoutConv`` on AVX-512), not for an NCHW convolution (whose space, workload and
    seeds are unchanged); its default is the plane-by-plane copy, and the F(4x4) seeds
    copy block by block."""
    from tests.autotune.conv_models import conv_model as model
    from toolchain.autotune.tasks import extract_tasks

    nchw = conv_task((1, 64, 56, 56), 64, 3, 1, "x86_64-avx512").space
    assert "wino_pad_order" not in [k.name for k in nchw.knobs]
    assert not any("wino_pad_order" in sd for sd in nchw.seed_points())
    task, = extract_tasks(model(1, 3), "x86_64-avx512")
    s = task.space
    assert "NCHW8c" in s.workload
    knob = s.knob("wino_pad_order")
    assert knob.choices == ("planes", "blocks") and knob.default == "planes"
    assert s.default()["wino_pad_order"] == "planes"
    p = s.canonical({**s.default(), "algorithm": "winograd4h", "wino_pad_order": "blocks"})
    assert s.point_of(type(s.trace(p)).from_json(s.trace(p).to_json())) == p
    assert s.canonical({**p, "algorithm": "direct"})["wino_pad_order"] == "planes"
    seeds = [sd for sd in s.seed_points() if sd["algorithm"] == "winograd4h"
             and sd["wino_layout"] == "planes"]  # (the channels layout has no planes copy)
    assert seeds[0]["wino_pad_order"] == "blocks"


@pytest.mark.parametrize("pad", ["partitioned", "select"])
def test_block_order_pad_runs_in_bundles_within_1e5(tmp_path: Path, pad: str):
    """The padded copy block by block (the block's 8 channels innermost: each input
    vector read once) through a bundle, against onnxruntime; its C differs from the
    plane-by-plane copy's."""
    if not runs_here(load_target("x86_64-avx512")):
        pytest.skip("x86_64-avx512 code does not run on this machine")
    knobs = {"algorithm": "winograd4h", "wino_pad": pad}
    (tmp_path / "b").mkdir()
    (tmp_path / "p").mkdir()
    src, err = bundle_at_point(conv_model(1, 3), "x86_64-avx512", tmp_path / "b",
                               {**knobs, "wino_pad_order": "blocks"}, seed=6)
    assert err <= 1e-5
    planes = kernels_at_point(conv_model(1, 3), "x86_64-avx512", tmp_path / "p", knobs)
    assert src != planes

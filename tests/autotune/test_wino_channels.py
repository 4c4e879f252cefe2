"""``wino_layout=channels``: the Winograd kernel with the channels innermost (tiles as the
GEMMs' rows, output channels as their vector columns, weights packed in panels of output
channels) — offered where input and output are channel-blocked, replayed from its trace,
seeded first, and run through compiled bundles within 1e-5 of onnxruntime for each
algorithm, padded copy, and GEMM tiles that pad the tiles and the output channels."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.autotune.conv_models import bundle_at_point, conv_model, kernels_at_point
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here


def test_offered_where_input_and_output_are_blocked():
    nchw = conv_task((1, 64, 56, 56), 64, 3, 1, "x86_64-avx512").space
    assert "wino_layout" not in [k.name for k in nchw.knobs]
    assert not any("wino_layout" in sd for sd in nchw.seed_points())
    task, = extract_tasks(conv_model(1, 3), "x86_64-avx512")
    s = task.space
    knob = s.knob("wino_layout")
    assert knob.choices == ("planes", "channels") and knob.default == "planes"
    assert s.default()["wino_layout"] == "planes"
    p = s.canonical({**s.default(), "algorithm": "winograd2", "wino_layout": "channels",
                     "wino_nr": 64, "wino_mr": 4})
    assert s.is_valid(p)
    assert s.point_of(type(s.trace(p)).from_json(s.trace(p).to_json())) == p
    assert s.canonical({**p, "algorithm": "direct"})["wino_layout"] == "planes"
    first = s.seed_points()[0]
    assert first["wino_layout"] == "channels" and first["algorithm"] == "winograd4h"


@pytest.mark.parametrize("knobs", [
    {"algorithm": "winograd4h", "wino_mr": 8, "wino_nr": 32, "wino_pad": "partitioned"},
    {"algorithm": "winograd2", "wino_mr": 6, "wino_nr": 48, "wino_pad": "select"},
    {"algorithm": "winograd4", "wino_mr": 3, "wino_nr": 16, "wino_pad": "select"},
])
def test_channels_layout_runs_in_bundles_within_1e5(tmp_path: Path, knobs: dict):
    """F(4x4) (both point sets) and F(2x2); 16 and 64 tiles in GEMM tiles of 8, 6
    (64 -> 66 rows: the last tile repeated) and 3 rows; 32 output channels in 2, 3
    (padded to 48) and 1 vectors."""
    if not runs_here(load_target("x86_64-avx512")):
        pytest.skip("x86_64-avx512 code does not run on this machine")
    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    src, err = bundle_at_point(conv_model(1, 3), "x86_64-avx512", tmp_path / "c",
                               {**knobs, "wino_layout": "channels"}, seed=7)
    assert err <= 1e-5
    assert "wino_tiles" not in src  # no tile copy: the transform reads the padded input
    if knobs["algorithm"] == "winograd4h":  # (once: the planes layout copies tiles)
        planes = kernels_at_point(conv_model(1, 3), "x86_64-avx512", tmp_path / "p",
                                  {**knobs, "wino_nr": 16})
        assert "wino_tiles" in planes

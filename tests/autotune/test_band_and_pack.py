"""The convolution's ``epilogue_at=rows`` and ``pack=partitioned``.

``epilogue_at=rows``: the NCHW write-back runs after each band of ``ob`` output channels x
``ry`` rows of the product (computed under the write-back's band loop), so the product
shrinks to one band — for every write-back order. ``pack=partitioned``: the padded input
copy's rows and columns are split into border and interior loops. Both through compiled
bundles within 1e-5 of onnxruntime; the defaults (``end``, ``select``) are the schedule as
before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.autotune.conv_models import conv_model, nchw_variant
from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here


def test_offered_with_the_old_schedule_as_default():
    knob = conv_task((1, 3, 224, 224), 64, 7, 2, "x86_64-avx512").space.knob("epilogue_at")
    assert knob.choices == ("end", "rows") and knob.default == "end"
    s = conv_task((1, 256, 14, 14), 512, 1, 2, "x86_64-avx512").space  # 1x1: direct only
    assert s.knob("epilogue_at").default == "end"
    assert s.canonical({**s.default(), "epilogue_at": "rows"})["epilogue_at"] == "end"


def test_pack_offered_where_the_copy_pads_element_by_element():
    s = conv_task((1, 3, 224, 224), 64, 7, 2, "x86_64-avx512").space
    assert s.knob("pack").choices == ("select", "partitioned")
    assert s.knob("pack").default == "select"
    assert "pack" not in conv_task((1, 64, 56, 56), 64, 1, 1, "x86_64-avx512").space.default()


@pytest.mark.parametrize("base, knobs, stride, kernel", [
    ("x86_64-avx512", {"epilogue": "transposed", "rw": 2, "ry": 4}, 1, 3),
    ("x86_64-avx512", {"epilogue": "transposed", "rw": 2, "ry": 4, "pack": "partitioned",
                       "cb": 1}, 1, 3),
    ("x86_64-avx512", {"epilogue": "pixel_tiles", "rw": 4, "ry": 1, "pack": "partitioned"},
     2, 3),
    ("x86_64-avx2", {"epilogue": "channel_rows", "rw": 2, "ry": 2}, 1, 3),
    ("x86_64-avx2", {"epilogue": "transposed", "rw": 2, "ry": 2, "order": "window_outer"},
     2, 3),
    ("c-generic", {"epilogue": "pixel_tiles", "rw": 2, "ry": 2, "pack": "partitioned"}, 1,
     3),
    ("x86_64-avx512", {"algorithm": "direct", "epilogue": "pixel_tiles", "rw": 4, "ry": 2},
     2, 1)])
def test_band_points_run_in_bundles_within_1e5(tmp_path: Path, base: str, knobs: dict,
                                               stride: int, kernel: int):
    import toolchain

    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    target = str(nchw_variant(base, tmp_path)) if base != "c-generic" else base
    model = conv_model(stride, kernel)
    onnx.save(model, tmp_path / "m.onnx")
    task, = extract_tasks(model, target)
    s = task.space
    if kernel == 3 and "algorithm" in s.default():
        knobs = {**knobs, "algorithm": "direct"}
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    arena = {}
    for at in ("end", "rows"):
        trace = s.trace(s.canonical({**s.default(), **knobs, "epilogue_at": at}))
        with applying({s.workload: trace}) as applied:
            pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / at)
        assert set(applied) == {s.workload}
        arena[at] = json.loads((Path(pkg.path) / "metadata.json").read_text())["arena_bytes"]
        src = (Path(pkg.path) / "src" / "kernels.c").read_text()
        # the padding condition per element (a select) only in the unpartitioned copy
        assert ("kiln_select" in src) == (knobs.get("pack") != "partitioned" and kernel > 1)
        got = toolchain.run(pkg, {"x": x}).outputs["y"]
        assert max_rel(got, ref) <= 1e-5, at
    # the product's scratch: all 32 channels x OH rows, or one band of ob x ry rows
    ob, ow = s.canonical({**s.default(), **knobs})["ob"], 16 // stride
    assert arena["end"] - arena["rows"] >= 4 * ow * (32 * ow - ob * knobs["ry"])

"""int8 arenas against the MLPerf Tiny anchors (microTVM + CMSIS-NN workspaces, v0.5).

The models are quantized as the MLPerf Tiny int8 reference models are (int8 input and
output, batch 1; the autoencoder returns its reconstruction: see
:func:`tests.boards.qdq_models.anchor_model`) and compiled for ``cortex-m4``, the target of
nucleo-l4r5zi (the MLPerf Tiny reference board). Two numbers per model:

* the arena of the model's tensors, as the memory planner places them: below the anchor
  on every model (and at most 16 KiB for KWS);
* the whole arena, which adds each kernel's scratch (int32 accumulators or an int16 copy
  of the input that the int8 schedules keep in a buffer): below the anchor on every model
  too; a failure names the kernel with the largest scratch and its bytes.
"""

from __future__ import annotations

import onnx
import pytest

from tests.boards.qdq_models import ANCHORS, anchor_model, arena_report

_REPORTS: dict[str, dict] = {}


def _report(name: str, tmp_path_factory) -> dict:
    import toolchain

    if name not in _REPORTS:
        d = tmp_path_factory.mktemp(f"anchor_{name}")
        onnx.save(anchor_model(name), d / "m.onnx")
        toolchain.compile(d / "m.onnx", "cortex-m4", output=d / "bundle")
        _REPORTS[name] = arena_report(d / "bundle")
    return _REPORTS[name]


@pytest.mark.parametrize("name", list(ANCHORS))
def test_int8_tensor_arena_below_anchor(name, tmp_path_factory):
    task, anchor = ANCHORS[name]
    r = _report(name, tmp_path_factory)
    assert 0 < r["tensors"] < anchor, f"{task}: {r['tensors']:,} B >= {anchor:,} B: {r['peak']}"
    if name == "ds_cnn":
        assert r["tensors"] <= 16 * 1024
    assert r["tensors"] <= r["arena"]


@pytest.mark.parametrize("name", list(ANCHORS))
def test_int8_arena_below_anchor(name, tmp_path_factory):
    task, anchor = ANCHORS[name]
    r = _report(name, tmp_path_factory)
    kernel, scratch = r["scratch"]
    assert r["arena"] < anchor, (
        f"{task}: arena {r['arena']:,} B >= {anchor:,} B; tensors {r['tensors']:,} B, "
        f"largest kernel scratch {scratch:,} B in {kernel}")


def test_arena_report_lists_the_peak(tmp_path_factory):
    r = _report("autoencoder", tmp_path_factory)
    assert sum(size for _, size in r["peak"]) <= r["arena"]
    assert all(not name.startswith("input") for name, _ in r["peak"])  # int8 input: caller's

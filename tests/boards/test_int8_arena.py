"""int8 arenas against the MLPerf Tiny anchors (microTVM + CMSIS-NN workspaces, v0.5).

The models are quantized as the MLPerf Tiny int8 reference models are (int8 input and
output, batch 1; the autoencoder returns its reconstruction: see
:func:`toolchain.zoo.quantized.anchor_model`) and compiled for ``cortex-m4``, the target of
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

from tests.boards.conftest import ANCHORS_GROUP, anchor
from toolchain.zoo.quantized import ANCHORS, arena_report

#: each anchor model is quantized and compiled once per worker that runs one of its tests
#: (``_report``): the file runs on one worker
pytestmark = pytest.mark.xdist_group(ANCHORS_GROUP)

_REPORTS: dict[str, dict] = {}


def _report(name: str, tmp_path_factory) -> dict:
    import toolchain

    if name not in _REPORTS:
        d = tmp_path_factory.mktemp(f"anchor_{name}")
        onnx.save(anchor(name), d / "m.onnx")
        toolchain.compile(d / "m.onnx", "cortex-m4", output=d / "bundle")
        _REPORTS[name] = {**arena_report(d / "bundle"), "bundle": d / "bundle"}
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


def test_kws_pointwise_and_depthwise_convolutions_run_in_place(tmp_path_factory):
    """KWS: every depthwise and pointwise convolution writes over its input (the Cortex-M
    kernels stage a channel plane or a pixel's channels first) and the first convolution
    reads the caller's input through a view, so the arena is one 64 x 25 x 5 activation:
    8,064 B (64-B aligned), half the 16,000 B of the out-of-place plan."""
    import json

    bundle = _report("ds_cnn", tmp_path_factory)["bundle"]
    meta = json.loads((bundle / "metadata.json").read_text())
    convs = [t for t in meta["memory_plan"]["tensors"] if t["size"] == 8000]
    assert len(convs) == 9 and sum(1 for t in convs if t["inplace_of"]) == 8
    assert meta["arena_bytes"] == 8_064
    assert list(meta["memory_plan"]["views"].values()) == ["input_1"]
    kernels = (bundle / "src" / "kernels.c").read_text()
    for k in meta["kernels"]:  # the aliased pair without restrict, the weights with it
        if k["in_place"] and not k["elided"]:
            head = kernels[kernels.index(f"int32_t {k['name']}("):]
            params = head[head.index("(") + 1:head.index(")")].split(", ")
            assert "restrict" not in params[0] and "restrict" not in params[-1], params
            assert all("restrict" in p for p in params[1:-1]), params


def test_arena_report_lists_the_peak(tmp_path_factory):
    r = _report("autoencoder", tmp_path_factory)
    assert sum(size for _, size in r["peak"]) <= r["arena"]
    assert all(not name.startswith("input") for name, _ in r["peak"])  # int8 input: caller's


def test_vww_outputs_overlap_their_inputs(tmp_path_factory):
    """VWW: the 8 -> 16 pointwise convolution's output grows out of its input, and the
    first convolution reads the caller's NHWC image (no transposed copy, so no lead before
    it: docs/embedded.md, "Overlap" and "The first convolution reads the caller's NHWC
    image"): 55,296 B without overlaps, 41,792 B with them (36,864 B of activations)."""
    import json

    r = _report("mobilenet_v1", tmp_path_factory)
    assert (r["no_overlap"], r["arena"], r["tensors"]) == (55_296, 41_792, 36_864)
    meta = json.loads((r["bundle"] / "metadata.json").read_text())
    plan = {t["name"]: t for t in meta["memory_plan"]["tensors"]}
    assert not [t["lead"] for t in plan.values() if t.get("lead")]
    assert any(t["inplace_of"] and t["size"] > plan[t["inplace_of"]]["size"]
               for t in plan.values())
    first = meta["kernels"][0]
    assert first["ops"] == ["QConv"] and first["inputs"][0] == meta["inputs"][0]["name"]

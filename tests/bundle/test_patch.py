"""Patch-based inference through compiled bundles (docs/embedded.md, "Patch-based inference").

The overlap tests' small int8 CNN (16 x 16 image; pointwise, 3 x 3, stride-2, depthwise,
pointwise and stride-2 depthwise convolutions, padding 1) is compiled for this host with
patch stages chosen by hand (several chains and grids: 2 x 2, 3 x 3, odd and uneven ones,
stride 2 inside the chain, padding at every border) and by ``ram_budget``; every run
starts from an arena poisoned with a different byte and must equal the integer reference
bit for bit.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import toolchain
from tests.bundle.helpers import STRICT
from toolchain.bundle.host import BundleModule
from toolchain.errors import OptionError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.zoo.quantized import calibration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_overlap import _cnn, _float_model, _host_copy, _poisoned_runs  # noqa: E402


@pytest.fixture(scope="module")
def qmodel(tmp_path_factory) -> Path:
    model = _float_model()
    path = tmp_path_factory.mktemp("patch") / "cnn_int8.onnx"
    onnx.save(quantize_model(model, calibration(model), integer_io=True)[0], path)
    return path


@pytest.fixture(scope="module")
def nhwc24(tmp_path_factory) -> Path:
    """A TensorFlow-style int8 model: the NHWC image transposed to NCHW, a stride-2
    convolution (TF "SAME" pads 0, 0, 1, 1), a depthwise one and a pointwise one."""
    from onnx import helper

    model = _cnn("nhwc24", [1, 24, 24, 3], [(8, 3, 2, 1, [0, 0, 1, 1]),
                                           (8, 3, 1, 8, [1, 1, 1, 1]),
                                           (16, 1, 1, 1, [0, 0, 0, 0])], 7,
                 nodes=[helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2])],
                 src="t")
    path = tmp_path_factory.mktemp("patch") / "nhwc24.onnx"
    onnx.save(quantize_model(model, calibration(model), integer_io=True)[0], path)
    return path


@pytest.fixture(scope="module")
def pool_stage(qmodel: Path, tmp_path_factory):
    """``get(first, layers, grid)``: ``qmodel`` compiled for c-generic with a patch stage
    ending in the pool, once per module: the whole chain in 2 x 2 tiles is both a
    bit-exactness case and the bundle whose ``patch_pool_finish`` is checked alone (the
    tests only read the bundle)."""
    done: dict = {}

    def get(first: str, layers: int, grid: tuple[int, int]):
        key = first, layers, grid
        if key not in done:
            out = tmp_path_factory.mktemp("pool_stage") / "b"
            done[key] = out, toolchain.compile(qmodel, "c-generic", output=out,
                                               patch=(first, layers, grid, True))
        return done[key]

    return get


@functools.cache
def _reference(qmodel: Path):
    return quantize_ops(from_onnx(onnx.load(qmodel)))


def _exact_when_poisoned(path: Path, qmodel: Path) -> list[bool]:
    module = BundleModule(path, extra_flags=STRICT)
    want_graph = _reference(qmodel)
    rng = np.random.default_rng(2)
    exact = []
    for poison in (0x5A, 0xA5, 0x00):
        x = rng.integers(-128, 128, (1, 3, 16, 16)).astype(np.int8)
        module.arena.fill(poison)
        got, want = module({"x": x}), run_graph(want_graph, {"x": x})
        exact.append(all(np.array_equal(got[k], w) for k, w in want.items()))
    return exact


@pytest.mark.parametrize("first,layers,grid", [
    ("fused_q_conv_0", 2, (2, 2)),   # 1x1 then 3x3 (padding 1)
    ("fused_q_conv_0", 4, (3, 3)),   # through the stride-2 3x3: 8x8 output, uneven tiles
    ("fused_q_conv_1", 5, (3, 2)),   # both stride-2 layers: a 4x4 output, odd grid
    ("fused_q_conv_2", 2, (4, 1)),   # a stride-2 conv then a depthwise, rows only
])
def test_patch_stage_is_bit_exact(qmodel: Path, tmp_path: Path, first: str, layers: int,
                                  grid: tuple[int, int]) -> None:
    pkg = toolchain.compile(qmodel, "c-generic", output=tmp_path / "b",
                            patch=(first, layers, grid))
    stage, = pkg.metadata["patch_stages"]
    assert stage["grid"] == list(grid) and len(stage["layers"]) == layers
    assert stage["layers"][0] == first and stage["extra_macs"] >= 0
    assert stage["arena_without"] is not None
    assert sum(k["name"].endswith("_tile") for k in pkg.metadata["kernels"]) == layers
    assert all(_exact_when_poisoned(tmp_path / "b", qmodel))


@pytest.mark.parametrize("first,layers,grid", [
    ("fused_q_conv_0", 6, (2, 2)),   # the whole chain, its 4x4 output summed in 4 tiles
    ("fused_q_conv_2", 4, (3, 1)),   # rows only: tiles of 2 rows, the last moved back
    ("fused_q_conv_3", 3, (1, 3)),   # columns: 3 tiles of 2 columns, overlapping at the end
    ("fused_q_conv_1", 5, (4, 4)),   # one output pixel a tile
])
def test_stage_ending_in_the_pool_is_bit_exact(qmodel: Path, pool_stage, first: str,
                                               layers: int, grid: tuple[int, int]) -> None:
    """A stage whose last step is the global average pool: each tile's own pixels are
    summed per channel, the 4 x 4 x 32 tensor before the pool never exists, and the
    pool's requantisation in C equals QAvgPool's reference bit for bit."""
    path, pkg = pool_stage(first, layers, grid)
    stage, = pkg.metadata["patch_stages"]
    assert stage["grid"] == list(grid) and stage["pool"].startswith("fused_q_avg_pool")
    assert all(_exact_when_poisoned(path, qmodel))


def test_stage_ending_in_the_pool_needs_one(qmodel: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="no global average pool"):
        toolchain.compile(qmodel, "c-generic", output=tmp_path / "b",
                          patch=("fused_q_conv_0", 3, (2, 2), True))
    assert not (tmp_path / "b").exists()


def test_nhwc_first_layer_on_cortex_m4(nhwc24: Path, tmp_path: Path) -> None:
    """A first convolution that reads the caller's NHWC image (stride 2, TF "SAME" pads
    0, 0, 1, 1) and a depthwise one after it, in 2 x 2 tiles: the gather copies NHWC
    pixels and pads rows and columns the real tensor never pads (-2, -1), and the
    cortex-m4 DSP kernels (built for this host, -O3) run on the tiles.  A gather that
    formed pointers outside the image was miscompiled at -O3 and failed here."""
    pkg = toolchain.compile(nhwc24, "cortex-m4", output=tmp_path / "m4",
                            patch=("fused_q_conv_0", 2, (2, 2)))
    stage, = pkg.metadata["patch_stages"]
    assert stage["tile_sizes"] == [[17, 17], [8, 8], [6, 6]]
    assert all(_poisoned_runs(_host_copy(tmp_path / "m4", tmp_path / "host"), nhwc24))


@pytest.mark.parametrize("target,first,grid", [("c-generic", "fused_conv2d_relu_0", (3, 3)),
                                               ("cortex-m4", "fused_conv2d_relu_1", (3, 3)),
                                               ("cortex-m4", "fused_conv2d_relu_1", (4, 1))])
def test_float_patch_stage(target: str, first: str, grid: tuple[int, int],
                           tmp_path: Path) -> None:
    """float32 kernels made of a convolution and its Relu: NCHW ``Conv`` on c-generic, NHWC
    ``LayoutConv`` (the Cortex-M float kernels, built for the host) on cortex-m4, four layers
    in 3 x 3 tiles (and on cortex-m4 in 4 x 1 full-width ones: the NHWC kernels keep their
    column padding), the arena poisoned; the outputs equal the reference to float rounding."""
    model = _float_model()
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    pkg = toolchain.compile(path, target, output=tmp_path / "b", patch=(first, 4, grid))
    stage, = pkg.metadata["patch_stages"]
    assert stage["tile_sizes"] == ([[13, 13], [13, 13], [11, 11], [5, 5], [3, 3]]
                                   if grid == (3, 3) else  # full-width rows
                                   [[11, 16], [11, 16], [9, 16], [4, 8], [2, 8]])
    assert pkg.metadata["arena_bytes"] < stage["arena_without"]
    module = (_host_copy(tmp_path / "b", tmp_path / "host") if target == "cortex-m4"
              else BundleModule(tmp_path / "b", extra_flags=STRICT))
    graph = from_onnx(model)
    rng = np.random.default_rng(4)
    for poison in (0x5A, 0x7F):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        module.arena.fill(poison)
        got, want = module({"x": x}), run_graph(graph, {"x": x})
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)


def test_a_transpose_in_front_is_taken_in(nhwc24: Path, tmp_path: Path) -> None:
    """On c-generic (NCHW kernels) a TensorFlow-style model keeps its NHWC -> NCHW
    transpose as a kernel; a stage starting at the first convolution takes it in: the
    gather reads the NHWC image into NCHW tiles, the transposed copy never exists."""
    pkg = toolchain.compile(nhwc24, "c-generic", output=tmp_path / "b",
                            patch=("fused_q_conv_1", 2, (3, 2)))
    stage, = pkg.metadata["patch_stages"]
    assert stage["absorbs"] == "fused_transpose_0"
    assert not any("Transpose" in k["ops"] for k in pkg.metadata["kernels"])
    assert all(_poisoned_runs(BundleModule(tmp_path / "b", extra_flags=STRICT), nhwc24))


def test_a_wrong_padding_byte_is_caught(qmodel: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the gather pads with the wrong byte and the outputs change."""
    from toolchain.bundle import patching

    real = patching.loop_context

    def wrong(*args, **kwargs):
        ctx = real(*args, **kwargs)
        if "gather" in ctx:
            ctx["gather"] = ctx["gather"].rsplit(",", 1)[0] + ", 7"
        return ctx

    monkeypatch.setattr(patching, "loop_context", wrong)
    toolchain.compile(qmodel, "c-generic", output=tmp_path / "bad",
                      patch=("fused_q_conv_1", 2, (2, 2)))
    assert not any(_exact_when_poisoned(tmp_path / "bad", qmodel))


def test_ram_budget_chooses_a_stage_that_fits(qmodel: Path, tmp_path: Path) -> None:
    plain = toolchain.compile(qmodel, "c-generic", output=tmp_path / "plain")
    assert "patch_stages" not in plain.metadata
    budget = plain.metadata["arena_bytes"] - 1024
    pkg = toolchain.compile(qmodel, "c-generic", output=tmp_path / "b", ram_budget=budget)
    assert pkg.metadata["arena_bytes"] <= budget
    stage, = pkg.metadata["patch_stages"]
    assert stage["arena_without"] == plain.metadata["arena_bytes"]
    assert pkg.metadata["options"]["ram_budget"] == budget
    assert all(_exact_when_poisoned(tmp_path / "b", qmodel))
    # a budget the plain plan meets changes nothing
    same = toolchain.compile(qmodel, "c-generic", output=tmp_path / "same",
                             ram_budget=plain.metadata["arena_bytes"])
    assert "patch_stages" not in same.metadata
    assert same.metadata["memory_plan"] == plain.metadata["memory_plan"]


def test_a_board_budgets_its_ram(qmodel: Path, tmp_path: Path) -> None:
    """``compile --board`` budgets the board's RAM less its stack and the runtime's
    estimate: a board too small for the plain arena gets a patch stage and fits; one too
    small for any stage is refused with the board's numbers, as before."""
    from toolchain.boards import compile_board
    from toolchain.boards.build import RUNTIME_RAM_ESTIMATE
    from toolchain.boards.descriptor import BOARDS_DIR
    from toolchain.errors import TargetError

    plain = toolchain.compile(qmodel, "cortex-m4", output=tmp_path / "plain")
    yaml = (BOARDS_DIR / "qemu-mps2-an386.yaml").read_text()
    base = 16384 + RUNTIME_RAM_ESTIMATE + 64  # stack, runtime, the int8 output

    def board(name: str, arena: int) -> Path:
        text = yaml.replace("name: qemu-mps2-an386", f"name: {name}").replace(
            "ram: {origin: 0x20000000, size: 0x400000}",
            f"ram: {{origin: 0x20000000, size: {base + arena}}}")
        (tmp_path / f"{name}.yaml").write_text(text)
        return tmp_path / f"{name}.yaml"

    out, _ = compile_board(qmodel, board("small", plain.metadata["arena_bytes"] - 512),
                           tmp_path / "b", build=False)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["arena_bytes"] <= plain.metadata["arena_bytes"] - 512
    assert meta["patch_stages"][0]["arena_without"] == plain.metadata["arena_bytes"]
    with pytest.raises(TargetError, match="does not fit board tiny: RAM needs"):
        compile_board(qmodel, board("tiny", 256), tmp_path / "c", build=False)


def test_an_impossible_budget_names_the_smallest_arena(qmodel: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"--ram-budget 256 B cannot be met.*smallest arena"
                       ) as err:
        toolchain.compile(qmodel, "c-generic", output=tmp_path / "b", ram_budget=256)
    assert not (tmp_path / "b").exists()
    assert "--integer-io" not in str(err.value)  # its input is int8 already


def test_an_unmet_budget_over_a_float_input_suggests_integer_io(tmp_path: Path) -> None:
    # with float I/O the first step quantizes the float image in the arena, which no
    # patch stage holds: the error says how to take the image in int8 instead
    model = _float_model()
    path = tmp_path / "float_io_int8.onnx"
    onnx.save(quantize_model(model, calibration(model))[0], path)
    with pytest.raises(OptionError, match=r"cannot be met.*kiln quantize --integer-io"):
        toolchain.compile(path, "c-generic", output=tmp_path / "b", ram_budget=256)


def test_a_stage_by_hand_must_be_a_chain(qmodel: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="not a chain of convolutions"):
        toolchain.compile(qmodel, "c-generic", output=tmp_path / "b",
                          patch=("fused_q_avg_pool_6", 1, (2, 2)))


def test_kws_within_6_kib_ends_in_the_pool(tmp_path: Path) -> None:
    """Issue 18's KWS goal on the host: DS-CNN's activations are all 8,000 B up to its
    global average pool, so ``ram_budget=6144`` takes the whole chain in row tiles (the
    cortex-m4 DSP kernels keep the layers' column padding; built for this host) summed
    into the pool.  About 10 s: the one test of the budget's choice ending in a pool, and
    of a 9-layer stage on the DSP kernels."""
    from toolchain.zoo.quantized import anchor_model

    path = tmp_path / "kws.onnx"
    onnx.save(anchor_model("ds_cnn"), path)
    pkg = toolchain.compile(path, "cortex-m4", output=tmp_path / "m4", ram_budget=6144)
    assert pkg.metadata["arena_bytes"] <= 6144
    stage, = pkg.metadata["patch_stages"]
    assert stage["pool"].startswith("fused_q_avg_pool") and len(stage["layers"]) == 9
    assert stage["grid"][1] == 1 and stage["arena_without"] == 8064
    module = _host_copy(tmp_path / "m4", tmp_path / "host")
    floats = tuple(t["name"] for t in module.outputs if t["dtype"] != "int8")
    assert all(_poisoned_runs(module, path, floats))


def test_pool_requantisation_matches_fixed_point(pool_stage, tmp_path: Path) -> None:
    """The bundle's ``patch_pool_finish`` (its C, compiled alone) against
    ``fixed_point.requantize`` over 200,000 sums, shifts -12..3 (ties of every rounding
    step included: a right shift of 1 ties on every odd value) and both clamps."""
    import ctypes
    import subprocess

    from toolchain.quantize.fixed_point import requantize

    path, _ = pool_stage("fused_q_conv_0", 6, (2, 2))
    text = next(p.read_text() for p in (path / "src").glob("*.c")
                if "_patch_pool_finish(" in p.read_text())
    start = text.index("static void ", text.index("The pool's output from the sums"))
    body = text[start:text.index("\n}\n", start) + 3].replace("static void ", "void ", 1)
    name = body.split("(")[0].split()[-1]
    c = tmp_path / "finish.c"
    c.write_text("#include <stdint.h>\n#include <stddef.h>\n" + body)
    lib = tmp_path / "finish.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(c)], check=True)
    fn = getattr(ctypes.CDLL(str(lib)), name)
    rng = np.random.default_rng(3)
    acc = np.concatenate([rng.integers(-(1 << 20), 1 << 20, 100_000),
                          rng.integers(-(1 << 31), (1 << 31) - 1, 100_000)]).astype(np.int32)
    out = np.empty(acc.size, np.int8)
    for shift in range(-12, 4):
        m = int(rng.integers(1 << 30, (1 << 31) - 1))
        for zp, lo, hi in ((-3, -128, 127), (5, 0, 127)):
            fn(out.ctypes.data_as(ctypes.c_void_p), acc.ctypes.data_as(ctypes.c_void_p),
               ctypes.c_int(acc.size), ctypes.c_int32(m), ctypes.c_int(shift),
               ctypes.c_int(zp), ctypes.c_int(lo), ctypes.c_int(hi))
            want = np.clip(requantize(acc, m, shift) + zp, lo, hi)
            np.testing.assert_array_equal(out.astype(np.int64), want, err_msg=f"shift {shift}")

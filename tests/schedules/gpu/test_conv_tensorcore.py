"""Tensor cores for float16 convolutions (``toolchain.schedules.gpu.conv_tc``): the im2col
GEMM on ``wmma`` fragments where the shapes allow, the SIMT kernel with the reason
otherwise -- emulated bundles against the float32 reference, the race checker, nvcc for
sm_80 and sm_90 (the shared ``kernels_nvcc`` run). Tolerance: ``FP16_TOL``
(tests/bundle/test_cuda_fp16.py says why)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import BROKEN_BUILD, nvcc_kernel_check
from tests.bundle.test_cuda_fp16 import FP16_TOL
from toolchain.bundle import build_spec, compile_model, load_bundle, render_files, write_bundle
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import run_pipeline
from toolchain.graph.passes.layout import layout_for_target
from toolchain.graph.passes.precision import to_fp16
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu.conv_tc import (
    ON_TENSOR_CORES,
    gemm_multiples,
    pixel_multiple,
    tensor_core_conv,
)
from toolchain.schedules.gpu.generic import fused_schedule
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier
from toolchain.zoo import ZOO

NVCC = shutil.which("nvcc")
SM80 = load_target("cuda-sm80")
MMA_CALL = "kiln_wmma_f16_"


def conv_model(c: int, o: int, h: int, w: int, k: int, s: int, p: int, relu: bool = True,
               residual: bool = False, seed: int = 0) -> tuple[Any, dict[str, np.ndarray]]:
    """A float32 ``Conv`` (``c -> o`` channels, ``h x w``, a ``k x k`` window, stride
    ``s``, padding ``p``, with bias), then a residual add of a second input and a ReLU where
    asked; output ``y``; and its seeded feeds."""
    rng = np.random.default_rng(seed)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32) * np.float32(1 / np.sqrt(c * k * k))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], kernel_shape=[k, k],
                              strides=[s, s], pads=[p] * 4)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])]
    feeds = {"x": rng.standard_normal((1, c, h, w)).astype(np.float32)}
    if residual:
        ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, o, oh, ow]))
        feeds["r"] = rng.standard_normal((1, o, oh, ow)).astype(np.float32)
        nodes.append(helper.make_node("Add", [f"t{len(nodes) - 1}", "r"], [f"t{len(nodes)}"]))
    if relu:
        nodes.append(helper.make_node("Relu", [f"t{len(nodes) - 1}"], [f"t{len(nodes)}"]))
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "conv", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, oh, ow])],
                          [numpy_helper.from_array(wt, "w"),
                           numpy_helper.from_array(rng.standard_normal(o).astype(np.float32),
                                                   "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), feeds


def test_which_convolutions_get_tensor_cores() -> None:
    """By the im2col GEMM's shape (N = output pixels at least 16; M = output channels, N
    and K = input channels x window rounded up to multiples of 16), the dtype, the group
    and the target."""
    ok = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1, dtype="float16",
              target=SM80)
    assert tensor_core_conv((1, 64, 56, 56), (64, 64, 3, 3), **ok) == ""  # ResNet-18 layer1
    assert tensor_core_conv((1, 64, 56, 56), (128, 64, 1, 1),
                            **{**ok, "strides": (2, 2), "pads": (0,) * 4}) == ""  # downsample
    assert tensor_core_conv((1, 128, 28, 28), (256, 128, 3, 3),  # layer3.0: 14 x 14 = 196
                            **{**ok, "strides": (2, 2)}) == ""  # (computed as 208 pixels)
    assert pixel_multiple((1, 128, 28, 28), (256, 128, 3, 3), (2, 2), (1,) * 4, (1, 1),
                          SM80) == 16
    assert pixel_multiple((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1,) * 4, (1, 1),
                          SM80) == 1
    assert tensor_core_conv((1, 512, 2, 2), (512, 512, 3, 3), **ok) == \
        "the im2col GEMM is 512 x 4 x 4608 (M x N x K): N below 16"
    assert tensor_core_conv(  # the stem: K = 3 x 7 x 7 = 147, computed as 160
        (1, 3, 224, 224), (64, 3, 7, 7), **{**ok, "strides": (2, 2), "pads": (3,) * 4}) == ""
    assert gemm_multiples((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3,) * 4, (1, 1),
                          SM80) == dict(pixel_multiple=1, window_multiple=16, channel_multiple=1)
    assert tensor_core_conv((1, 16, 8, 8), (24, 16, 1, 1), **{**ok, "pads": (0,) * 4}) == ""
    assert gemm_multiples((1, 8, 14, 14), (24, 8, 1, 1), (1, 1), (0,) * 4, (1, 1),
                          SM80) == dict(pixel_multiple=16, window_multiple=16,
                                        channel_multiple=16)  # 24 x 196 x 8 as 32 x 208 x 16
    assert tensor_core_conv((1, 32, 8, 8), (32, 1, 3, 3), **{**ok, "group": 32}).startswith(
        "group 32")
    assert tensor_core_conv((1, 16, 8, 8), (16, 16, 3, 3),
                            **{**ok, "dtype": "float32"}) == "the convolution is float32, " \
                                                             "not float16"
    assert tensor_core_conv((1, 16, 8, 8), (16, 16, 3, 3),
                            **{**ok, "target": load_target("c-generic")}) == \
        "the target declares no tensor-core intrinsics"


#: (name, conv_model's arguments, on tensor cores): 3 x 3 with bias, residual add and
#: ReLU (K = 288: nine steps of 32, double-buffered), 3 x 3 stride 2 padding 1, 1 x 1
#: stride 2 (a ResNet downsampling), 1 x 1 stride 1 (a pointwise convolution), two whose
#: 7 x 7 = 49 pixels are computed as 64 (ResNet-18's last stage; the write-back stores
#: the 49), and the stem-like 3 -> 16 whose K = 27 keeps the SIMT kernel
CONVS = {
    "3x3_residual": (dict(c=32, o=32, h=8, w=8, k=3, s=1, p=1, residual=True), True),
    "3x3_stride2": (dict(c=16, o=32, h=16, w=16, k=3, s=2, p=1), True),
    "1x1_stride2": (dict(c=32, o=64, h=8, w=8, k=1, s=2, p=0), True),
    "1x1": (dict(c=32, o=16, h=4, w=8, k=1, s=1, p=0, relu=False), True),
    "3x3_7x7_residual": (dict(c=16, o=32, h=7, w=7, k=3, s=1, p=1, residual=True), True),
    "3x3_stride2_to_7x7": (dict(c=16, o=16, h=14, w=14, k=3, s=2, p=1), True),
    "stem_k147": (dict(c=3, o=16, h=12, w=12, k=7, s=2, p=3), True),
    "1x1_to_24": (dict(c=16, o=24, h=8, w=8, k=1, s=1, p=0, relu=False), True),
    "1x1_from_8_residual": (dict(c=8, o=16, h=4, w=4, k=1, s=1, p=0, residual=True), True),
    "3x3_8_to_8": (dict(c=8, o=8, h=6, w=6, k=3, s=1, p=1), True),
    "3x3_pixels_simt": (dict(c=16, o=16, h=3, w=3, k=3, s=1, p=1), False),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_fp16_convolutions_emulated_match_the_reference(name: str, tmp_path: Path) -> None:
    """The emulated bundle (the fragments computed in C, the im2col tile gathered with its
    padding guard) against the float32 reference; the tensor-core kernel where the shapes
    allow it, its tail (bias, residual add, ReLU) in the same kernel, and the note in
    ``metadata.json``."""
    args, on_tc = CONVS[name]
    model, feeds = conv_model(**args)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    both = build_spec(model, "cuda-sm80", progress=False, precision="fp16", also_emulate=True)
    assert both.emulation is not None
    emu = write_bundle(render_files(both.emulation), tmp_path / "emu")
    src = (emu / "src/kernels.c").read_text()
    assert (MMA_CALL in src) == on_tc
    assert ("im2col" in src) == on_tc  # the gathered tile (no im2col matrix in memory)
    got = load_bundle(emu)(feeds)["y"]
    err = float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))
    assert err < FP16_TOL, f"{name}: off by {err:.2e} of the range"
    (conv,) = [k for k in both.kernels if "Conv" in [n.op for n in k.node.attrs["graph"].nodes]]
    note = conv.schedule.partition("; tensor cores: ")[2]
    if on_tc:
        assert note == ON_TENSOR_CORES
        if args.get("residual"):  # the residual add and ReLU folded into the wmma kernel
            assert {"Add", "Relu"} <= {n.op for n in conv.node.attrs["graph"].nodes}
    else:
        assert note.endswith("N below 16")


def test_a_wrong_im2col_padding_guard_is_caught(tmp_path: Path, monkeypatch: Any) -> None:
    """The test above can fail: with the gather's padding guard dropped on the left (the
    window reading the previous row's last column instead of the padding's 0) the
    emulated bundle is off by far more than the tolerance."""
    import toolchain.topi.nn.conv2d_gemm as cg

    real = cg.conv2d_nchw_im2col

    def shifted(data: Any, kernel: Any, stride: Any = 1, padding: Any = 0, *a: Any,
                **kw: Any) -> Any:
        pt, pl, pb, pr = padding
        # the left padding folded into the right one: the same output size, shifted windows
        return real(data, kernel, stride, (pt, 0, pb, pl + pr), *a, **kw)

    monkeypatch.setattr("toolchain.topi.registry_nn.conv2d_nchw_im2col", shifted)
    model, feeds = conv_model(c=16, o=16, h=8, w=8, k=3, s=1, p=1)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    d = compile_model(model, "cuda-sm80", tmp_path / "emu", progress=False, emulate=True,
                      precision="fp16")
    assert MMA_CALL in (d / "src/kernels.c").read_text()
    got = load_bundle(d, **BROKEN_BUILD)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) > 0.1


def test_a_nonzero_window_padding_is_caught(tmp_path: Path, monkeypatch: Any) -> None:
    """The K padding can fail the emulated check: a 3 x 3 convolution of 3 channels
    without spatial padding (K = 27 computed as 32; 4 x 4 = 16 pixels and 16 channels, so
    the window's padding is the only guarded zero) with that zero made 1 in the weight
    and im2col tiles is off by far more than the tolerance, and within it with the zero."""
    import toolchain.topi.nn.conv2d_gemm as cg

    model, feeds = conv_model(c=3, o=16, h=6, w=6, k=3, s=1, p=0, relu=False)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)

    def err(d: Path) -> float:
        assert MMA_CALL in (d / "src/kernels.c").read_text()
        got = load_bundle(d, **BROKEN_BUILD)(feeds)["y"]
        return float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))

    d = compile_model(model, "cuda-sm80", tmp_path / "good", progress=False, emulate=True,
                      precision="fp16")
    assert err(d) < FP16_TOL
    real = cg.scalar
    monkeypatch.setattr(cg, "scalar", lambda v, dt: real(1 if v == 0 else v, dt))
    d = compile_model(model, "cuda-sm80", tmp_path / "one", progress=False, emulate=True,
                      precision="fp16")
    assert err(d) > 0.1


def _padded_conv_kernel(**args: Any) -> ir.PrimFunc:
    """The lowered tensor-core kernel of the float16 ``conv_model(**args)`` (padded or not)."""
    model, _ = conv_model(**args)
    graph = run_pipeline(to_fp16(from_onnx(model)), layout_for_target(SM80))
    (node,) = [n for n in graph.nodes if n.op == "Fused"
               and "Conv" in [m.op for m in n.attrs["graph"].nodes]]
    s = fused_schedule(node, SM80)
    assert s.info["tensor_cores"] == ON_TENSOR_CORES
    return lower(s.schedule, target=SM80)


def test_padded_channels_and_window_are_race_free_and_in_bounds() -> None:
    """The race checker (which also checks every access against its buffer) on the
    stem-like kernel (K = 147 as 160, 36 pixels as 48) and on a 16 -> 24 one (M as 32):
    no race, no access outside a buffer in any block (the guarded weight rows, im2col rows
    and write-back); with the write-back's channel predicate taken out, the padded channels
    read the bias past its 24 elements."""
    check_races(_padded_conv_kernel(c=3, o=16, h=12, w=12, k=7, s=2, p=3))
    f = _padded_conv_kernel(c=16, o=24, h=4, w=4, k=1, s=1, p=0)
    check_races(f)
    (guard,) = [n for n, _ in st.walk(f.body) if isinstance(n, ir.IfThenElse)
                and "< 24" in str(n.condition) and "conv_weight_rows" not in str(n.then_case)]
    with pytest.raises(IndexError, match="b index 24"):
        check_races(st.replace_stmts(f, {id(guard): guard.then_case}))


def _tc_conv_kernel(hw: int = 8) -> ir.PrimFunc:
    """The lowered tensor-core kernel of a float16 3 x 3 convolution (16 -> 16, ``hw x
    hw``, padding 1, bias + ReLU: K = 144, several double-buffered steps)."""
    return _padded_conv_kernel(c=16, o=16, h=hw, w=hw, k=3, s=1, p=1)


def test_the_wmma_convolution_is_race_free_and_its_barriers_are_needed() -> None:
    """The race checker (each intrinsic call run as its declared behaviour) finds no race
    in the first block of the tensor-core convolution, and one once any barrier is taken
    out; at 7 x 7 (49 pixels computed as 64) its bounds checks find no access outside a
    buffer in any block (the guarded write-back)."""
    check_races(_tc_conv_kernel(7))
    f = _tc_conv_kernel()
    assert "im2col" in str(f) and MMA_CALL in str(f)
    check_races(f)
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert barriers
    for b in barriers:  # (limit=1: the emulation stops at the first race it finds)
        assert find_races(st.replace_stmts(f, {id(b): None}), max_blocks=1, limit=1)


@nvcc_kernel_check("wmma_conv")
def _wmma_convs(out: Path) -> dict[str, Path]:
    """Four fp16 convolutions on tensor cores for ``cuda-sm90``: a 3 x 3 one with its
    residual add at 7 x 7 (pixels padded to 64, the write-back guarded), a 1 x 1 stride 2
    one, the stem-like one (K = 147 as 160) and a 16 -> 24 one (M as 32: the weight tile's
    guarded rows, lane by lane)."""
    got = {}
    for name, args in (("tc_conv_3x3", CONVS["3x3_7x7_residual"][0]),
                       ("tc_conv_1x1", CONVS["1x1_stride2"][0]),
                       ("tc_conv_stem", CONVS["stem_k147"][0]),
                       ("tc_conv_to_24", CONVS["1x1_to_24"][0])):
        model, _ = conv_model(**args)
        got[name] = compile_model(model, "cuda-sm90", out / name, progress=False,
                                  precision="fp16", name=name)
    return got


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_wmma_convolutions_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                              tmp_path: Path) -> None:
    """Through nvcc (sm_80 and sm_90 object code, every warning an error) with the other
    GPU tests' kernels in one run (``kernels_nvcc``)."""
    for d in kernels_nvcc.of("wmma_conv").values():
        src = (d / "src/kernels.cu").read_text()
        assert MMA_CALL in src and re.search(r"__half \*?im2col\b", src)  # a shared tile
        kinds = [r["kind"] for r in json.loads((d / "metadata.json").read_text())[
            "device"]["launch_table"]]
        assert "wmma" in kinds
    kernels_nvcc.check("wmma_conv", tmp_path)


def test_fp16_resnet8_emulated_matches_the_reference(tmp_path: Path) -> None:
    """A whole ResNet-like zoo model in fp16: all ResNet-8's convolutions on tensor cores
    (the stem's K = 27 as 32), 3 x 3 and strided and 1 x 1 downsamplings, residual adds
    folded in; its emulation within the fp16 tolerance of the float32 reference (3.4e-4 and
    6.3e-4 of the range measured)."""
    spec = ZOO["resnet8"]
    model = spec.build()
    feeds = spec.inputs(model)
    want = run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)
    both = build_spec(model, "cuda-sm80", input_shapes=spec.input_shapes, progress=False,
                      precision="fp16", also_emulate=True)
    assert both.emulation is not None
    notes = [k.schedule.partition("; tensor cores: ")[2] for k in both.kernels]
    assert notes.count(ON_TENSOR_CORES) == 9  # the stem too (K = 27 computed as 32)
    assert [n for n in notes if n and n != ON_TENSOR_CORES] == []
    got = load_bundle(write_bundle(render_files(both.emulation), tmp_path / "emu"))(feeds)
    for k, v in want.items():
        v = v.astype(np.float64)
        err = float(np.max(np.abs(got[k] - v))) / float(np.max(np.abs(v)))
        assert err < FP16_TOL, f"{k} off by {err:.2e} of its range"


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", *[
    n for n, (_, on_tc) in CONVS.items() if on_tc]])
def test_fp16_convolutions_on_the_gpu_match_the_reference(name: str, tmp_path: Path) -> None:
    """The wmma convolutions (the PTX fragments on the hardware) and fp16 ResNet-18 and
    MobileNet v2 (its pointwise convolutions on tensor cores) against the reference."""
    if name in ZOO:
        spec = ZOO[name]
        model, shapes = spec.build(), spec.input_shapes
        feeds = spec.inputs(model)
    else:
        (model, feeds), shapes = conv_model(**CONVS[name][0]), None
    want = run_graph(from_onnx(model, input_shapes=shapes), feeds)
    d = compile_model(model, "cuda-sm90", tmp_path / name, input_shapes=shapes,
                      progress=False, precision="fp16")
    assert "wmma" in [r["kind"] for r in json.loads((d / "metadata.json").read_text())[
        "device"]["launch_table"]]
    got = load_bundle(d)(feeds)
    for k, v in want.items():
        v = v.astype(np.float64)
        err = float(np.max(np.abs(got[k] - v))) / float(np.max(np.abs(v)))
        assert err < FP16_TOL, f"{name}: {k} off by {err:.2e} of its range"


def test_kiln_compile_says_which_fp16_convolutions_are_on_tensor_cores(
        tmp_path: Path, capsys: Any) -> None:
    """The compile summary counts them and names the first reason of one that is not."""
    import onnx

    from toolchain.cli import main

    model, _ = conv_model(**CONVS["3x3_pixels_simt"][0])
    onnx.save(model, tmp_path / "c.onnx")
    assert main(["compile", str(tmp_path / "c.onnx"), "--target", "cuda-sm80", "--precision",
                 "fp16", "-o", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "tensor cores: 0 of 1 fp16 convolution kernels; the others keep the SIMT kernel, " \
        "why in metadata.json's kernels[].tensor_cores (first: the im2col GEMM is 16 x 9 x " \
        "144 (M x N x K): N below 16)" in capsys.readouterr().out
    model, _ = conv_model(**CONVS["1x1"][0])
    onnx.save(model, tmp_path / "d.onnx")
    assert main(["compile", str(tmp_path / "d.onnx"), "--target", "cuda-sm80", "--precision",
                 "fp16", "-o", str(tmp_path / "e"), "--no-progress"]) == 0
    assert "tensor cores: 1 of 1 fp16 convolution kernels\n" in capsys.readouterr().out


def test_the_tensor_core_convolution_is_a_tuning_task(tmp_path: Path) -> None:
    """Its tiles are the default point of the tensor-core search space (``kiln tune``
    finds the task); another point (``mma.sync`` on the same im2col tiles, three stages)
    decided by a record gives an emulated bundle within the fp16 tolerance."""
    from toolchain.autotune.apply import forcing
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.schedules.gpu.conv_tc import conv_wmma_tiles
    from toolchain.schedules.gpu.gemm_space import wmma_tiles_of

    model, feeds = conv_model(**CONVS["3x3_residual"][0])
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    (task,) = extract_tasks(model, SM80, precision="fp16")
    s = task.space
    assert s.kind == "cuda_tensorcore"
    tiles = conv_wmma_tiles(32, 64, 288, 1, SM80)
    assert tiles is not None and wmma_tiles_of(s.default()).label() == tiles.label()
    p = s.canonical({**s.default(), "intrinsic": "mma", "stages": 3})
    with forcing({s.workload: s.trace(p)}):
        d = compile_model(model, "cuda-sm80", tmp_path / "mma", progress=False,
                          emulate=True, precision="fp16")
    assert "kiln_mma_" in (d / "src/kernels.c").read_text()
    got = load_bundle(d)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < FP16_TOL


@pytest.mark.parametrize("hw, out", [((9, 12), (8, 6)), ((8, 14), (7, 7))])
def test_a_batch_of_two_with_dilation_and_uneven_padding_emulated(
        hw: tuple[int, int], out: tuple[int, int], tmp_path: Path) -> None:
    """Batch 2 (the images on ``blockIdx.z``), pads (top 1, left 0, bottom 2, right 1),
    dilation 2 down and stride 2 across: 8 x 6 = 48 pixels, and 7 x 7 = 49 computed as 64
    (the padding pixels' predicate with the batch)."""
    rng = np.random.default_rng(1)
    wt = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 2, 1],
                          dilations=[2, 1], strides=[1, 2])], "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, *hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32, *out])],
        [numpy_helper.from_array(wt, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((2, 16, *hw)).astype(np.float32)}
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    d = compile_model(model, "cuda-sm80", tmp_path / "emu", progress=False, emulate=True,
                      precision="fp16")
    notes = [k.get("tensor_cores") for k in json.loads((d / "metadata.json").read_text())[
        "kernels"]]
    assert ON_TENSOR_CORES in notes
    got = load_bundle(d)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < FP16_TOL

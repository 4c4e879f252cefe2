"""The occupancy rule of the tiled GPU kernels (``gemm.choose_tiles``, ``gemm.fills_gpu``,
``gemm.useful_fraction``) on ResNet-18's convolutions at batch 1 and on big GEMMs: every
SM gets a block and enough warps, a big GEMM keeps its 4 x 4 register tiles, and a tile
mostly past the output's edge gives way to the generic kernel. Pure arithmetic on the
descriptors: no GPU, no compiler."""

from __future__ import annotations

import pytest

from toolchain.schedules.gpu import gemm
from toolchain.target import load_target, parse_target

SM80 = load_target("cuda-sm80")
SM90 = load_target("cuda-sm90")

#: ResNet-18's convolutions at batch 1 (224 x 224 input), NCHW: (name, out channels,
#: output rows = columns, in channels, kh * kw); the tiled kernel's y axis is the output
#: channels, x the output columns, blockIdx.z the output rows
RESNET18 = [("conv1", 64, 112, 3, 49), ("layer1", 64, 56, 64, 9), ("layer2.0", 128, 28, 64, 9),
            ("layer2", 128, 28, 128, 9), ("layer2.ds", 128, 28, 64, 1),
            ("layer3.0", 256, 14, 128, 9), ("layer3", 256, 14, 256, 9),
            ("layer3.ds", 256, 14, 128, 1), ("layer4.0", 512, 7, 256, 9),
            ("layer4", 512, 7, 512, 9), ("layer4.ds", 512, 7, 256, 1)]


@pytest.mark.parametrize("target", [SM80, SM90], ids=lambda t: t.name)
@pytest.mark.parametrize("layer", RESNET18, ids=lambda c: c[0])
def test_every_resnet18_convolution_fills_the_gpu(layer, target) -> None:
    _, co, hw, ci, window = layer
    t = gemm.choose_tiles(co, hw, ci, window, target, batch=hw)
    blocks = gemm.grid_blocks(t, co, hw, hw)
    assert blocks >= target.sm_count, (t, blocks)
    assert gemm.fills_gpu(t, co, hw, hw, target) or t.ry * t.rx == 1
    assert t.threads >= target.warp_size and t.threads <= 256
    assert gemm.useful_fraction(t, co, hw) >= gemm.MIN_USEFUL
    # the old choice (no occupancy rule: a descriptor without sm_count) left SMs idle or
    # short of warps on every stage after the first on 132 SMs (the measured 2x)
    old = gemm.choose_tiles(co, hw, ci, window, _without_sm_count(target), batch=hw)
    if not gemm.fills_gpu(old, co, hw, hw, target):
        assert t.ry * t.rx < old.ry * old.rx
    else:
        assert t == old
    if target is SM90 and layer[0] != "conv1":
        assert gemm.grid_blocks(old, co, hw, hw) <= 112 < target.sm_count


def test_the_last_stage_gets_one_output_a_thread_and_224_blocks() -> None:
    t = gemm.choose_tiles(512, 7, 512, 9, SM90, batch=7)
    assert (t.ry, t.rx, t.ty, t.tx) == (1, 1, 16, 8)
    assert gemm.grid_blocks(t, 512, 7, 7) == 224  # 56 with the 4 x 1 register tiles


@pytest.mark.parametrize("n", [1024, 2048, 4096])
def test_a_big_gemm_keeps_its_register_tiles(n: int) -> None:
    for target in (SM80, SM90):
        t = gemm.choose_tiles(n, n, n, 1, target)
        assert (t.ty, t.tx, t.ry, t.rx) == (16, 16, 4, 4)
        assert gemm.fills_gpu(t, n, n, 1, target)


def test_the_rule_reads_the_descriptor_not_the_name() -> None:
    """A renamed GPU with four times the SMs needs smaller tiles for the same GEMM."""
    wide = parse_target("name: wide-gpu\nkind: cuda\nextends: cuda-sm90\nsm_count: 528\n")
    t = gemm.choose_tiles(1024, 1024, 1024, 1, wide)
    assert t.ry * t.rx < 16 and gemm.fills_gpu(t, 1024, 1024, 1, wide)
    few = parse_target("name: one-warp-sms\nkind: cuda\nextends: cuda-sm90\n"
                       "max_threads_per_sm: 256\n")
    assert gemm.min_warps_per_sm(few) == 1 and gemm.min_warps_per_sm(SM90) == 8


def test_a_ragged_tile_mostly_outside_the_output_keeps_the_generic_kernel() -> None:
    """7 x 9 outputs: 16 threads on x (a warp's worth), 2 on y: 63 of 128 tiles used."""
    t = gemm.choose_tiles(7, 9, 5, 1, SM90)
    assert gemm.useful_fraction(t, 7, 9) < gemm.MIN_USEFUL
    from tests.schedules.gpu.test_gemm import relu_matmul

    sch = relu_matmul(0, 7, 9, 5)
    assert gemm.try_tile_gemm(sch, sch.get_block("C"), SM90) is None
    sch = relu_matmul(0, 50, 70, 37)  # ragged too, but mostly inside
    assert gemm.try_tile_gemm(sch, sch.get_block("C"), SM90) is not None


def _without_sm_count(target):
    from dataclasses import replace

    return replace(target, sm_count=None)


# ---------------------------------------------------------------- split-K

def test_split_k_is_asked_for_only_where_one_output_a_thread_does_not_fill_the_gpu() -> None:
    # layer4: 2 parts fill the GPU (448 blocks) but each would sum 2,304 products in one
    # chain (more than MAX_SERIAL): 4 parts of 1,152
    assert gemm.split_k_factor(512, 7, 512, 9, SM90, batch=7) == 4
    assert gemm.split_k_factor(512, 7, 256, 1, SM90, batch=7) == 1  # 256 products: short
    for name, co, hw, ci, window in RESNET18[:-3]:  # the stages before the last fill it
        want = 2 if name == "layer3" else 1  # layer3: 2,304 products an output a thread
        assert gemm.split_k_factor(co, hw, ci, window, SM90, batch=hw) == want, name
    assert gemm.split_k_factor(8, 3, 1024, 1, SM80, batch=2) == 8  # never fills: the most
    assert gemm.split_k_factor(4096, 4096, 4096, 1, SM90) == 1


def test_a_long_chain_is_split_only_at_one_output_a_thread_and_with_sm_count() -> None:
    """The MAX_SERIAL rule: layer3 (256 -> 256, 14 x 14: 2,304 products an output, one
    output a thread, the GPU already filled) is split in 2; a big GEMM with 4 x 4 register
    tiles (4,096 products, independent chains) and a descriptor without ``sm_count`` (no
    occupancy rule) are not."""
    assert gemm.split_k_factor(256, 14, 256, 9, SM90, batch=14) == 2
    assert gemm.split_k_factor(256, 14, 256, 9, _without_sm_count(SM90), batch=14) == 1
    assert gemm.split_k_factor(2048, 2048, 4096, 1, SM90) == 1
    assert gemm.split_k_factor(256, 14, 128, 9, SM90, batch=14) == 1  # layer3.0: 1,152


def test_short_reductions_with_a_full_generic_grid_keep_the_generic_kernel() -> None:
    """``prefers_generic``: ResNet-18's stem (147 products, 802,816 outputs) and the 1 x 1
    downsampling convolutions whose generic grid fills the GPU keep one thread an output;
    the long reductions and the transformer's small matmuls (too few outputs for the
    generic grid) stay tiled."""
    short = {name: gemm.prefers_generic(co * hw * hw, ci * window, SM90)
             for name, co, hw, ci, window in RESNET18}
    assert short == {"conv1": True, "layer1": True, "layer2.0": True, "layer2": False,
                     "layer2.ds": True, "layer3.0": False, "layer3": False,
                     "layer3.ds": True, "layer4.0": False, "layer4": False,
                     "layer4.ds": False}
    for outputs, k in ((2 * 32 * 192, 64), (2 * 32 * 64, 64), (2 * 32 * 256, 64),
                       (2 * 32 * 64, 256)):  # the transformer encoder's matmuls
        assert not gemm.prefers_generic(outputs, k, SM90)
    assert not gemm.prefers_generic(64 * 112 * 112, 147, _without_sm_count(SM90))
    from tests.schedules.gpu.test_gemm import relu_matmul

    sch = relu_matmul(0, 512, 512, 16)  # 262,144 outputs, 16 products each
    assert gemm.try_tile_gemm(sch, sch.get_block("C"), SM90) is None
    sch = relu_matmul(0, 512, 512, 1024)
    assert gemm.try_tile_gemm(sch, sch.get_block("C"), SM90) is not None
    assert gemm.split_k_factor(8, 3, 1024, 1, SM80, batch=2) == 8  # never fills: the most
    assert gemm.split_k_factor(4096, 4096, 4096, 1, SM90) == 1


def test_split_k_is_a_tiled_kernel_of_partial_sums_then_their_sum_with_the_tail() -> None:
    """The partial sums (a tiled kernel, the parts on blockIdx.z, into the kernel's
    scratch) and their sum with the bias and Relu folded in (a second, generic kernel).
    Races, the emulation against the reference, nvcc and the GPU: ``conv1x1_split_k`` of
    ``tests/schedules/gpu/test_gemm.py``."""
    from tests.schedules.gpu.test_gemm import MODELS
    from toolchain.driver import lower
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes import run_pipeline
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.schedules.gpu.generic import fused_schedule
    from toolchain.tir.transform.inject_barriers import kernels_of

    model = MODELS["conv1x1_split_k"]()
    (node,) = run_pipeline(from_onnx(model), layout_for_target(SM80)).nodes
    s = fused_schedule(node, SM80)
    text = str(s.schedule.mod)
    assert s.info["schedule"] == "gpu tiled gemm"
    assert "conv2d_nchw_rf = T.alloc_buffer((8, 1, 8, 2, 4)" in text  # 8 parts
    f = lower(s.schedule, target=SM80)
    first, second = kernels_of(f.body)[1]
    assert "shared" in str(first) and "shared" not in str(second)
    assert "T.Select" in str(second)  # the Relu, folded into the sum's write-back

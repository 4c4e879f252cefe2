"""Partitioning an int8 graph between the accelerator and the host, and the int32
accumulator programs (byte planes) the accelerator layers compile to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolchain.errors import ScheduleError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.qops import qconv_acc
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.target import load_target
from toolchain.vta.cfsim import run_cfsim
from toolchain.vta.compile import compile_conv2d, compile_dense
from toolchain.vta.isa import Store
from toolchain.vta.partition import ACCELERATOR, HOST, partition

from .qmodels import quantized, small_cnn, small_mlp


@pytest.fixture(scope="module")
def cnn() -> Graph:
    return quantize_ops(from_onnx(quantized(small_cnn())))


def test_int32_conv_program_is_bit_exact_with_the_accumulators() -> None:
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (20, 24, 3, 3), dtype=np.int8)
    layer = compile_conv2d(w, 6, 6, 0, pad=1, layer="c1", output="int32")
    x = rng.integers(-128, 128, (24, 6, 6), dtype=np.int8)
    got = layer.read_output(run_cfsim(layer.program, layer.image(x), tokens=True, seed=3).dram)
    attrs = {"pads": (1, 1, 1, 1), "strides": (1, 1), "dilations": (1, 1), "group": 1,
             "x_zero_point": 0}
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, qconv_acc(x[None], w, attrs)[0])


def test_int32_dense_program_is_bit_exact_with_the_accumulators() -> None:
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (72, 40), dtype=np.int8)
    x = rng.integers(-128, 128, (3, 72), dtype=np.int8)
    layer = compile_dense(w, 3, 0, vthreads=1, layer="fc", output="int32")
    got = layer.read_output(run_cfsim(layer.program, layer.image(x), tokens=True).dram)
    np.testing.assert_array_equal(got, x.astype(np.int32) @ w.astype(np.int32))


def test_unknown_output_kind_is_refused_naming_the_layer() -> None:
    w = np.ones((16, 32), np.int8)
    with pytest.raises(ScheduleError, match="layer 'fc9'.*int16"):
        compile_dense(w, 4, 0, layer="fc9", output="int16")


def test_partition_places_each_node_with_a_reason(cnn: Graph) -> None:
    p = partition(cnn, load_target("vta"))
    where = {x.node: x.device for x in p.placements}
    assert where["conv1"] == where["conv2"] == ACCELERATOR
    assert where["pool"] == HOST
    reasons = {x.node: x.reason for x in p.placements}
    # 3 input channels: K = 27 of the im2col GEMM fills 2 blocks of 16 where the direct
    # convolution pads the 3 channels of each of the 9 taps to a block
    assert "3->32 channels" in reasons["conv1"] and "im2col GEMM 64x27" in reasons["conv1"]
    assert p.layers["conv1_vta"].conv is not None
    assert "no pooling unit" in reasons["pool"]
    # one row, 10 outputs (one BLOCK_OUT block): tiles of one block, one virtual thread
    assert where["fc"] == ACCELERATOR and "1x512 by 512x10" in reasons["fc"]
    assert p.layers["fc_vta"].vthreads == 1
    assert all(x.reason for x in p.placements)
    assert [x.node for x in p.placements] == [n.name for n in cnn.nodes]
    assert set(p.layers) == {"conv1_vta", "conv2_vta", "fc_vta"}
    ops = [n.op for n in p.graph.nodes]
    assert "VtaConv2d" in ops and ops.index("QRequant") == ops.index("VtaConv2d") + 1
    assert "conv2" in p.summary()


def test_partitioned_graph_equals_the_integer_reference(cnn: Graph) -> None:
    p = partition(cnn, load_target("vta"))
    x = {"x": np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want, got = run_graph(cnn, x), run_graph(p.graph, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_partition_puts_both_gemms_of_an_mlp_on_the_accelerator() -> None:
    g = quantize_ops(from_onnx(quantized(small_mlp())))
    p = partition(g, load_target("vta"))
    where = {x.node: x for x in p.placements}
    # fc2: 10 outputs are one BLOCK_OUT block, tiles of one block
    assert where["fc1"].device == where["fc2"].device == ACCELERATOR
    x = {"x": np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)}
    want, got = run_graph(g, x), run_graph(p.graph, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _qconv(group: int, dtype: str = "int8") -> Node:
    x = Value("x", (1, 32, 6, 6), dtype)
    w = Value.constant("w", np.ones((32, 32 // group, 3, 3), np.int8))
    consts = [Value.constant("b", np.zeros(32, np.int32)),
              Value.constant("m", np.full(32, 1 << 30, np.int32)),
              Value.constant("s", np.tile(np.array([1, 1 << 30], np.int32), (32, 1)))]
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": group,
             "x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127,
             "out_dtype": "int8"}
    return Node("QConv", "c", [x, w, *consts], [Value("y", (1, 32, 6, 6), "int8")], attrs)


@pytest.mark.parametrize("group, dtype, why", [
    (32, "int8", "depthwise convolution"), (4, "int8", "grouped convolution"),
    (1, "uint8", "uint8 input")])
def test_partition_keeps_what_the_accelerator_cannot_run_on_the_host(
        group: int, dtype: str, why: str) -> None:
    n = _qconv(group, dtype)
    g = Graph("g", [n.inputs[0]], [n.outputs[0]], [n])
    p = partition(g, load_target("vta"))
    assert p.placements[0].device == HOST and why in p.placements[0].reason
    assert p.graph.nodes == g.nodes and not p.layers


def test_a_variant_without_a_clamp_op_keeps_its_layers_on_the_host(tmp_path: Path) -> None:
    """A variant without ALU MAX (and so without alu_max_imm) failed the whole compile with
    "declares no intrinsic 'alu_max_imm'"; its layers stay on the host with the reason."""
    (tmp_path / "nomax.yaml").write_text(
        "name: nomax\nkind: vta\nextends: vta\nalu: {ops: [MIN, ADD, SHR, MUL]}\n"
        "drop_intrinsics: [alu_max_imm, alu_max]\n")
    n = _qconv(1)
    g = Graph("g", [n.inputs[0]], [n.outputs[0]], [n])
    p = partition(g, load_target(tmp_path / "nomax.yaml"))
    assert p.placements[0].device == HOST and not p.layers
    assert p.placements[0].reason.startswith("target 'nomax' has no intrinsic alu_max_imm: "
                                             "the accelerator's layer schedules need gemm")


def test_a_conv_no_two_thread_split_fits_runs_on_one_thread() -> None:
    """7 output rows (prime) and one block of 16 output channels: no tiling splits over
    two virtual threads, so the partition compiles it with one."""
    rng = np.random.default_rng(3)
    x = Value("x", (1, 16, 7, 7), "int8")
    w = Value.constant("w", rng.integers(-128, 128, (16, 16, 3, 3), dtype=np.int8))
    consts = [Value.constant("b", rng.integers(-500, 500, 16).astype(np.int32)),
              Value.constant("m", np.full(16, 1 << 30, np.int32)),
              Value.constant("s", np.tile(np.array([1, 1 << 30], np.int32), (16, 1)))]
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1,
             "x_zero_point": 3, "y_zero_point": 0, "out_min": -128, "out_max": 127,
             "out_dtype": "int8"}
    n = Node("QConv", "c7", [x, w, *consts], [Value("y", (1, 16, 7, 7), "int8")], attrs)
    g = Graph("g", [x], [n.outputs[0]], [n])
    p = partition(g, load_target("vta"))
    assert p.placements[0].device == ACCELERATOR, p.placements[0].reason
    assert p.layers["c7_vta"].vthreads == 1
    feed = {"x": rng.integers(-128, 128, (1, 16, 7, 7), dtype=np.int8)}
    np.testing.assert_array_equal(run_graph(p.graph, feed)["y"], run_graph(g, feed)["y"])


@pytest.mark.parametrize("k, wmax, planes", [
    (16, 1, 2),       # |acc| <= 128 * 16: two bytes
    (512, 127, 3),    # 128 * 127 * 512 < 2**23: three
    (520, 127, 4),    # just over: four
    (32, 0, 1),       # zero weights: the low byte alone
])
def test_int32_programs_store_as_few_byte_planes_as_the_weights_allow(
        k: int, wmax: int, planes: int) -> None:
    """The extreme accumulators (int8 inputs of -128 and 127 against weights of +-wmax)
    come back exactly from the fewest planes that hold them."""
    rng = np.random.default_rng(k)
    w = (rng.choice([-1, 1], (k, 32)) * wmax).astype(np.int8)
    x = np.where(rng.random((4, k)) < 0.5, -128, 127).astype(np.int8)
    x[0] = np.where(w[:, 0] < 0, 127, -128)        # the most negative sum of column 0
    x[1] = np.where(w[:, 1] < 0, -128, 127)        # the most positive of column 1
    layer = compile_dense(w, 4, 0, vthreads=1, layer="fc", output="int32")
    assert layer.planes == planes
    stores = sum(isinstance(i, Store) for i in layer.program.insns)
    assert stores % planes == 0
    got = layer.read_output(run_cfsim(layer.program, layer.image(x), tokens=True).dram)
    np.testing.assert_array_equal(got, x.astype(np.int32) @ w.astype(np.int32))

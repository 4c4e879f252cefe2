"""The pipeline end to end: every zoo model gives the same results before and after all
passes, in every target layout; the pipeline dumps the graph after each pass."""

from __future__ import annotations

import pytest

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, zoo_graph
from toolchain.errors import OptionError
from toolchain.graph.passes import DEFAULT_PASSES, expand_recurrent, run_pipeline
from toolchain.zoo import ZOO

FAST = [name for name, spec in ZOO.items() if not spec.slow]


@pytest.mark.parametrize("layout", ["nchw", "nchw8c", "nhwc"])
@pytest.mark.parametrize("model", FAST)
def test_zoo_model_is_unchanged_by_the_pipeline(model, layout):
    graph, inputs = zoo_graph(model)
    fused = run_pipeline(graph, target_layout=layout)
    assert all(n.op == "Fused" for n in fused.nodes)
    assert len(fused.nodes) < len(expand_recurrent(graph).nodes)  # LSTM: many nodes
    assert_same_results(graph, fused, inputs)


@pytest.mark.slow
def test_resnet18_once():
    graph, inputs = zoo_graph("resnet18")
    fused = run_pipeline(graph, target_layout="nchw16c")
    # 20 convs (BN folded; the add + relu of each block fused in), the pool, the dense,
    # flatten, and the input transform
    assert sum(n.attrs["pattern"] == "complex-out-fusable" for n in fused.nodes) == 23
    assert_same_results(graph, fused, inputs)


def test_dump_dir_gets_the_graph_after_each_pass(tmp_path):
    graph, _ = zoo_graph("lenet5")
    run_pipeline(graph, target_layout="nchw8c", dump_dir=tmp_path / "ir")
    files = sorted(p.name for p in (tmp_path / "ir").iterdir())
    assert files == ["00_input.txt"] + [f"{i:02d}_{p}.txt"
                                        for i, p in enumerate(DEFAULT_PASSES, start=1)]
    assert "BatchNormalization" not in (tmp_path / "ir" / "05_fold_affine.txt").read_text()
    layout = (tmp_path / "ir" / "08_transform_layout.txt").read_text()
    assert "LayoutConv" in layout and "Fused" not in layout
    fused = (tmp_path / "ir" / "11_fuse.txt").read_text()
    assert "kernel fused_conv2d_relu_1 (complex-out-fusable):" in fused


def test_pass_selection_and_unknown_pass():
    b = GraphBuilder()
    x = b.input("x", (2,))
    y = b.op("Relu", [b.op("Identity", [x])])
    g = b.graph([y])
    assert [n.op for n in run_pipeline(g, passes=["simplify"]).nodes] == ["Relu"]
    assert len(DEFAULT_PASSES) == 11
    assert DEFAULT_PASSES[:2] == ("expand_recurrent", "quantize_ops")
    assert DEFAULT_PASSES[-1] == "fuse"
    assert [n.op for n in run_pipeline(g, passes=[lambda g: g]).nodes] == ["Identity", "Relu"]
    with pytest.raises(OptionError, match="unknown graph pass 'fold'; the passes are: "
                                          "expand_recurrent, quantize_ops, constant_fold"):
        run_pipeline(g, passes=["fold"])


def test_passes_do_not_modify_their_input():
    graph, inputs = zoo_graph("ds_cnn")
    before = str(graph)
    run_pipeline(graph, target_layout="nhwc")
    assert str(graph) == before


def test_tensorflow_style_nhwc_model_on_an_nhwc_target_needs_no_input_transform():
    graph, inputs = zoo_graph("ds_cnn")  # NHWC input, Transpose to NCHW, convs
    fused = run_pipeline(graph, target_layout="nhwc")
    inner_ops = [n.op for k in fused.nodes for n in k.attrs["graph"].nodes]
    # no input transform; the exit transform after the 1x1 pool moves no data: a Reshape
    assert "Transpose" not in inner_ops and "LayoutTransform" not in inner_ops
    assert_same_results(graph, fused, inputs)


def test_long_graph_folds_every_batchnorm_and_drops_every_identity():
    b = GraphBuilder()
    h = b.input("x", (1, 8, 4, 4))
    for i in range(300):
        h = b.op("Relu", [b.op("Identity", [h])])
        if i % 3 == 0:
            h = b.op("Conv", [h, b.weight(f"w{i}", (8, 8, 1, 1))])
            h = b.op("BatchNormalization", [h] + [b.weight(f"bn{i}.{k}", (8,), 0.5, 1.5)
                                                  for k in range(4)])
    g = b.graph([h])
    fused = run_pipeline(g, target_layout="nchw8c")
    # the first relu + input transform, 100 conv kernels (BN folded, each with the relus up
    # to the next conv), the output transform
    names = [n.name for n in fused.nodes]
    assert len(names) == 102 and names[0] == "fused_relu_layout_0"
    assert names[1:-1] == [f"fused_conv2d_relu_{i}" for i in range(1, 101)]
    assert_same_results(g, fused)

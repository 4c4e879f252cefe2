"""The fuzzer's CI batch: random valid ONNX graphs (fixed seeds) compiled for every CPU
target this host runs, compared with onnxruntime and the reference executor. Explore
further with ``python -m tests.fuzz --count N --seed S`` (docs/testing.md)."""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tests.fuzz.__main__ import BACKENDS, TARGETS
from tests.fuzz.accel import random_accel_model
from tests.fuzz.batch import FloatBatch, Int8Batch
from tests.fuzz.graphs import FAMILIES, INT8_FAMILIES, random_model
from tests.fuzz.oracle import Finding, check, check_int8, shrink
from tests.fuzz.wide import WIDE_FAMILIES, random_wide_model
from tests.tools import needs

#: the CI batch: about a minute on one core in all
SEEDS = range(40)
BACKEND_SEEDS = range(100, 115)
INT8_SEEDS = range(200, 210)
BOARD_SEEDS = range(300, 305)
#: accelerator-shaped int8 graphs on vta, each with layers on the accelerator
ACCEL_SEEDS = range(400, 406)
BOARD = "board:qemu-mps2-an386"  # a Cortex-M4 firmware under QEMU


def _report(seed: int, model, findings, flag: str = "") -> str:
    return (f"seed {seed} ({' '.join(n.op_type for n in model.graph.node)}): "
            + "; ".join(f"{f.kind} on {f.target}: {f.detail[:300]}" for f in findings)
            + f"\nreproduce: python -m tests.fuzz --count 1 --seed {seed}{flag}")


#: float graphs built as one bundle per target (tests/fuzz/batch.py); a batch's seeds
#: share an xdist group, so one worker builds it
FLOAT_BATCH = 8


@functools.cache
def _batch(seeds: range, targets: tuple[str, ...], n: int) -> FloatBatch:
    return FloatBatch([random_model(s) for s in seeds[n * FLOAT_BATCH:(n + 1) * FLOAT_BATCH]],
                      targets)


def _clean_in_its_batch(seeds: range, targets: tuple[str, ...], seed: int) -> bool:
    n, i = divmod(seed - seeds.start, FLOAT_BATCH)
    return _batch(seeds, targets, n).passes(i)


def _batched(seeds: range, group: str) -> list:
    return [pytest.param(s, marks=pytest.mark.xdist_group(
        f"fuzz-{group}-{(s - seeds.start) // FLOAT_BATCH}")) for s in seeds]


@pytest.mark.parametrize("seed", _batched(SEEDS, "float"))
def test_random_graph_matches_onnxruntime_on_every_target(seed: int) -> None:
    """Clean in its batch, or checked alone (the findings and report of the graph alone)."""
    if _clean_in_its_batch(SEEDS, TARGETS, seed):
        return
    model, inputs = random_model(seed)
    findings = check(model, inputs, TARGETS)
    assert not findings, _report(seed, model, findings)


@pytest.mark.parametrize("seed", _batched(BACKEND_SEEDS, "backends"))
def test_random_graph_matches_through_llvm_and_the_gpu_emulation(seed: int) -> None:
    if _clean_in_its_batch(BACKEND_SEEDS, BACKENDS, seed):
        return
    model, inputs = random_model(seed)
    findings = check(model, inputs, BACKENDS)
    assert not findings, _report(seed, model, findings, f" --targets {','.join(BACKENDS)}")


def test_argmax_over_rounding_ties_is_ambiguous_not_wrong() -> None:
    """Seed 12323, shrunk: two instances of one expanded row, instance-normalised, then
    ArgMax across them. The exact values tie; onnxruntime's differ by an ulp."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12323)
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("InstanceNormalization", ["e", "s", "b"], ["n"], epsilon=1e-5),
             helper.make_node("ArgMax", ["n"], ["i"], axis=0, keepdims=1),
             helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)]
    inits = [numpy_helper.from_array(np.array([2, 3, 10], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "tie", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 10])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 3, 10])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    inputs = {"x": rng.standard_normal((1, 10)).astype(np.float32)}
    findings = check(model, inputs, ("c-generic",))
    assert all(f.kind == "ambiguous" for f in findings), _report(12323, model, findings)


#: the int8 graphs' targets; the graphs are quantized one by one and built as one bundle
#: per target (tests/fuzz/batch.py), one xdist group
INT8_TARGETS = ("c-generic", "x86_64-avx512")


@functools.cache
def _int8_batch(seeds: range = INT8_SEEDS, targets: tuple[str, ...] = INT8_TARGETS
                ) -> Int8Batch:
    return Int8Batch([random_model(s, families=INT8_FAMILIES) for s in seeds], targets)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.xdist_group("fuzz-int8"))
                                  for s in INT8_SEEDS])
def test_random_int8_graph_is_bit_exact(seed: int) -> None:
    """Clean in its batch, or checked alone (the findings and report of the graph alone)."""
    if _int8_batch().passes(seed - INT8_SEEDS.start):
        return
    model, inputs = random_model(seed, families=INT8_FAMILIES)
    findings = check_int8(model, inputs, INT8_TARGETS)
    assert not findings, _report(seed, model, findings, " --int8")


@pytest.mark.parametrize("seed", ACCEL_SEEDS)
def test_accelerator_graph_is_bit_exact_on_vta_with_layers_on_the_accelerator(
        seed: int) -> None:
    """Bit-exact on the accelerator's C simulator, and not vacuously: the bundle must
    have put at least one layer on the accelerator (the general int8 graphs almost never
    do)."""
    model, inputs = random_accel_model(seed)
    placed: Counter[str] = Counter()
    findings = check_int8(model, inputs, ("vta",), placed)
    assert not findings, _report(seed, model, findings, " --accelerator")
    assert placed["vta bundles"] == 1
    assert placed["vta with accelerator layers"] == 1, f"seed {seed}: all on the host"


def test_an_accelerator_target_given_as_a_yaml_file(tmp_path) -> None:
    """A target may be a YAML file (here the accelerator with a sixteenth of its buffers,
    so the layers split into many tiles): its bundle goes to a directory of its own, not
    over the YAML file (which the compile refused, a ``refused`` finding on every graph)."""
    path = tmp_path / "vta-small.yaml"
    path.write_text("name: vta-small\nkind: vta\nextends: vta\n"
                    "buffers: {input: 2048, weight: 16384, accumulator: 4096, uop: 4096}\n")
    model, inputs = random_accel_model(ACCEL_SEEDS[0])
    placed: Counter[str] = Counter()
    assert check_int8(model, inputs, (str(path),), placed) == []
    assert placed[f"{path} with accelerator layers"] == 1


def test_the_accelerator_generator_is_deterministic_and_accelerator_shaped() -> None:
    a, _ = random_accel_model(11)
    assert a.SerializeToString() == random_accel_model(11)[0].SerializeToString()
    convs = [n for s in range(100) for n in random_accel_model(s)[0].graph.node
             if n.op_type == "Conv"]
    ops = {n.op_type for s in range(100) for n in random_accel_model(s)[0].graph.node}
    assert {"Conv", "Gemm", "MatMul", "Add", "Relu", "MaxPool", "Flatten"} <= ops
    attrs = [{"strides": [1, 1], "pads": [0] * 4}
             | {a.name: list(a.ints) or a.i for a in n.attribute} for n in convs]
    square = [a for a in attrs if len(set(a["kernel_shape"])) == 1]
    assert {a["kernel_shape"][0] for a in square} == {1, 3, 5}
    assert all(len(set(a["pads"])) == 1 and len(set(a["strides"])) == 1 for a in square)
    assert {a["strides"][0] for a in attrs} == {1, 2}
    # a quarter non-square (kernels, strides and each side's padding of their own)
    other = [a for a in attrs if len(set(a["kernel_shape"])) == 2]
    assert 0.1 < len(other) / len(attrs) < 0.4
    assert any(len(set(a["strides"])) == 2 for a in other)
    assert any(len(set(a["pads"])) > 1 for a in other)
    assert "group" not in {k for a in attrs for k in a}


def test_float_sums_of_an_int8_graph_get_the_float_tolerance(monkeypatch) -> None:
    """Seed 130192: the quantizer leaves a MatMul of two activations in float, and its sum
    is rounded in another order by the bundle than by the reference (148.17801 against
    148.178) — no finding. Yet a value the integer kernels compute still has to match bit
    for bit: a bundle whose integer-derived output is off by one step is ``wrong``."""
    from toolchain.bundle import host

    model, inputs = random_model(130192, families=INT8_FAMILIES)
    assert check_int8(model, inputs, ("c-generic",)) == []
    real = host.BundleModule.__call__
    scale = {}

    def one_step_off(self, inputs):
        out = real(self, inputs)
        name = min(out)  # t13: a dequantized QGemm output
        scale[name] = float(np.abs(np.diff(np.unique(out[name]))).min())
        return {**out, name: out[name] + np.float32(scale[name])}

    monkeypatch.setattr(host.BundleModule, "__call__", one_step_off)
    findings = check_int8(model, inputs, ("c-generic",))
    assert [f.kind for f in findings] == ["wrong"], findings
    assert "int8 output 't13'" in findings[0].detail


@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
@pytest.mark.parametrize("seed", _batched(BOARD_SEEDS, "board"))
def test_random_graph_on_a_cortex_m_board_under_qemu(seed: int) -> None:
    """Clean in its batch (one firmware), or checked alone."""
    if _clean_in_its_batch(BOARD_SEEDS, (BOARD,), seed):
        return
    model, inputs = random_model(seed)
    findings = check(model, inputs, (BOARD,))
    assert not findings, _report(seed, model, findings, f" --targets {BOARD}")


#: the int8 graphs on the board: one firmware, one xdist group
INT8_BOARD_SEEDS = INT8_SEEDS[:3]


@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.xdist_group(
    "fuzz-int8-board")) for s in INT8_BOARD_SEEDS])
def test_random_int8_graph_on_a_cortex_m_board_is_bit_exact(seed: int) -> None:
    """Clean in its batch (one firmware), or checked alone."""
    if _int8_batch(INT8_BOARD_SEEDS, (BOARD,)).passes(seed - INT8_BOARD_SEEDS.start):
        return
    model, inputs = random_model(seed, families=INT8_FAMILIES)
    findings = check_int8(model, inputs, (BOARD,))
    assert not findings, _report(seed, model, findings, f" --int8 --targets {BOARD}")


def test_the_generator_is_deterministic_and_covers_every_family() -> None:
    a, _ = random_model(7)
    b, _ = random_model(7)
    assert a.SerializeToString() == b.SerializeToString()
    ops = {n.op_type for s in range(300) for n in random_model(s)[0].graph.node}
    for op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "Gemm", "MatMul", "Resize",
               "Slice", "Pad", "Concat", "Split", "Gather", "LayerNormalization", "Where",
               "ReduceMean", "Expand", "Tile", "PRelu", "Softmax"):
        assert op in ops, op
    assert len(FAMILIES) >= 15


def test_the_wide_generator_is_deterministic_and_draws_what_ci_does_not() -> None:
    """``--wide`` (campaigns only: no graph of it is compiled in CI)."""
    a, _ = random_wide_model(7)
    assert a.SerializeToString() == random_wide_model(7)[0].SerializeToString()
    models = [random_wide_model(s)[0] for s in range(120)]
    ops = {n.op_type for m in models for n in m.graph.node}
    for op in ("TopK", "CumSum", "Trilu", "GatherElements", "GatherND", "ScatterElements",
               "ScatterND", "Einsum", "Mod", "Round", "Sum", "LessOrEqual", "Xor",
               "ReduceL2", "ArgMin", "LpPool", "ConstantOfShape", "OneHot"):
        assert op in ops, op
    assert len(WIDE_FAMILIES) >= 20
    assert any(n.op_type == "Conv" and any(a.name == "auto_pad" for a in n.attribute)
               for m in models for n in m.graph.node)
    assert any(len(i.type.tensor_type.shape.dim) == 5 for m in models for i in m.graph.input)
    assert any(o.name in {i.name for i in m.graph.input} for m in models
               for o in m.graph.output)  # an input that is an output
    assert any(n.op_type == "Cast" and n.attribute[0].i == TensorProto.INT32
               for m in models for n in m.graph.node)


@pytest.mark.parametrize("op, x, attrs", [
    ("Floor", [2.0000002, 0.4], {}), ("Round", [2.4999998, 0.1], {}),
    ("ThresholdedRelu", [1.0000001, 3.0], {"alpha": 1.0}),
    ("Shrink", [-0.5000001, 2.0], {"lambd": 0.5})])
def test_a_jump_at_a_rounding_distance_is_ambiguous(op, x, attrs) -> None:
    """An op with a jump whose input (as onnxruntime computes it) is within rounding of
    the jump: another implementation's last bit puts it on the other side."""
    from onnx import helper

    from tests.fuzz.oracle import near_tie

    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert near_tie(m, {"x": np.array(x, np.float32)}) is not None
    assert near_tie(m, {"x": np.array([x[1], x[1]], np.float32)}) is None


def test_onnxruntimes_own_optimization_bug_is_no_kiln_finding() -> None:
    """Seed 254996 of ``--wide``, shrunk: onnxruntime 1.32 fuses a Transpose into a
    MatMul whose second operand is 1-D and gets it wrong; without its graph optimizations
    it agrees with numpy and Kiln (the reference executor here: no bundle is built)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(254996)
    w = rng.standard_normal(4).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["t", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    findings = check(model, {"x": x}, ())
    assert [f.kind for f in findings] == ["onnxruntime"], findings
    from tests.fuzz.oracle import run_ort

    want = np.transpose(x, (0, 2, 1)) @ w
    assert np.allclose(run_ort(model, {"x": x}, optimize=False)["y"], want, atol=1e-5)


def test_a_wrong_bundle_output_is_found_and_shrunk(monkeypatch) -> None:
    """The oracle can fail: a bundle that adds 1 to every output is reported as ``wrong``,
    and shrinking keeps a failing model no larger than the original."""
    from toolchain.bundle import host

    real = host.BundleModule.__call__

    def off_by_one(self, inputs):
        return {k: v + np.float32(1.0) for k, v in real(self, inputs).items()}

    monkeypatch.setattr(host.BundleModule, "__call__", off_by_one)
    model, inputs = random_model(3)
    findings = check(model, inputs, ("c-generic",))
    assert [f.kind for f in findings] == ["wrong"]
    small = shrink(model, inputs, findings[0], ("c-generic",))
    assert len(small.graph.node) <= len(model.graph.node)
    onnx.checker.check_model(small)
    feeds = {i.name: inputs[i.name] for i in small.graph.input}
    assert any(f.same_as(findings[0]) for f in check(small, feeds, ("c-generic",)))


def test_a_crash_is_classified_as_kilns_fault(monkeypatch) -> None:
    from toolchain.bundle import host

    def boom(self, inputs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(host.BundleModule, "__call__", boom)
    model, inputs = random_model(5)
    assert check(model, inputs, ("c-generic",)) == [
        Finding("crash", "c-generic", "ZeroDivisionError: a bug")]


def test_a_bundle_that_kills_the_process_is_a_crash_finding(monkeypatch, tmp_path) -> None:
    """``python -m tests.fuzz`` checks each graph in a forked child: a bundle that dies of a
    signal (a segmentation fault in generated code) is a ``crash`` finding naming the seed,
    saved with its model, and the campaign goes on to the next seed."""
    import faulthandler
    import os
    import signal

    from tests.fuzz import __main__ as fuzz_main
    from toolchain.bundle import host

    def segfault(self, inputs):
        faulthandler.disable()  # pytest's dump of the child's stack would read as a crash
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setattr(host.BundleModule, "__call__", segfault)
    argv = ["--count", "2", "--seed", "5", "--targets", "c-generic", "--out", str(tmp_path)]
    assert fuzz_main.main(argv) == 1
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert saved == [f"crash-seed{s}.{ext}" for s in (5, 6) for ext in ("npz", "onnx", "txt")]
    assert "killed by signal 11" in (tmp_path / "crash-seed5.txt").read_text()
    monkeypatch.undo()
    assert fuzz_main.main([*argv[:4], "--targets", "c-generic", "--out",
                           str(tmp_path / "clean")]) == 0

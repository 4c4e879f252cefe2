"""Node cases built in batches (:mod:`tests.node_batch`) keep each case's own outcome: a
wrong output fails exactly its case, a refused case leaves the batch without skipping or
failing the others, and a batch that breaks while its cases pass alone is a failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tests.node_batch as nb
import tests.test_node_conformance as conf
from tests.bundle.helpers import STRICT
from toolchain.bundle import compile_model
from toolchain.errors import UnsupportedError

#: real node cases of one batch (IR 7, opset 14), all passed by the reference
CASES = ("test_mul", "test_relu", "test_sub", "test_sub_bcast")


def _counting(monkeypatch: pytest.MonkeyPatch, corrupt: str | None = None) -> list[int]:
    """Count the batches built (their sizes); with ``corrupt``, that case's outputs come
    back from the batch off by one (a wrong kernel, as far as the check can tell)."""
    sizes: list[int] = []
    real = nb.run_merged

    def run(parts, out, flags):
        sizes.append(len(parts))
        got = real(parts, out, flags)
        for p, outputs in zip(parts, got, strict=True):
            if p.case == corrupt:
                for k in outputs:
                    outputs[k] = outputs[k] + 1
        return got

    monkeypatch.setattr(nb, "run_merged", run)
    return sizes


def test_merge_models_keeps_parts_disjoint() -> None:
    def part(op: str, dim: str) -> onnx.ModelProto:
        g = helper.make_graph(
            [helper.make_node(op, ["x", ""], ["y"], name="n") if op == "Clip"
             else helper.make_node(op, ["x"], ["y"])], op,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 2])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    merged = nb.merge_models([part("Clip", "N"), part("Relu", "N")])
    assert [list(n.input) for n in merged.graph.node] == [["p0_x", ""], ["p1_x"]]
    assert [n.name for n in merged.graph.node] == ["p0_n", "p1_Relu_0"]
    dims = [i.type.tensor_type.shape.dim[0].dim_param for i in merged.graph.input]
    assert dims == ["p0_N", "p1_N"]
    onnx.checker.check_model(merged)
    other = part("Relu", "N")
    other.opset_import[0].version = 13
    with pytest.raises(ValueError, match="part 1"):
        nb.merge_models([part("Relu", "N"), other])


def test_cases_share_one_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _counting(monkeypatch)
    out = conf.run_batch(CASES, tmp_path)
    assert out == {n: ("pass", "") for n in CASES}
    assert sizes == [len(CASES)]


def test_a_wrong_expected_value_fails_only_its_case(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = conf.case_parts

    def parts(name: str) -> list[nb.Part]:
        got = real(name)
        if name == "test_relu":  # the expected data are wrong: alone it fails as well
            got[0].expected["y"] = got[0].expected["y"] + np.float32(0.5)
        return got

    monkeypatch.setattr(conf, "case_parts", parts)
    sizes = _counting(monkeypatch)
    out = conf.run_batch(CASES, tmp_path)
    assert sizes == [len(CASES)]
    assert {n for n, (s, _) in out.items() if s != "pass"} == {"test_relu"}
    status, detail = out["test_relu"]
    assert status == "fail" and detail.startswith("alone: fail: AssertionError")
    assert "output y" in detail


def test_a_wrong_output_in_the_batch_only_is_a_failure(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A case the batch computes wrong but its own bundle right: a Kiln bug, not a pass."""
    sizes = _counting(monkeypatch, corrupt="test_sub")
    out = conf.run_batch(CASES, tmp_path)
    assert sizes == [len(CASES)]
    assert {n for n, (s, _) in out.items() if s != "pass"} == {"test_sub"}
    status, detail = out["test_sub"]
    assert status == "fail" and "passes in a bundle of its own but fails in a batch" in detail


def _refused_case() -> nb.Part:
    """A part the compile refuses (Unique: a data-dependent output shape), IR 7, opset 14
    like ``CASES``."""
    g = helper.make_graph([helper.make_node("Unique", ["x"], ["y"])], "unique",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 7
    x = np.array([1, 2, 2, 3], np.float32)
    return nb.Part("refused", m, {"x": x}, {"y": np.unique(x)})


def test_a_refused_case_leaves_its_batch(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _counting(monkeypatch)
    names = [*CASES[:2], "refused", *CASES[2:]]

    def parts(name: str) -> list[nb.Part]:
        return [_refused_case()] if name == "refused" else conf.case_parts(name)

    def alone(name: str) -> tuple[str, str]:
        if name != "refused":
            return conf.run_case_bundle(name, tmp_path / name)
        try:
            compile_model(_refused_case().model, "host", tmp_path / "alone", progress=False)
        except UnsupportedError as exc:
            return "skip", f"Kiln refuses it in a bundle: {str(exc).splitlines()[0]}"
        return "pass", ""

    out = nb.batch_results(names, parts, conf.check_part, alone, tmp_path, STRICT)
    assert sizes == [len(names), len(CASES)]  # rebuilt once, without the refused case
    assert out["refused"][0] == "skip" and "unsupported" in out["refused"][1]
    assert {n: out[n] for n in CASES} == {n: ("pass", "") for n in CASES}


def test_a_batch_that_breaks_while_its_cases_pass_alone_fails_them(tmp_path: Path) -> None:
    def run(parts, out, flags):
        raise RuntimeError("the batch's bundle crashed")

    parts = {n: [nb.Part(n, onnx.ModelProto(), {}, {})] for n in "ab"}
    out = nb.batch_results("ab", parts.__getitem__, lambda p, got: None,
                           lambda n: ("pass", ""), tmp_path, run=run)
    assert all(s == "fail" and "interacted" in d and "crashed" in d for s, d in out.values())
    # … but a case that fails alone explains the batch's failure: the others pass
    out = nb.batch_results("ab", parts.__getitem__, lambda p, got: None,
                           lambda n: ("fail", "alone") if n == "a" else ("pass", ""),
                           tmp_path, run=run)
    assert out == {"a": ("fail", "alone"), "b": ("pass", "")}


def _unary(op: str) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], op,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 7
    return m


def test_a_case_with_two_data_sets_is_two_parts_of_the_batch(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Each data set of a case is its own part (its own frozen operands); the case passes
    only if every one of its parts does."""
    sizes = _counting(monkeypatch)
    x1, x2 = np.array([-1, 0, 2], np.float32), np.array([3, -4, 5], np.float32)
    parts = {"relu": [nb.Part("relu", _unary("Relu"), {"x": x}, {"y": np.maximum(x, 0)})
                      for x in (x1, x2)],
             "neg": [nb.Part("neg", _unary("Neg"), {"x": x1}, {"y": -x1})]}

    def check(part: nb.Part, got) -> None:
        np.testing.assert_array_equal(got["y"], part.expected["y"])

    out = nb.batch_results(["relu", "neg"], parts.__getitem__, check,
                           lambda n: ("fail", "built alone"), tmp_path, STRICT)
    assert out == {"relu": ("pass", ""), "neg": ("pass", "")} and sizes == [3]
    parts["relu"][1].expected["y"] = x2  # the second data set's expectation is wrong
    out = nb.batch_results(["relu", "neg"], parts.__getitem__, check,
                           lambda n: ("fail", "built alone"), tmp_path / "again", STRICT)
    assert out["neg"] == ("pass", "") and out["relu"][0] == "fail"
    assert "built alone" in out["relu"][1] and "Mismatched" in out["relu"][1]

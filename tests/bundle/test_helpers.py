"""Bundle kernels.c defines exactly the helper functions its kernels call (min/max on bool
and float16 included), once each, and stays byte-identical across recompiles.

ONNX's Max/Min take no bool, so bool min/max comes from ReduceMax/ReduceMin (opset 20)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.bundle.helpers import STRICT, assert_matches

#: float16 is kiln_f16 (uint16_t) storage in a bundle: -pedantic builds it too
FLAGS = STRICT


def _model() -> onnx.ModelProto:
    """ReduceMax/ReduceMin on bool; Max/Min and ReduceMax on float16 (float32 cast to
    float16 and back around them: casts inside the bundle)."""
    f16, f32, b = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.BOOL
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("ReduceMax", ["p", "axes"], ["bmax"], keepdims=0),
             helper.make_node("ReduceMin", ["p", "axes"], ["bmin"], keepdims=0),
             helper.make_node("Cast", ["x"], ["xh"], to=f16),
             helper.make_node("Cast", ["y"], ["yh"], to=f16),
             helper.make_node("Max", ["xh", "yh"], ["maxh"]),
             helper.make_node("Min", ["xh", "yh"], ["minh"]),
             helper.make_node("ReduceMax", ["xh", "axes"], ["redh"], keepdims=0)]
    nodes += [helper.make_node("Cast", [f"{n}h"], [n], to=f32) for n in ("max", "min", "red")]
    shape = [3, 5]
    g = helper.make_graph(
        nodes, "helpers",
        [helper.make_tensor_value_info(n, t, shape) for n, t in
         (("p", b), ("x", f32), ("y", f32))],
        [helper.make_tensor_value_info("bmax", b, [3]),
         helper.make_tensor_value_info("bmin", b, [3]),
         helper.make_tensor_value_info("max", f32, shape),
         helper.make_tensor_value_info("min", f32, shape),
         helper.make_tensor_value_info("red", f32, [3])], [axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"p": rng.integers(0, 2, (3, 5)).astype(bool),
            "x": rng.standard_normal((3, 5)).astype(np.float32),
            "y": rng.standard_normal((3, 5)).astype(np.float32)}


def _files(bundle: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bundle)): p.read_bytes()
            for p in sorted(bundle.rglob("*")) if p.is_file() and "build" not in p.parts
            and p.suffix in {".c", ".h", ".json", ""}}


def test_bool_and_float16_min_max_build_and_match(tmp_path: Path) -> None:
    from toolchain.bundle import compile_model, load_bundle
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    model, inputs = _model(), _inputs()
    path = compile_model(model, "c-generic", tmp_path / "bundle")
    got = load_bundle(path, extra_flags=FLAGS)(inputs)
    assert_matches(got, run_graph(from_onnx(model), inputs))
    src = (path / "src" / "kernels.c").read_text()
    # float16 computes in float32 (kiln_f16 storage): the float helpers, each defined once
    assert "_Float16" not in src
    for name in ("kiln_max_float", "kiln_fast_maxf", "kiln_fast_minf"):
        assert src.count(f" {name}(float a, float b)") == 1, name
    # only the helpers some kernel calls (bool reductions use || and &&)
    assert "kiln_floordiv_" not in src and "kiln_min_float(" not in src
    assert "kiln_max_bool" not in src


def test_bool_helpers_render_once() -> None:
    """Kernels calling the same bool helper share one definition, right after the includes."""
    from toolchain.bundle.render import helper_definitions

    class _K:
        def __init__(self, *names: str) -> None:
            self.source = type("S", (), {"helpers": [
                {"kind": n.split("_")[1], "type": "bool", "name": n} for n in names]})()

    spec = type("Spec", (), {"kernels": [_K("kiln_max_bool"), _K("kiln_min_bool",
                                                                 "kiln_max_bool")]})()
    text = helper_definitions(spec)  # type: ignore[arg-type]
    assert text.splitlines() == [
        "static inline bool kiln_max_bool(bool a, bool b) { return a > b ? a : b; }",
        "static inline bool kiln_min_bool(bool a, bool b) { return a < b ? a : b; }"]


def test_recompile_is_byte_identical(tmp_path: Path) -> None:
    from toolchain.bundle import compile_model

    a = compile_model(_model(), "c-generic", tmp_path / "a")
    b = compile_model(_model(), "c-generic", tmp_path / "b")
    fa, fb = _files(a), _files(b)
    assert fa and fa == fb

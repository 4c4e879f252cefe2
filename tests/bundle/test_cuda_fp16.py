"""``--precision fp16`` on CUDA targets: the graph pass, the SIMT emulation of fp16 bundles
against the float32 reference, nvcc for sm_80 and sm_90, and on a GPU the bundle itself.

Tolerance: fp16 keeps 11 significant bits (unit roundoff 2**-11 = 4.9e-4). Inputs, weights
and every tensor a kernel stores are rounded to it once; sums run in float32. Over a few
layers that gives errors of a few 1e-4 to 2e-3 of the output's range (LeNet-5 3e-4,
ResNet-8 6e-4, the transformer encoder 1.7e-3 measured); 1e-2 of the range leaves room
for that and still fails on any real bug (a wrong index or a lost tile is an O(1) error).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import nvcc_kernel_check
from toolchain.bundle import compile_model, load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.errors import OptionError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes.precision import to_fp16
from toolchain.graph.reference import run_graph
from toolchain.zoo import ZOO

NVCC = shutil.which("nvcc")
#: max |error| / max |reference| allowed for fp16 bundles (see the module docstring)
FP16_TOL = 1e-2


def _rel_err(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k])))
               / max(1e-6, float(np.max(np.abs(want[k])))) for k in want)


def gemm_model(m: int, k: int, n: int, seed: int = 0) -> tuple[object, dict]:
    """``Relu(x @ W + b)``, float32, and its feeds."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal((n,)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
         helper.make_node("Relu", ["u"], ["y"])], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((m, k)).astype(np.float32)}


def test_to_fp16_keeps_float32_at_the_api_and_halves_the_rest() -> None:
    x, y = Value("x", (2, 3), "float32"), Value("y", (2, 3), "float32")
    i, c = Value("i", (2, 3), "int32"), Value("c", (2, 3), "float32")
    big = Value.constant("big", np.array([-1e9, 2.0, np.inf], np.float32))
    t = Value("t", (2, 3), "float32")
    g = Graph("g", [x], [y], [Node("Cast", "to_int", [x], [i], {"to": 6}),
                               Node("Cast", "back", [i], [c], {"to": 1}),
                               Node("Add", "add", [c, big], [t]),
                               Node("Mul", "mul", [t, x], [y])])
    h = to_fp16(g)
    assert [v.dtype for v in h.inputs] == ["float32"] and h.outputs[0] is y
    inner = [o for n in h.nodes for o in n.outputs if o is not y]
    assert {o.dtype for o in inner} == {"float16", "int32"}  # no float32 left inside
    assert h.node("back").attrs["to"] == 10  # a Cast to float32 casts to float16
    (const,) = [v for n in h.nodes for v in n.inputs if v is not None and v.is_constant]
    assert const.data.tolist() == [-65504.0, 2.0, np.inf]  # clamped, inf kept
    feeds = {"x": np.array([[1.5, -2.25, 3.0], [0.5, 7.0, -1.0]], np.float32)}
    want = run_graph(g, feeds)["y"]
    assert np.allclose(run_graph(h, feeds)["y"][:, 1], want[:, 1], rtol=1e-3)


def test_precision_is_checked(tmp_path: Path) -> None:
    model, _ = gemm_model(4, 4, 4)
    with pytest.raises(OptionError, match="precision 'bf16'"):
        compile_model(model, "cuda-sm80", tmp_path / "x", precision="bf16", progress=False)
    assert not (tmp_path / "x").exists()


def test_kiln_compile_precision_fp16(tmp_path: Path) -> None:
    """The command line: ``kiln compile --precision fp16 --emulate`` writes the bundle, and
    the value is checked by the parser."""
    import onnx

    from toolchain.cli import main

    model, feeds = gemm_model(32, 16, 16)
    onnx.save(model, tmp_path / "g.onnx")
    out = tmp_path / "b"
    assert main(["compile", str(tmp_path / "g.onnx"), "--target", "cuda-sm80", "--emulate",
                 "--precision", "fp16", "-o", str(out), "--no-progress"]) == 0
    assert json.loads((out / "metadata.json").read_text())["options"]["precision"] == "fp16"
    want = run_graph(from_onnx(model), feeds)["y"]
    got = load_bundle(out)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < FP16_TOL
    with pytest.raises(SystemExit):
        main(["compile", str(tmp_path / "g.onnx"), "--precision", "fp8", "-o", str(out)])


@pytest.mark.parametrize("name", ["lenet5", "transformer_encoder"])
def test_fp16_zoo_models_emulated_match_the_float32_reference(name: str, tmp_path: Path) -> None:
    """(The transformer takes 5-12 s here: the one model whose softmax, layer norm and GELU
    run on float16 storage; the zoo's other fp16 checks are the GPU tests.)"""
    spec = ZOO[name]
    model = spec.build()
    feeds = spec.inputs(model)
    want = run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)
    d = compile_model(model, "cuda-sm80", tmp_path / name, input_shapes=spec.input_shapes,
                      progress=False, emulate=True, precision="fp16")
    meta = json.loads((d / "metadata.json").read_text())
    assert meta["options"]["precision"] == "fp16"
    assert all(t["dtype"] != "float16" for t in meta["inputs"] + meta["outputs"])
    assert {w["dtype"] for w in meta["weights"]} <= {"float16", "int64", "int32"}
    got = load_bundle(d)(feeds)
    assert all(v.dtype == np.float32 for v in got.values())
    assert _rel_err(got, want) < FP16_TOL


@nvcc_kernel_check("fp16")
def _fp16_gemm(out: Path) -> dict[str, Path]:
    model, _ = gemm_model(64, 48, 32)
    return {"fp16_gemm": compile_model(model, "cuda-sm90", out / "fp16_gemm", progress=False,
                                       precision="fp16", name="fp16_gemm")}


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_fp16_bundle_compiles_for_sm80_and_sm90(kernels_nvcc: Any, tmp_path: Path) -> None:
    """Its kernels through nvcc with the GPU schedule tests' in one run (``kernels_nvcc``)."""
    d = kernels_nvcc.of("fp16")["fp16_gemm"]
    src = (d / "src/kernels.cu").read_text()
    assert "__half" in src and "float gemm" in src  # half tiles, float accumulators
    kernels_nvcc.check("fp16", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", ["lenet5", "transformer_encoder"])
def test_fp16_bundle_on_the_gpu_matches_the_reference(name: str, tmp_path: Path) -> None:
    spec = ZOO[name]
    model = spec.build()
    feeds = spec.inputs(model)
    want = run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)
    d = compile_model(model, "cuda-sm90", tmp_path / name, input_shapes=spec.input_shapes,
                      progress=False, precision="fp16")
    assert _rel_err(load_bundle(d)(feeds), want) < FP16_TOL

"""The host build of a bundle (``load_bundle``): the runtime every bundle carries, and a
bundle's kernels, are compiled once per content and flags and linked into each bundle's
library; an edited runtime or kernel is compiled again, never taken stale from the cache."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx.numpy_helper import to_array as onnx_numpy

from tests.bundle.helpers import make_model
from toolchain.bundle import compile_model, load_bundle
from toolchain.bundle.host import build_host


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _model(op: str):
    from onnx import helper

    return make_model([helper.make_node(op, ["x"], ["y"])],
                      {"x": (np.float32, [2, 3])}, {"y": (np.float32, [2, 3])}, name=op)


def test_bundles_share_the_runtime_objects(cache, tmp_path):
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    relu = load_bundle(compile_model(_model("Relu"), "c-generic", tmp_path / "relu",
                                     progress=False))
    neg = load_bundle(compile_model(_model("Neg"), "c-generic", tmp_path / "neg",
                                    progress=False))
    np.testing.assert_array_equal(relu({"x": x})["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(neg({"x": x})["y"], -x)
    assert len(list(cache.glob("runtime-kiln_runtime-*.o"))) == 1
    assert len(list(cache.glob("bundle-*.so"))) == 2


def test_an_edited_runtime_is_compiled_again(cache, tmp_path):
    path = compile_model(_model("Relu"), "c-generic", tmp_path / "relu", progress=False)
    before = build_host(path)
    src = path / "runtime" / "kiln_runtime.c"
    src.write_text(src.read_text() + "\nint kiln_test_marker(void) { return 7; }\n")
    after = build_host(path)
    assert after != before
    assert len(list(cache.glob("runtime-kiln_runtime-*.o"))) == 2
    assert ctypes.CDLL(str(after)).kiln_test_marker() == 7


def test_accelerator_bundles_share_the_driver_and_simulator_objects(cache, tmp_path):
    """A ``vta`` bundle's C driver and functional simulator (fixed runtime files) are
    compiled once per content and flags like the rest of the runtime: a second bundle's
    library links the same objects, and still runs bit-exact."""
    import onnx

    from tests.vta.qmodels import quantized, small_mlp
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph

    q = quantized(small_mlp())
    onnx.save(q, tmp_path / "mlp.onnx")
    path = compile_model(tmp_path / "mlp.onnx", "vta", tmp_path / "b", progress=False)
    first = build_host(path)
    kernels = path / "src" / "kernels.c"
    kernels.write_text(kernels.read_text() + "\n/* another bundle's kernels */\n")
    second = load_bundle(path)
    assert second.library != first
    for stem in ("kiln_vta", "kiln_vta_fsim", "kiln_runtime"):
        assert len(list(cache.glob(f"runtime-{stem}-*.o"))) == 1, stem
    x = {"x": np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)}
    want = run_graph(quantize_ops(from_onnx(q)), x)
    got = second(x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _dense(seed: int):
    from onnx import helper

    rng = np.random.default_rng(seed)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["t"]),
                       helper.make_node("Add", ["t", "b"], ["y"])],
                      {"x": (np.float32, [2, 3])}, {"y": (np.float32, [2, 4])},
                      inits={"w": rng.standard_normal((3, 4)).astype(np.float32),
                             "b": rng.standard_normal(4).astype(np.float32)}, name="dense")


def test_bundles_with_the_same_kernels_share_their_object(cache, tmp_path):
    """Two weights of one model, in two weights storages and folders: the same
    ``kernels.c``, compiled once (``object-kernels-*.o``); each library runs with its own
    weights."""
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    runs = [(0, "c-array", "a"), (1, "c-array", "b"), (1, "incbin", "c/d")]
    paths = [compile_model(_dense(seed), "c-generic", tmp_path / where, weights=mode,
                           progress=False) for seed, mode, where in runs]
    assert len({(p / "src" / "kernels.c").read_text() for p in paths}) == 1
    for (seed, _, _), path in zip(runs, paths, strict=True):
        m = _dense(seed)
        w, b = (onnx_numpy(t) for t in m.graph.initializer)
        np.testing.assert_allclose(load_bundle(path)({"x": x})["y"], x @ w + b, rtol=1e-6)
    assert len(list(cache.glob("object-kernels-*.o"))) == 1
    assert len(list(cache.glob("bundle-*.so"))) == 3


def test_edited_kernels_or_their_header_are_compiled_again(cache, tmp_path):
    """The kernels' object is keyed by ``kernels.c`` and the bundle headers it includes:
    an edit to either compiles it again, never a stale object from the cache."""
    path = compile_model(_dense(0), "c-generic", tmp_path / "b", progress=False)
    build_host(path)
    header = path / "src" / "kernels.h"
    header.write_text(header.read_text() + "\n#define KILN_TEST_SCALE 7\n")
    build_host(path)
    kernels = path / "src" / "kernels.c"
    kernels.write_text(kernels.read_text() + "\nint kiln_test_marker(void) { return "
                       "KILN_TEST_SCALE; }\n")
    lib = build_host(path)
    assert len(list(cache.glob("object-kernels-*.o"))) == 3
    assert ctypes.CDLL(str(lib)).kiln_test_marker() == 7

"""Large model files: structure parsed, large initializers memory-mapped from the file
(:mod:`toolchain.frontend.mapped`). The thresholds are lowered so that small test models
take the path BERT-base takes."""

from __future__ import annotations

import filecmp
import mmap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolchain.errors import ModelError
from toolchain.frontend import mapped
from toolchain.frontend.onnx import from_onnx, load_model

RNG = np.random.default_rng(7)


@pytest.fixture
def lazy(monkeypatch):
    """Every file is 'large' and every tensor of 64 bytes or more is mapped."""
    monkeypatch.setattr(mapped, "MAP_FILE_BYTES", 0)
    monkeypatch.setattr(mapped, "MAP_TENSOR_BYTES", 64)


def _backed_by_map(a: np.ndarray) -> bool:
    base = a
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return False


def _model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Initializers of every mappable dtype, large and small, beside a Constant node; each
    is used with a graph input, so none is folded away."""
    w = {
        "w": RNG.standard_normal((16, 8)).astype(np.float32),
        "b": RNG.standard_normal(8).astype(np.float32),  # 32 bytes: stays in the proto
        "w16": RNG.standard_normal((16, 8)).astype(np.float16),
        "idx": RNG.integers(0, 16, 40).astype(np.int64),
        "q": RNG.integers(-128, 127, (16, 8)).astype(np.int8),
        "mask": RNG.random((16, 8)) > 0.5,
    }
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"]),
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("Add", ["x16", "w16"], ["a16"]),
        helper.make_node("Cast", ["a16"], ["a32"], to=TensorProto.FLOAT),
        helper.make_node("Where", ["mask", "a", "a32"], ["m"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            RNG.standard_normal(8).astype(np.float32), "c")),
        helper.make_node("Add", ["m", "b"], ["m2"]),
        helper.make_node("Add", ["m2", "c"], ["y"]),
        helper.make_node("Gather", ["x", "idx"], ["z"], axis=0),
        helper.make_node("Gather", ["q", "rows"], ["r"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "mapped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8]),
                          helper.make_tensor_value_info("rows", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [40, 8]),
         helper.make_tensor_value_info("r", TensorProto.INT8, [3, 8])],
        [numpy_helper.from_array(a, k) for k, a in w.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def _saved(tmp_path, name="m.onnx"):
    model, w = _model()
    path = tmp_path / name
    onnx.save(model, str(path))
    return path, w


def test_the_skeleton_is_the_model_without_its_large_payloads(tmp_path):
    path, w = _saved(tmp_path)
    full = onnx.load(str(path))
    skeleton = mapped.parse_skeleton(path, min_tensor_bytes=64)
    external = {t.name for t in skeleton.graph.initializer
                if t.data_location == TensorProto.EXTERNAL}
    assert external == {"w", "w16", "idx", "q", "mask"}
    for t in skeleton.graph.initializer:
        info = {e.key: e.value for e in t.external_data}
        if t.name in external:
            assert info["location"] == "m.onnx" and not t.HasField("raw_data")
            raw = path.read_bytes()[int(info["offset"]):][:int(info["length"])]
            original = next(o for o in full.graph.initializer if o.name == t.name)
            assert raw == original.raw_data
    # everything else is protobuf's own parse, field for field
    for proto in (skeleton, full):
        del proto.graph.initializer[:]
    assert skeleton == full


def test_a_lazily_loaded_graph_equals_the_parsed_one_and_maps_its_weights(tmp_path, lazy):
    path, w = _saved(tmp_path)
    g = from_onnx(path)
    for name, want in w.items():
        got = g.value(name).data
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert _backed_by_map(got) == (want.nbytes >= 64), name
        assert not got.flags.writeable
    mapped.release_mapped_pages()  # drops the pages; they read back the same
    np.testing.assert_array_equal(g.value("w").data, w["w"])


def test_small_files_are_parsed_whole(tmp_path):
    path, _ = _saved(tmp_path)
    proto = load_model(path, lazy=True)[0]  # far below MAP_FILE_BYTES
    assert all(t.data_location == TensorProto.DEFAULT for t in proto.graph.initializer)


def test_the_model_through_a_symlink_maps_the_real_file(tmp_path, lazy):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path, w = _saved(tmp_path / "a")
    (tmp_path / "b" / "link.onnx").symlink_to(path)
    np.testing.assert_array_equal(from_onnx(tmp_path / "b" / "link.onnx").value("w").data,
                                  w["w"])


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_a_truncated_large_file_gets_the_truncation_message(tmp_path, lazy, cut):
    path, _ = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(ModelError, match=r"probably truncated or corrupted"):
        from_onnx(path)


def test_garbage_is_not_an_onnx_model(tmp_path, lazy):
    path = tmp_path / "junk.onnx"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(ModelError, match=r"not an ONNX model"):
        from_onnx(path)


def test_scan_fields_refuses_a_length_past_the_end():
    with pytest.raises(mapped.WireError, match="runs past"):
        list(mapped.scan_fields(bytes([0x12, 0x05, 0x61]), 0, 3))


def test_large_external_data_is_mapped_inside_the_folder_only(tmp_path, lazy):
    model, w = _model()
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    g = from_onnx(tmp_path / "m.onnx")
    assert _backed_by_map(g.value("w").data)
    np.testing.assert_array_equal(g.value("q").data, w["q"])
    assert not _backed_by_map(g.value("b").data)  # 32 bytes: read


def test_a_bundle_from_mapped_weights_is_byte_identical(tmp_path, monkeypatch):
    from toolchain.bundle import compile_model

    path, _ = _saved(tmp_path)
    compile_model(str(path), "x86_64-avx2", tmp_path / "parsed")
    monkeypatch.setattr(mapped, "MAP_FILE_BYTES", 0)
    monkeypatch.setattr(mapped, "MAP_TENSOR_BYTES", 64)
    compile_model(str(path), "x86_64-avx2", tmp_path / "mapped")
    cmp = filecmp.dircmp(tmp_path / "parsed", tmp_path / "mapped")
    files = [p.relative_to(tmp_path / "parsed") for p in (tmp_path / "parsed").rglob("*")
             if p.is_file()]
    assert files and not cmp.diff_files
    for f in files:
        assert (tmp_path / "parsed" / f).read_bytes() == (tmp_path / "mapped" / f).read_bytes()

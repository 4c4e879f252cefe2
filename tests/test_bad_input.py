"""One test per bad-input case of issue 2: each gets one clear message, exit status 2 and
no traceback (unless ``--debug``).

The CLI is called in-process (``toolchain.cli.main``) with stderr captured; one test runs
it as a real process to check the exit status end to end.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model, relu_model, save, tiny_cnn
from toolchain.cli import main

F = TensorProto.FLOAT


def kiln(capsys, *argv: str) -> tuple[int, str]:
    """Run the CLI; return (exit status, stderr), checking there is no traceback."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    if "--debug" not in argv:
        assert "Traceback" not in err, err
        if rc != 0:  # one message, starting on the first line
            assert err.startswith("kiln ") and len(
                [line for line in err.splitlines() if line.startswith("kiln ")]) == 1, err
    return rc, err


# -- model files ----------------------------------------------------------------------------

def test_not_a_file(tmp_path, capsys):
    rc, err = kiln(capsys, "inspect", tmp_path / "missing.onnx")
    assert rc == 2
    assert f"kiln inspect: error: {tmp_path / 'missing.onnx'}: no such file" in err


def test_a_directory_is_not_a_model(tmp_path, capsys):
    rc, err = kiln(capsys, "inspect", tmp_path)
    assert rc == 2 and "is a directory, not an ONNX model file" in err


def test_not_onnx(tmp_path, capsys):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n" * 20)
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert f"{path}: not an ONNX model" in err and "it is a text file" in err


def test_truncated_protobuf(tmp_path, capsys):
    data = tiny_cnn().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert (f"{path}: the file starts like an ONNX model but cannot be decoded; it is "
            "probably truncated or corrupted") in err


def test_graph_with_a_cycle(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["x", ], ["a"], name="first"),
             helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
             helper.make_node("Neg", ["b"], ["c"], name="loop_neg"),
             helper.make_node("Abs", ["b"], ["y"], name="last")]
    path = save(make_model(nodes, [("x", F, [2])], [("y", F, [2])]), tmp_path / "cycle.onnx")
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert re.search(r"the graph has a cycle through nodes 'loop_(add|neg)' -> "
                     r"'loop_(add|neg)' -> 'loop_(add|neg)'", err), err


def test_dangling_input(tmp_path, capsys):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    path = save(make_model(nodes, [("x", F, [2])], [("y", F, [2])]), tmp_path / "d.onnx")
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert ("node 'add' (Add) reads 'ghost', which is not a graph input, a constant, or the "
            "output of any node (a dangling input)") in err


def test_unsupported_ops_and_attributes_are_all_listed_at_once(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok"),
             helper.make_node("ImageDecoder", ["enc"], ["img"], name="dec1"),
             helper.make_node("RandomNormalLike", ["r"], ["v"], name="rnd1"),
             helper.make_node("Resize", ["x", "", "sc"], ["u"], mode="area", name="up1"),
             helper.make_node("Add", ["r", "v"], ["y"], name="add")]
    model = make_model(nodes, [("x", F, [2, 2]), ("enc", TensorProto.UINT8, [64])],
                       [("y", F, [2, 2]), ("u", F, [4, 4]),
                        ("img", TensorProto.UINT8, [4, 4, 3])],
                       {"k": np.array([2], np.int64), "sc": np.array([2.0, 2.0], np.float32)},
                       opset=20)
    path = save(model, tmp_path / "uns.onnx")
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert "3 unsupported feature(s)" in err
    assert "ImageDecoder: op not supported by Kiln — at node 'dec1' (opset 20)" in err
    assert ("RandomNormalLike: RandomNormalLike draws random numbers, but a Kiln bundle is "
            "deterministic") in err and "at node 'rnd1' (opset 20)" in err
    assert "Resize: attribute 'mode' = 'area'" in err and "at node 'up1' (opset 20)" in err
    assert "Kiln supports these ops:" in err


def test_opset_newer_than_supported(tmp_path, capsys):
    newest = onnx.defs.onnx_opset_version()
    path = save(relu_model(opset=newest + 1), tmp_path / "new.onnx")
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert (f"the model uses ONNX opset {newest + 1}, newer than the newest this installation "
            f"supports ({newest}") in err
    assert f"Kiln supports opsets 11 to {newest}" in err


def test_dynamic_shape_suggests_input_shape_and_the_override_works(tmp_path, capsys):
    path = save(tiny_cnn(batch="batch"), tmp_path / "dyn.onnx")
    rc, err = kiln(capsys, "inspect", path)
    assert rc == 2
    assert "input 'x' has shape [batch, 3, 8, 8]" in err
    match = re.search(r"--input-shape (x=[0-9,]+)", err)
    assert match and match.group(1) == "x=1,3,8,8"
    rc, _ = kiln(capsys, "inspect", path, "--input-shape", match.group(1))
    assert rc == 0


def test_external_data_outside_the_model_folder(tmp_path, capsys):
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", F, [1, 4])], [("y", F, [1, 2])],
                       {"w": np.ones((4, 2), np.float32)})
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"))  # writes folder/w.bin
    (folder / "w.bin").rename(tmp_path / "w.bin")
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../w.bin"
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=False)
    rc, err = kiln(capsys, "inspect", folder / "m.onnx")
    assert rc == 2
    assert (f"tensor 'w' keeps its data in external file '../w.bin', which resolves to "
            f"{tmp_path / 'w.bin'}, outside the model's folder {folder}") in err


# -- input npz files ------------------------------------------------------------------------

@pytest.fixture
def relu(tmp_path):
    return save(relu_model(shape=(2, 3)), tmp_path / "relu.onnx")


def test_npz_with_a_wrong_key(relu, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 3), np.float32))
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert (f"--inputs {tmp_path / 'in.npz'}: unknown input 'input'; the model's inputs are: "
            "x (float32[2, 3])") in err


def test_npz_missing_an_input(relu, tmp_path, capsys):
    np.savez(tmp_path / "in.npz")
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert "missing input 'x'; the model's inputs are: x (float32[2, 3])" in err


def test_npz_with_a_wrong_dtype(relu, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 3), np.float64))
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert ("input 'x' has dtype float64, but the model expects float32[2, 3]; convert it "
            "(e.g. array.astype(np.float32))") in err


def test_npz_with_a_wrong_shape(relu, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 2), np.float32))
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert "input 'x' has shape [3, 2], but the model expects float32[2, 3]" in err


def test_npz_that_is_not_an_npz(relu, tmp_path, capsys):
    (tmp_path / "in.npz").write_text("x = 1, 2, 3")
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert f"--inputs {tmp_path / 'in.npz'}: not a numpy .npz file" in err


def test_npz_that_is_text_is_not_called_pickled_data(relu, tmp_path, capsys):
    # numpy falls back to "pickled data ... load it unsafely with allow_pickle" for any
    # file that is neither zip nor .npy: the message must not advise that
    (tmp_path / "in.npz").write_text("hello")
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz")
    assert rc == 2
    assert (f"--inputs {tmp_path / 'in.npz'}: not a numpy .npz file (no zip archive header)"
            in err)
    assert "pickle" not in err


def test_npy_instead_of_npz(relu, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "x.npy")
    assert rc == 2
    assert "this is a single .npy array, not an .npz archive" in err


# -- --debug and the real process -----------------------------------------------------------

@pytest.mark.parametrize("where", ["global", "subcommand"])
def test_debug_shows_the_traceback(tmp_path, capsys, where):
    path = tmp_path / "notes.onnx"
    path.write_text("not a model")
    argv = ["--debug", "inspect", path] if where == "global" else ["inspect", path, "--debug"]
    rc, err = kiln(capsys, *argv)
    assert rc == 2
    assert "Traceback (most recent call last)" in err and "ModelError" in err
    assert "not an ONNX model" in err


def test_exit_status_2_from_a_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "toolchain", "inspect",
                           str(tmp_path / "missing.onnx")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_outputs_naming_a_directory_is_refused_before_the_run(relu, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 3), np.float32))
    (tmp_path / "out").mkdir()
    rc, err = kiln(capsys, "run", relu, "--inputs", tmp_path / "in.npz", "--outputs",
                   tmp_path / "out")
    assert rc == 2, err
    assert f"--outputs {tmp_path / 'out'}: is a directory; name the .npz file to write" in err
    assert list((tmp_path / "out").iterdir()) == [] and "internal error" not in err

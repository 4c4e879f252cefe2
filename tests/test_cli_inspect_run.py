"""``kiln inspect`` and ``kiln run`` on small models (happy paths and option errors)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.frontend.helpers import run_onnxruntime, save, tiny_cnn
from toolchain.cli import main


@pytest.fixture
def cnn(tmp_path):
    """A saved tiny CNN with a dynamic batch, and an input npz for batch 2."""
    path = save(tiny_cnn(), tmp_path / "cnn.onnx")
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    return path, tmp_path / "in.npz", x


def test_inspect_prints_a_table_with_totals(cnn, capsys):
    path, _, _ = cnn
    assert main(["inspect", str(path), "--input-shape", "x=2,3,8,8"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("name"))
    for column in ("op", "output shape", "dtype", "FLOPs", "param bytes", "pattern"):
        assert column in header
    conv = next(line for line in lines if line.startswith("conv "))
    # 2*8*8*8 outputs x (3*3*3 MACs = 54 FLOPs) + bias = 55,296
    assert "Conv" in conv and "[2, 8, 8, 8]" in conv and "55,296" in conv
    assert "896" in conv and "complex-out-fusable" in conv  # (8*27 + 8) float32 weights
    assert "Shape" not in out.split("totals")[0].split("-----")[-1]  # folded away
    assert "totals:  6 nodes" in out


def test_inspect_json_has_a_stable_schema(cnn, capsys):
    path, _, _ = cnn
    assert main(["inspect", str(path), "--json", "--input-shape", "x=1,3,8,8"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["schema", "model", "graph", "opset", "inputs", "outputs", "nodes",
                            "totals"]
    assert report["schema"] == "kiln.inspect/1"
    assert report["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert [n["op"] for n in report["nodes"]] == ["Conv", "Relu", "MaxPool", "Reshape",
                                                  "MatMul", "Softmax"]
    node = report["nodes"][0]
    assert list(node) == ["name", "op", "outputs", "flops", "param_bytes", "pattern"]
    totals = report["totals"]
    assert totals["nodes"] == 6
    assert totals["flops"] == sum(n["flops"] for n in report["nodes"])
    # conv.w 216 + conv.b 8 + fc.w 1280 floats, and the folded int64[2] reshape shape
    assert totals["parameters"] == 216 + 8 + 1280 + 2
    assert totals["param_bytes"] == (216 + 8 + 1280) * 4 + 2 * 8


def test_run_writes_outputs_that_match_onnxruntime(cnn, tmp_path, capsys):
    path, npz, x = cnn
    out_path = tmp_path / "out.npz"
    rc = main(["run", str(path), "--inputs", str(npz), "--outputs", str(out_path),
               "--input-shape", "x=2,3,8,8"])
    assert rc == 0
    assert "wrote 1 output(s)" in capsys.readouterr().out
    with np.load(out_path) as got:
        assert got.files == ["prob"]
        want = run_onnxruntime(tiny_cnn(batch=2), {"x": x})["prob"]
        np.testing.assert_allclose(got["prob"], want, rtol=1e-5, atol=1e-7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx", "in.npz", "out.npz"]


def test_run_without_outputs_prints_a_summary(cnn, capsys):
    path, npz, _ = cnn
    assert main(["run", str(path), "--inputs", str(npz), "--input-shape", "x=2,3,8,8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prob: float32[2, 10]  min ")
    assert " max " in out and " mean 0.1 " in out and "first [" in out


def test_run_replaces_an_existing_output_file(cnn, tmp_path):
    path, npz, _ = cnn
    out_path = tmp_path / "out.npz"
    out_path.write_text("old")
    assert main(["run", str(path), "--inputs", str(npz), "--outputs", str(out_path),
                 "--input-shape", "x=2,3,8,8"]) == 0
    with np.load(out_path) as got:
        assert got["prob"].shape == (2, 10)


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_help_shows_examples(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"kiln {command} model.onnx" in out
    assert "--input-shape NAME=D0,D1,..." in out


@pytest.mark.parametrize(("flag", "message"), [
    ("x", "expected NAME=D0,D1,..."),
    ("x=1,a", "dimensions must be integers"),
    ("x=1,0,8,8", "dimensions must be positive integers"),
])
def test_bad_input_shape_option(cnn, capsys, flag, message):
    path, _, _ = cnn
    assert main(["inspect", str(path), "--input-shape", flag]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_input_shape_accepts_1x3x8x8(cnn, capsys):
    path, _, _ = cnn
    assert main(["inspect", str(path), "--json", "--input-shape", "x=1x3x8x8"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["shape"] == [1, 3, 8, 8]


def test_console_entry_point_runs(cnn):
    path, npz, _ = cnn
    proc = subprocess.run([sys.executable, "-m", "toolchain", "run", str(path), "--inputs",
                           str(npz), "--input-shape", "x=2,3,8,8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("prob: float32[2, 10]")


def test_run_takes_dynamic_dims_from_the_npz(cnn, tmp_path, capsys):
    path, npz, x = cnn
    out_path = tmp_path / "out.npz"
    assert main(["run", str(path), "--inputs", str(npz), "--outputs", str(out_path)]) == 0
    with np.load(out_path) as got:
        want = run_onnxruntime(tiny_cnn(batch=2), {"x": x})["prob"]
        np.testing.assert_allclose(got["prob"], want, rtol=1e-5, atol=1e-7)


def test_run_checks_fixed_dims_of_a_dynamic_input(cnn, tmp_path, capsys):
    path, _, _ = cnn
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 4, 8, 8), np.float32))
    assert main(["run", str(path), "--inputs", str(tmp_path / "bad.npz")]) == 2
    err = capsys.readouterr().err
    assert "input 'x' has shape [2, 4, 8, 8], but the model expects [N, 3, 8, 8]" in err


def test_inspect_and_compile_say_what_their_memory_numbers_count(tmp_path, capsys):
    """The first-hour issue: inspect's plan (23,552 B for LeNet-5) and compile's arena
    (48,000 B on x86_64-avx2) disagreed without a word on why."""
    assert main(["inspect", "examples/lenet5.onnx", "--memory-plan",
                 str(tmp_path / "plan.svg")]) == 0
    assert "before a target is chosen" in capsys.readouterr().err
    assert main(["compile", "examples/lenet5.onnx", "--target", "x86_64-avx2", "-o",
                 str(tmp_path / "b"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "the arena holds the activations in the target's layout" in out
    assert "kernels' scratch (the largest" in out

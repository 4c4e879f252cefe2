"""The example files: current, small, and ``kiln inspect`` / ``kiln run`` work on them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx

from toolchain.zoo.harness import compare_outputs, run_ort

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = EXAMPLES / "lenet5.onnx"
INPUT = EXAMPLES / "lenet5_input.npz"


def _make_examples():
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_examples_are_current():
    for name, data in _make_examples().example_files().items():
        path = EXAMPLES / name
        assert path.read_bytes() == data, f"{path} is stale: run python examples/make_examples.py"


def test_example_is_small_and_its_input_matches_the_model():
    assert MODEL.stat().st_size < 300 * 1024
    model = onnx.load(MODEL)
    onnx.checker.check_model(model, full_check=True)
    (inp,) = model.graph.input
    with np.load(INPUT) as data:
        assert list(data) == [inp.name]
        assert data[inp.name].shape == tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
        assert data[inp.name].dtype == np.float32


def test_kiln_inspect_example(capsys):
    from toolchain.cli import main

    assert main(["inspect", str(MODEL)]) == 0
    out = capsys.readouterr().out
    for op in ("Conv", "MaxPool", "Gemm", "Softmax"):
        assert op in out


def test_kiln_run_example_matches_onnxruntime(tmp_path):
    from toolchain.cli import main

    out_path = tmp_path / "lenet5_out.npz"
    assert main(["run", str(MODEL), "--inputs", str(INPUT), "--outputs", str(out_path)]) == 0
    with np.load(INPUT) as data:
        want = run_ort(onnx.load(MODEL), dict(data))
    with np.load(out_path) as got:
        assert sorted(got) == ["logits", "probs"]
        errors = compare_outputs(dict(got), want)
    assert all(e.ok for e in errors), errors


def test_readme_commands_in_a_fresh_process(tmp_path):
    """The LeNet-5 example commands (docs and examples/README), as a user runs them."""
    import subprocess
    import sys

    kiln = [sys.executable, "-m", "toolchain"]
    inspect = subprocess.run([*kiln, "inspect", str(MODEL)], capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    assert "totals:" in inspect.stdout
    out_path = tmp_path / "lenet5_out.npz"
    run = subprocess.run([*kiln, "run", str(MODEL), "--inputs", str(INPUT),
                          "--outputs", str(out_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    with np.load(out_path) as got:
        assert got["probs"].shape == (1, 10)
        assert abs(float(got["probs"].sum()) - 1.0) < 1e-5


def test_the_shipped_accelerator_program_runs_in_kiln_sim(capsys) -> None:
    """The tour's ``kiln sim`` line has a program to run (the first-hour issue)."""
    from toolchain.cli import main

    assert main(["sim", "examples/vta_gemm.bin", "--check"]) == 0
    assert "check: ok" in capsys.readouterr().out
    assert main(["sim", "examples/vta_gemm.bin", "--fsim"]) == 0
    assert "macs              65536" in capsys.readouterr().out

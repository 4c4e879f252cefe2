"""``kiln quantize``: the command end to end, and its errors (message and exit status)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from toolchain import cli


def test_quantize_is_a_registered_command() -> None:
    assert cli.COMMANDS["quantize"] == "quantize_cmd"


@pytest.fixture(scope="module")
def kws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from toolchain.zoo import ZOO

    d = tmp_path_factory.mktemp("kws")
    onnx.save(ZOO["ds_cnn"].build(), d / "kws.onnx")
    rng = np.random.default_rng(7)
    np.savez(d / "cal.npz", input_1=rng.standard_normal((6, 49, 10, 1)).astype(np.float32))
    return d / "kws.onnx", d / "cal.npz"


def test_quantize_writes_a_runnable_qdq_model(kws: tuple[Path, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    model, cal = kws
    out = tmp_path / "kws_int8.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nodes quantized" in text and "left in float" in text and "Softmax" in text
    q = onnx.load(out)
    onnx.checker.check_model(q, full_check=True)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") >= 10 and "Conv" in ops
    x = np.random.default_rng(1).standard_normal((1, 49, 10, 1)).astype(np.float32)
    fl = ort.InferenceSession(str(model)).run(None, {"input_1": x})[0]
    qt = ort.InferenceSession(str(out)).run(None, {"input_1": x})[0]
    assert np.abs(fl - qt).max() < 0.1 * np.abs(fl).max() + 0.05


@pytest.mark.parametrize("flags", [["--per-tensor", "--symmetric-activations"],
                                   ["--uint8", "--percentile", "99.9"]])
def test_quantize_options(kws: tuple[Path, Path], tmp_path: Path, flags: list[str]) -> None:
    model, cal = kws
    out = tmp_path / "q.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(out),
                     *flags]) == 0
    q = onnx.load(out)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in q.graph.initializer}
    zps = [v for k, v in inits.items() if k.endswith("_zero_point") and "weight" not in k]
    if "--uint8" in flags:
        assert all(z.dtype == np.uint8 for z in zps if z.ndim == 0)
    else:
        assert all(int(z) == 0 for z in zps if z.ndim == 0)  # symmetric activations
        weight_dq = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and
                     n.input[0] in inits and inits[n.input[0]].dtype == np.int8]
        assert len(weight_dq) >= 9  # the convolutions and the dense layer
        assert all(inits[n.input[1]].size == 1 for n in weight_dq)  # per tensor
    ort.InferenceSession(str(out))


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_errors(kws: tuple[Path, Path], tmp_path: Path,
                capsys: pytest.CaptureFixture[str]) -> None:
    model, cal = kws
    out = str(tmp_path / "o.onnx")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert "not a readable .npz" in _err(capsys, ["quantize", str(model), "--calibration",
                                                  str(bad), "-o", out])
    assert "not found" in _err(capsys, ["quantize", str(model), "--calibration",
                                        str(tmp_path / "none.npz"), "-o", out])
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.zeros((2, 49, 10, 1), np.float32))
    msg = _err(capsys, ["quantize", str(model), "--calibration", str(wrong), "-o", out])
    assert "no array for model input 'input_1' (arrays: x)" in msg
    assert "--map input_1=ARRAY" in msg
    shape = tmp_path / "shape.npz"
    np.savez(shape, input_1=np.zeros((2, 10, 49), np.float32))
    msg = _err(capsys, ["quantize", str(model), "--calibration", str(shape), "-o", out])
    assert "has shape [2, 10, 49]" in msg and "[S, 1, 49, 10, 1]" in msg
    msg = _err(capsys, ["quantize", str(model), "--calibration", str(cal), "-o", out,
                        "--percentile", "30"])
    assert "--percentile 30" in msg
    assert "must be an .onnx" in _err(capsys, ["quantize", str(model), "--calibration",
                                               str(cal), "-o", str(tmp_path / "o.txt")])
    # an output under a file, or a folder named like the model: user errors, not Kiln bugs
    (tmp_path / "afile").write_text("x")
    msg = _err(capsys, ["quantize", str(model), "--calibration", str(cal), "-o",
                        str(tmp_path / "afile" / "q.onnx")])
    assert f"{tmp_path / 'afile'} is a file, not a directory" in msg
    (tmp_path / "d.onnx").mkdir()
    msg = _err(capsys, ["quantize", str(model), "--calibration", str(cal), "-o",
                        str(tmp_path / "d.onnx")])
    assert f"-o {tmp_path / 'd.onnx'}: is a directory" in msg
    assert not Path(out).exists()


def test_integer_io_flag_gives_int8_inputs_and_outputs(kws: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    model, cal = kws
    out = tmp_path / "kws_io.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(out),
                     "--integer-io"]) == 0
    q = onnx.load(out)
    elem = {v.name: v.type.tensor_type.elem_type for v in [*q.graph.input, *q.graph.output]}
    # the input and the logits are int8; Softmax has no int8 form and stays float
    assert elem == {"input_1": onnx.TensorProto.INT8, "dense/BiasAdd:0": onnx.TensorProto.INT8,
                    "dense/Softmax:0": onnx.TensorProto.FLOAT}, elem
    props = {p.key: p.value for p in q.metadata_props}
    assert {"kiln.io.input_1", "kiln.io.dense/BiasAdd:0"} <= set(props), props


def test_check_of_an_int8_bundle_compares_with_the_integer_reference(
        kws: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kiln run --check` on a QDQ model's bundle: the reference runs the integer kernels'
    semantics, so the bundle matches it exactly (not only within a quantization step)."""
    model, cal = kws
    q = tmp_path / "kws_int8.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(q)]) == 0
    x = np.random.default_rng(3).standard_normal((1, 49, 10, 1)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input_1=x)
    out = tmp_path / "bundle"
    assert cli.main(["compile", str(q), "--target", "c-generic", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--check"]) == 0
    text = capsys.readouterr().out
    assert "check passed" in text
    errors = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.split()[-1:] == ["ok"]}
    # the logits come out of integer kernels: exact; Softmax is float math after them
    assert errors["dense/BiasAdd:0"] == 0.0 and errors["dense/Softmax:0"] < 1e-6, text


def test_calibration_arrays_by_mapping_and_extra_arrays_ignored(tmp_path: Path, capsys) -> None:
    """The shipped digits test set has arrays images and labels; the model's input is
    image (the first-hour issue): --map picks the array, labels are left out."""
    digits = Path("examples/digits")
    out = tmp_path / "d8.onnx"
    assert cli.main(["quantize", str(digits / "digits.onnx"), "--calibration",
                     str(digits / "test_set.npz"), "--map", "image=images", "-o",
                     str(out)]) == 0
    assert "nodes quantized" in capsys.readouterr().out
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(out).graph.node)
    assert cli.main(["quantize", str(digits / "digits.onnx"), "--calibration",
                     str(digits / "test_set.npz"), "-o", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "no array for model input 'image' (arrays: images, labels)" in err
    assert "--map image=ARRAY" in err
    for bad, msg in [("image", "give INPUT=ARRAY"), ("img=images", "has no input 'img'"),
                     ("image=pixels", "has no array 'pixels'"),
                     ("image=labels --map image=images", "--map 'image=images': input "
                      "'image' is mapped twice")]:
        assert cli.main(["quantize", str(digits / "digits.onnx"), "--calibration",
                         str(digits / "test_set.npz"),
                         *[a for m in bad.split(" --map ") for a in ("--map", m)], "-o",
                         str(tmp_path / "y.onnx")]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()


def test_int8_weights_are_stored_as_int8(tmp_path: Path, capsys) -> None:
    """The first-hour issue: the int8 digits bundle's weights were larger than the fp32
    ones (int8 weights packed as int32 on c-generic). Now they are int8 in the bundle,
    widened in the kernel; the summary splits the weight bytes by dtype."""
    digits = Path("examples/digits")
    q = tmp_path / "d8.onnx"
    assert cli.main(["quantize", str(digits / "digits.onnx"), "--calibration",
                     str(digits / "test_set.npz"), "--map", "image=images", "-o", str(q)]) == 0
    sizes = {}
    for tag, model in (("fp32", digits / "digits.onnx"), ("int8", q)):
        assert cli.main(["compile", str(model), "--target", "c-generic", "-o",
                         str(tmp_path / tag), "--no-progress"]) == 0
        meta = json.loads((tmp_path / tag / "metadata.json").read_text())
        sizes[tag] = meta["weight_bytes"]
        by: dict[str, int] = {}
        for w in meta["weights"]:
            by[w["dtype"]] = by.get(w["dtype"], 0) + w["bytes"]
        if tag == "int8":
            summary = capsys.readouterr().out
            assert f"int8 {by['int8']:,}" in summary and f"int32 {by['int32']:,}" in summary
            assert by["int8"] > 2 * by["int32"], by  # weights int8, biases and tables int32
    assert sizes["int8"] < 0.4 * sizes["fp32"], sizes


def test_an_already_quantized_model_is_refused(kws: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    model, cal = kws
    once = tmp_path / "once.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(once)]) == 0
    msg = _err(capsys, ["quantize", str(once), "--calibration", str(cal), "-o",
                        str(tmp_path / "twice.onnx")])
    assert "is already quantized" in msg and "kiln compile" in msg, msg
    assert "onnx.checker" not in msg and not (tmp_path / "twice.onnx").exists()


@pytest.mark.parametrize("failure", ["checker", "shape inference"])
def test_a_quantized_model_that_fails_onnx_checks_is_a_kiln_bug(
        kws: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], failure: str) -> None:
    # the float model passed the frontend's checks: a bad model written by Kiln is Kiln's
    # bug (exit 1, bug report), not the user's (it exited 2 as if the input were wrong)
    from toolchain.quantize import ptq

    def broken(graph):
        model = to_onnx(graph)
        if failure == "checker":  # a node reading a value nothing defines
            model.graph.node.append(onnx.helper.make_node("Relu", ["nowhere"], ["r"]))
        else:  # an output declared with a shape its producer cannot give
            dims = model.graph.output[0].type.tensor_type.shape.dim
            dims[-1].dim_value += 1
        return model

    to_onnx = ptq.to_onnx
    monkeypatch.setattr(ptq, "to_onnx", broken)
    model, cal = kws
    out = tmp_path / "q.onnx"
    assert cli.main(["quantize", str(model), "--calibration", str(cal), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    what = "onnx.checker" if failure == "checker" else "ONNX shape inference"
    assert f"the quantized model Kiln wrote fails {what}" in err
    assert "This is a Kiln bug" in err and not out.exists()


def test_quantize_model_checks_its_arguments_as_the_command_does(kws: tuple[Path, Path]
                                                                 ) -> None:
    # from Python these were taken as given: "int16" got uint8's range with an int16 zero
    # point, a percentile under 50 an inverted range
    from toolchain.errors import OptionError
    from toolchain.quantize.ptq import quantize_model

    model, cal = kws
    arrays = dict(np.load(cal))
    with pytest.raises(OptionError, match="activation_dtype 'int16' is not 'int8' or 'uint8'"):
        quantize_model(str(model), arrays, activation_dtype="int16")
    with pytest.raises(OptionError, match=r"percentile 30 is not in \(50, 100\]"):
        quantize_model(str(model), arrays, percentile=30)

"""``kiln quantize``: post-training static int8 quantization of an ONNX model, by Kiln.

Runs the float model in Kiln's reference executor over calibration samples, picks scales
and zero points, and writes a QDQ ONNX model (QuantizeLinear/DequantizeLinear around each
quantized op) that onnxruntime runs and that ``kiln compile`` turns into integer-only
kernels. See ``docs/int8.md``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import onnx

from toolchain.commands._model_args import add_model_arguments, input_shapes
from toolchain.errors import OptionError

HELP = "quantize an ONNX model to int8 (QDQ) with calibration data"

EPILOG = """\
examples:
  kiln quantize kws.onnx --calibration samples.npz -o kws_int8.onnx
  kiln quantize vww.onnx --calibration vww.npz -o vww_int8.onnx --per-tensor --uint8
  kiln quantize ad.onnx --calibration ad.npz -o ad_int8.onnx --percentile 99.99
  kiln quantize ad.onnx --calibration ad.npz -o ad_int8.onnx --integer-io  # int8 I/O
  kiln quantize digits.onnx --calibration test_set.npz --map image=images -o digits_int8.onnx

the .npz holds one array per model input, named like the input, whose first dimension
counts the samples (for an input [1, 49, 10, 1]: [S, 49, 10, 1] or [S, 1, 49, 10, 1]).
Ops that cannot be quantized (Softmax, ReduceMean, ...) stay float and are listed.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_model_arguments(parser)
    parser.add_argument("--calibration", required=True, metavar="DATA.npz",
                        help="calibration samples, one array per model input (other arrays, "
                             "such as labels, are ignored)")
    parser.add_argument("--map", action="append", default=[], metavar="INPUT=ARRAY",
                        help="take model input INPUT from the calibration array ARRAY "
                             "(repeatable), e.g. --map image=images")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL_int8.onnx",
                        help="where to write the quantized (QDQ) model")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--per-channel", dest="per_channel", action="store_true",
                       default=True, help="one weight scale per output channel (default)")
    group.add_argument("--per-tensor", dest="per_channel", action="store_false",
                       help="one weight scale per weight tensor")
    parser.add_argument("--symmetric-activations", action="store_true",
                        help="activations with zero point 0 (128 for --uint8)")
    parser.add_argument("--uint8", action="store_true",
                        help="uint8 activations (default int8); weights are always int8")
    parser.add_argument("--integer-io", action="store_true",
                        help="int8 model inputs and outputs (quantized by the caller; their "
                             "scales and zero points go into the model's metadata_props as "
                             "kiln.io.NAME) instead of float ones converted inside the model")
    parser.add_argument("--power-of-two-scales", action="store_true",
                        help="round every activation and weight scale up to a power of two, "
                             "so every requantization is a rounding shift (for an "
                             "accelerator whose ALU has no high multiply; costs accuracy: "
                             "docs/int8.md)")
    parser.add_argument("--percentile", type=float, default=None, metavar="P",
                        help="calibrate to the P-th percentile of each tensor (e.g. 99.99) "
                             "instead of its min/max")


def run(args: argparse.Namespace) -> int:
    from toolchain.quantize.calibrate import load_npz
    from toolchain.quantize.ptq import quantize_model, summary

    if args.percentile is not None and not 50.0 < args.percentile <= 100.0:
        raise OptionError(f"--percentile {args.percentile}: give a value in (50, 100], "
                          "e.g. 99.99")
    out = Path(args.output)
    if out.suffix != ".onnx":
        raise OptionError(f"-o {out}: the output must be an .onnx file")
    _check_output(out)  # before the calibration runs
    arrays = calibration_arrays(args.model, load_npz(args.calibration), args.map)
    model, result = quantize_model(
        args.model, arrays, per_channel=args.per_channel,
        symmetric_activations=args.symmetric_activations,
        activation_dtype="uint8" if args.uint8 else "int8", percentile=args.percentile,
        input_shapes=input_shapes(args), integer_io=args.integer_io,
        power_of_two_scales=args.power_of_two_scales)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(f"-o {out}: cannot create folder {out.parent} "
                          f"({exc.strerror or exc})") from None
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    s = summary(result)
    print(f"wrote {out}: {s['quantized_nodes']} nodes quantized "
          f"({s['quantize_nodes']} QuantizeLinear, {s['dequantize_nodes']} DequantizeLinear)")
    if s["float_ops"]:
        print(f"left in float (no int8 form): {', '.join(s['float_ops'])}")
    return 0


def _check_output(out: Path) -> None:
    """Refuse an ``-o`` that cannot hold the file (a user error, not a Kiln bug)."""
    if out.is_dir():
        raise OptionError(f"-o {out}: is a directory; name the .onnx file to write")
    for p in (out.parent, *out.parent.parents):
        if p.exists():
            if not p.is_dir():
                raise OptionError(f"-o {out}: {p} is a file, not a directory")
            break


def calibration_arrays(model: str, arrays: dict, mapping: list[str]) -> dict:
    """The calibration arrays by model input: ``--map INPUT=ARRAY`` renames, arrays named
    after no input (labels …) are left out, and a missing input is an error naming the
    arrays there are."""
    from toolchain.frontend.onnx import load_model

    proto = load_model(model, lazy=True)[0]
    inits = {t.name for t in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in inits]
    out = {}
    for item in mapping:
        name, sep, key = item.partition("=")
        if not sep or not name or not key:
            raise OptionError(f"--map {item!r}: give INPUT=ARRAY, e.g. --map image=images")
        if name not in inputs:
            raise OptionError(f"--map {item!r}: the model has no input {name!r} (inputs: "
                              f"{', '.join(inputs)})")
        if key not in arrays:
            raise OptionError(f"--map {item!r}: the calibration file has no array {key!r} "
                              f"(arrays: {', '.join(sorted(arrays))})")
        if name in out:  # the later one used to win silently
            raise OptionError(f"--map {item!r}: input {name!r} is mapped twice; give one "
                              "--map per input")
        out[name] = arrays[key]
    for name in inputs:
        if name not in out:
            if name not in arrays:
                raise OptionError(
                    f"--calibration: no array for model input {name!r} (arrays: "
                    f"{', '.join(sorted(arrays))}); name it {name!r} or pass "
                    f"--map {name}=ARRAY")
            out[name] = arrays[name]
    return out

"""Executed instructions per int8 inference under QEMU, with and without the DSP kernels.

Each model of the MLPerf-Tiny-style zoo is quantized by Kiln's PTQ (seeded random
calibration data), compiled for the board twice — once for the board's own target (the
Cortex-M DSP schedules of :mod:`toolchain.schedules.cortex_m.int8`) and once for ``c-generic``
with the same core flags (the plain-C int8 loops) — and run on the board's QEMU machine
with ``-icount shift=0`` (the runner's instruction count, exact to within 40). The two
int8 outputs must be equal, bit for bit.

    python -m toolchain.intrinsics.icount                       # ds_cnn resnet8 mobilenet_v1
    python -m toolchain.intrinsics.icount --models ds_cnn --board qemu-mps2-an500

Example (a doctest would build three firmwares; see docs/int8.md for the table)::

    >>> from toolchain.intrinsics.icount import MODELS
    >>> MODELS
    ('ds_cnn', 'resnet8', 'mobilenet_v1')
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

MODELS = ("ds_cnn", "resnet8", "mobilenet_v1")


def _quantized(name: str, work: Path) -> tuple[Path, dict[str, np.ndarray]]:
    from toolchain.frontend.onnx import from_onnx
    from toolchain.quantize.ptq import quantize_model
    from toolchain.zoo import ZOO

    model = ZOO[name].build()
    rng = np.random.default_rng(11)
    values = from_onnx(model).inputs
    cal = {v.name: rng.standard_normal((8, *v.shape)).astype(np.float32) for v in values}
    qdq, _ = quantize_model(model, cal)
    path = work / f"{name}_int8.onnx"
    onnx.save(qdq, path)
    inputs = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in values}
    return path, inputs


def count(model: Path, inputs: dict[str, np.ndarray], board: str, target: str | None,
          out: Path) -> tuple[int, dict[str, np.ndarray]]:
    """(instructions, outputs) of one inference of ``model`` compiled for ``board`` with
    ``target`` replacing the board's target (None: the board's own)."""
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.boards.descriptor import load_board

    b = load_board(board)
    if target is not None:
        b = replace(b, target=target)
    bundle, _ = compile_board(model, b, out, name=model.stem.replace("-", "_"))
    run = run_on_qemu(bundle, inputs, timeout=600)
    if run.instructions is None:
        raise RuntimeError(f"the firmware of {model.name} printed no timer ticks")
    return run.instructions, run.outputs


def main(argv: list[str] | None = None) -> None:
    """Print the Markdown table of docs/int8.md ("Cortex-M DSP kernels")."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--board", default="qemu-mps2-an386")
    ap.add_argument("--only", choices=("generic", "dsp"), default=None,
                    help="measure one variant only")
    a = ap.parse_args(argv)
    print(f"instructions per int8 inference on {a.board} (QEMU -icount)\n")
    print("| model | plain C int8 (c-generic) | DSP kernels | ratio | outputs equal |")
    print("|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in a.models.split(","):
            path, inputs = _quantized(name, work)
            res = {}
            for label, target in (("generic", "c-generic"), ("dsp", None)):
                if a.only in (None, label):
                    res[label] = count(path, inputs, a.board, target, work / f"{name}-{label}")
            g = res.get("generic", (0, {}))[0]
            d = res.get("dsp", (0, {}))[0]
            same = "-"
            if len(res) == 2:
                same = str(all(np.array_equal(res["generic"][1][k], res["dsp"][1][k])
                               for k in res["generic"][1]))
            ratio = f"{g / d:.2f}x" if g and d else "-"
            print(f"| {name} | {g:,} | {d:,} | {ratio} | {same} |", flush=True)


if __name__ == "__main__":
    main()

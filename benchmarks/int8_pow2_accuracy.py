"""What power-of-two scales cost in accuracy: zoo models quantized by ``kiln quantize`` with
its default scales and with ``--power-of-two-scales``, each against the float model.

Both int8 models are calibrated on the zoo's calibration samples
(:func:`toolchain.zoo.quantized.calibration`) and run on ``--samples`` other seeded
standard-normal inputs through Kiln's integer reference (``run_graph`` on the lowered integer
graph: what every int8 bundle computes bit for bit); the float model through the float
reference. Per model and scheme:

* ``rel err``: the mean over samples of ``max|int8 - float| / max|float|`` (every output);
* ``top-1``: for a classifier (a first output of one row of classes), how often the int8
  model's arg-max equals the float model's;
* ``pow2/default``: the ratio of the two schemes' errors (> 1: power-of-two scales are worse).

Random inputs are not a data set: the figures compare the schemes on the same inputs, they
are not a model's accuracy on its task.

    PYTHONPATH=. python benchmarks/int8_pow2_accuracy.py      # resnet8 ds_cnn lenet5 autoencoder
    PYTHONPATH=. python benchmarks/int8_pow2_accuracy.py mobilenet_v1 --samples 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: E402
from toolchain.graph.reference import run_graph  # noqa: E402
from toolchain.quantize.ptq import quantize_model  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402
from toolchain.zoo.quantized import calibration  # noqa: E402


def errors(model, scheme_graph, float_graph, samples: list[dict]) -> tuple[float, float | None]:
    """Mean relative error against the float model and top-1 agreement (None: no classifier)."""
    rel, same = [], []
    for x in samples:
        want = run_graph(float_graph, x)
        got = run_graph(scheme_graph, x)
        worst = 0.0
        for name, f in want.items():
            f = np.asarray(f, np.float64)
            q = np.asarray(got[name], np.float64)
            worst = max(worst, float(np.abs(q - f).max() / max(np.abs(f).max(), 1e-12)))
        rel.append(worst)
        first = next(iter(want))  # a classifier's logits: one row of classes
        if want[first].ndim == 2 and want[first].shape[0] == 1 and want[first].shape[1] > 1:
            same.append(int(np.argmax(want[first])) == int(np.argmax(got[first])))
    return float(np.mean(rel)), (float(np.mean(same)) if same else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet8", "ds_cnn", "lenet5", "autoencoder"])
    ap.add_argument("--samples", type=int, default=64, help="evaluation inputs per model")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the evaluation inputs")
    args = ap.parse_args(argv)
    print(f"{'model':14} {'scheme':8} {'rel err':>9} {'top-1':>7} {'pow2/default':>13}")
    for name in args.models:
        model = ZOO[name].build()
        float_graph = from_onnx(model)
        rng = np.random.default_rng(args.seed)
        samples = [{v.name: rng.standard_normal(v.shape).astype(np.float32)
                    for v in float_graph.inputs} for _ in range(args.samples)]
        cal = calibration(model)
        res = {}
        for scheme, pow2 in (("default", False), ("pow2", True)):
            q = quantize_model(model, cal, power_of_two_scales=pow2)[0]
            res[scheme] = errors(model, quantize_ops(from_onnx(q)), float_graph, samples)
        for scheme, (rel, top1) in res.items():
            ratio = f"{rel / res['default'][0]:.2f}" if scheme == "pow2" else ""
            t1 = "-" if top1 is None else f"{top1:.0%}"
            print(f"{name:14} {scheme:8} {rel:>9.4f} {t1:>7} {ratio:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

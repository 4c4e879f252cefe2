"""Print the agreement of Kiln's integer ops with onnxruntime on the MLPerf-Tiny zoo models
(the table in ``docs/int8.md``): ``python -m tests.quantize.measure [SAMPLES]``."""

from __future__ import annotations

import sys
import tempfile

import numpy as np

from tests.quantize.helpers import (
    MLPERF_TINY,
    compare_ops,
    compare_steps,
    float_model,
    ort_quantize,
    random_inputs,
)
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.quantize.ptq import quantize_model


def main(samples: int = 5) -> None:
    print("| model | quantizer | op outputs | equal | off by 1 | worst | model outputs | "
          "equal | worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in MLPERF_TINY:
            fm = float_model(name)
            g = from_onnx(fm)
            cal = random_inputs(g, 8, 0)
            arrays = {k: np.stack([c[k] for c in cal]) for k in cal[0]}
            models = {"kiln quantize": quantize_model(fm, arrays)[0],
                      "ORT quantize_static": ort_quantize(fm, cal, f"{tmp}/{name}.onnx")}
            for label, qdq in models.items():
                kg = quantize_ops(from_onnx(qdq))
                ot = oe = ow = mt = me = mw = 0
                for inp in random_inputs(g, samples, 99):
                    for t, e, w in compare_ops(qdq, kg, inp).values():
                        ot, oe, ow = ot + t, oe + e, max(ow, w)
                    t, e, w = compare_steps(qdq, kg, inp)
                    mt, me, mw = mt + t, me + e, max(mw, w)
                print(f"| {name} | {label} | {ot} | {100 * oe / ot:.2f} % | "
                      f"{100 * (ot - oe) / ot:.2f} % | {ow} | {mt} | {100 * me / mt:.1f} % | "
                      f"{mw} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)

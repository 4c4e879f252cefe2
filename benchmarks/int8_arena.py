"""int8 arenas of the MLPerf-Tiny-style zoo models next to microTVM's workspaces.

Each model is quantized by Kiln itself (``kiln quantize``'s PTQ, seeded random calibration
data), compiled for ``c-generic``, and its planned arena is read from the bundle's
``metadata.json``. The anchors are the microTVM + CMSIS-NN workspace sizes of the MLPerf
Tiny v0.5 submission.

    python benchmarks/int8_arena.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import toolchain  # noqa: E402
from tests.models.zoo import ZOO  # noqa: E402
from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.quantize.ptq import quantize_model  # noqa: E402

#: model -> (MLPerf Tiny task, microTVM workspace bytes); the zoo autoencoder is batch 8
#: with float I/O, so its anchor (batch 1) is not comparable
ANCHORS = {"ds_cnn": ("KWS", 17232), "resnet8": ("IC", 66112),
           "mobilenet_v1": ("VWW", 64800), "autoencoder": ("AD, not comparable", 1160)}


def main() -> None:
    print(f"{'model':<14} {'task':<20} {'Kiln int8 arena':>16} {'microTVM':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (task, anchor) in ANCHORS.items():
            model = ZOO[name].build()
            rng = np.random.default_rng(11)
            cal = {v.name: rng.standard_normal((8, *v.shape)).astype(np.float32)
                   for v in from_onnx(model).inputs}
            qdq, _ = quantize_model(model, cal)
            path = Path(tmp) / f"{name}_int8.onnx"
            onnx.save(qdq, path)
            toolchain.compile(path, "c-generic", output=Path(tmp) / name)
            arena = json.loads((Path(tmp) / name / "metadata.json").read_text())["arena_bytes"]
            print(f"{name:<14} {task:<20} {arena:>16,} {anchor:>10,} {arena / anchor:>6.2f}")


if __name__ == "__main__":
    main()

"""Post-training int8 quantization and the integer-only op set (see ``docs/int8.md``).

* :mod:`.fixed_point` — scales as fixed-point ``(multiplier, shift)`` and the requantization
  arithmetic shared by the references and the kernels;
* :mod:`.calibrate` / :mod:`.qdq` — ``kiln quantize``: calibrate a float model with the
  reference executor and write a QDQ ONNX model; :mod:`.integer_io` makes its inputs and
  outputs the int8 tensors themselves (``quantize_model(..., integer_io=True)``);
* the integer ops live in :mod:`toolchain.graph.ops.qops`, the QDQ -> integer rewrite in
  :mod:`toolchain.graph.passes.quantize_ops`, their computes in :mod:`toolchain.topi.int8`
  and their CPU schedules in :mod:`toolchain.schedules.generic.int8`.
"""

from __future__ import annotations

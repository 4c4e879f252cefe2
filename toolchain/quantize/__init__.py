"""Post-training int8 quantization and the integer-only op set (see ``docs/int8.md``).

* :mod:`.fixed_point` — scales as fixed-point ``(multiplier, shift)`` and the requantization
  arithmetic shared by the references and the kernels;
* :mod:`.calibrate` / :mod:`.qdq` — ``kiln quantize``: calibrate a float model with the
  reference executor and write a QDQ ONNX model; :mod:`.integer_io` makes its inputs and
  outputs the int8 tensors themselves (``quantize_model(..., integer_io=True)``);
* the integer ops live in :mod:`toolchain.graph.ops.qops`, the QDQ -> integer rewrite in
  :mod:`toolchain.graph.passes.quantize_ops`, their computes in :mod:`toolchain.topi.int8`
  and their CPU schedules in :mod:`toolchain.schedules.cpu_int8`.
"""

from __future__ import annotations

import importlib as _importlib


def register_all() -> None:
    """Register the integer ops, their computes and schedules (idempotent).

    ``toolchain.graph.ops`` does not list the ``qops`` family yet, so importing this package
    registers it; the topi and schedule registries load only their own modules, so the int8
    ones are imported here too. Importing :mod:`toolchain.graph.passes.quantize_ops` calls
    this.
    """
    import toolchain.graph.ops  # noqa: F401  (the standard families first)

    for mod in ("toolchain.graph.ops.qops", "toolchain.topi.int8",
                "toolchain.schedules.cpu_int8"):
        _importlib.import_module(mod)

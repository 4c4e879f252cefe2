"""The model zoo: deterministic whole models, built in code, for tests and benchmarks.

* :mod:`.models` — one builder function per model and the :data:`ZOO` catalogue
  (and :data:`DEMOS`, models that show one compiler feature)
  (:class:`ZooModel`: build, sample inputs, hand MAC count), :func:`count_macs`,
  :func:`parameter_count`;
* :mod:`.builder` — :class:`Builder`, the seeded ONNX graph builder, and its layer helpers;
* :mod:`.quantized` — the int8 (QDQ) versions: calibration data, Kiln's PTQ, the MLPerf
  Tiny anchors and the arena report of a compiled bundle;
* :mod:`.harness` — run a model through Kiln and through onnxruntime, and compare
  (onnxruntime is imported only there, only when used).

``docs/models.md`` describes each model.

Example::

    >>> from toolchain.zoo import ZOO, count_macs
    >>> spec = ZOO["lenet5"]
    >>> count_macs(spec.build()) == spec.macs
    True
"""

from __future__ import annotations

from toolchain.zoo.builder import Builder
from toolchain.zoo.models import (
    DEMOS,
    LARGE,
    ZOO,
    ZooModel,
    autoencoder,
    bert_base,
    count_macs,
    ds_cnn,
    fcn_opset11,
    interleaved_branches,
    lenet5,
    lstm_classifier,
    mlp,
    mobilenet_v1,
    mobilenet_v2,
    parameter_count,
    resnet8,
    resnet18,
    resnet50,
    transformer_encoder,
    transformer_encoder_gelu,
    vit_tiny,
)

__all__ = ["DEMOS", "LARGE", "ZOO", "Builder", "ZooModel", "autoencoder", "bert_base",
           "count_macs", "ds_cnn", "fcn_opset11", "interleaved_branches", "lenet5",
           "lstm_classifier", "mlp", "mobilenet_v1", "mobilenet_v2", "parameter_count",
           "resnet8", "resnet18", "resnet50",
           "transformer_encoder", "transformer_encoder_gelu", "vit_tiny"]

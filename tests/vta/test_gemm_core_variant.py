"""A target variant with another GEMM core (``gemm: {batch: 2, block_in: 8, block_out: 8}``)
compiles a model onto the accelerator, bit-exact on the C simulator (docs/vta.md,
"Compiling for the accelerator")."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

import toolchain

from .qmodels import assert_cnn_bundle_bit_exact, quantized, small_cnn

VARIANT = ("name: vta-2x8x8\nkind: vta\nextends: vta\n"
           "gemm: {batch: 2, block_in: 8, block_out: 8}\nbuffers: {weight: 65536}\n")


def test_a_batch_2_core_runs_every_layer_on_the_accelerator(tmp_path: Path) -> None:
    """The direct convolution's schedule tiles one pixel per GEMM row (BATCH 1); on a core
    of BATCH 2 the 16-channel 3x3 layer used to stay on the host with a tensorize error,
    where the im2col GEMM (pixels as rows) runs it."""
    (tmp_path / "v.yaml").write_text(VARIANT)
    q = quantized(small_cnn(mid=16))
    onnx.save(q, tmp_path / "cnn.onnx")
    pkg = toolchain.compile(tmp_path / "cnn.onnx", str(tmp_path / "v.yaml"),
                            output=tmp_path / "b")
    meta = json.loads((pkg.path / "metadata.json").read_text())["accelerator"]
    where = {p["node"]: p for p in meta["placements"]}
    for node in ("conv1", "conv2", "fc"):
        assert where[node]["device"] == "accelerator", where[node]["reason"]
    assert ("as an im2col GEMM 64x144 by 144x16 (the direct convolution: tensorize with "
            "'vta-2x8x8.gemm'") in where["conv2"]["reason"]
    assert "; K in 18 blocks of 8; the host builds" in where["conv2"]["reason"]
    assert_cnn_bundle_bit_exact(pkg, q)

"""Board bundles with LLVM kernel objects (``--backend llvm``) against the C build of the
same model for the same board, both run under QEMU: bit-exact, int8 and fp32.

int8: the Cortex-M DSP kernels through the descriptor's ``llvm_impl`` bodies (SXTB16,
SMLAD) and ``llvm_helpers`` (the requantization, SSAT/USAT). fp32: the descriptor lets
LLVM fuse multiply-adds into VFMA as gcc does (``-slowfpvfmx``), so both backends round
alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.boards.conftest import needs_qemu

pytestmark = [needs_qemu]

BOARD = "qemu-mps2-an386"


def _assert_bit_exact(runs: dict, name: str) -> None:
    for out, want in runs["c"].outputs.items():
        got = runs["llvm"].outputs[out]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {out}")
    # not vacuous: some output varies
    assert any(len(np.unique(v)) > 1 for v in runs["c"].outputs.values())


@pytest.mark.parametrize("name,board", [
    ("ds_cnn", BOARD),
    pytest.param("resnet8", BOARD, marks=pytest.mark.slow),
    pytest.param("mobilenet_v1", BOARD, marks=pytest.mark.slow),
    pytest.param("autoencoder", BOARD, marks=pytest.mark.slow),
    pytest.param("ds_cnn", "qemu-mps2-an500", marks=pytest.mark.slow),  # cortex-m7
])
def test_int8_model_llvm_objects_bit_exact_with_c_build(name, board, qdq_compiled,
                                                        tmp_path) -> None:
    """The C build and its QEMU run are the int8 board tests' (``qdq_compiled``: the same
    Kiln-quantized model, built and run once a session)."""
    from toolchain.boards import compile_board, run_on_qemu

    m = qdq_compiled(name, "kiln")
    path, _ = compile_board(m.path, board, tmp_path / "llvm", name=f"{name}_int8",
                            backend="llvm")
    runs = {"c": m.run_on(board), "llvm": run_on_qemu(path, m.inputs, timeout=180)}
    assert set(runs["c"].outputs) == set(runs["llvm"].outputs)
    _assert_bit_exact(runs, name)


@pytest.mark.parametrize("name", ["lenet5", pytest.param("ds_cnn", marks=pytest.mark.slow)])
def test_fp32_model_llvm_objects_bit_exact_with_c_build(name, zoo_compiled, tmp_path) -> None:
    """The C build and its QEMU run are the fp32 board tests' (``zoo_compiled``: the zoo
    model on its sample inputs, built and run once a session)."""
    from toolchain.boards import compile_board, run_on_qemu

    c = zoo_compiled(name)
    path, _ = compile_board(c.path, BOARD, tmp_path / "llvm", name=name, backend="llvm")
    runs = {"c": c.run_on(BOARD), "llvm": run_on_qemu(path, c.inputs, timeout=180)}
    assert set(runs["c"].outputs) == set(runs["llvm"].outputs)
    _assert_bit_exact(runs, name)

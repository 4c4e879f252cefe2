"""Regenerate the example files in this folder, byte for byte.

    python examples/make_examples.py          # rewrite lenet5.onnx, lenet5_input.npz, vta_gemm.bin
    python examples/make_examples.py --check  # exit 1 if the committed files are stale

The model comes from the model zoo (:mod:`toolchain.zoo`), so the example and the tests
are always the same network.  The input is a hand-drawn "7", normalised like MNIST.
``vta_gemm.bin`` is an accelerator program for ``kiln sim``: a 32x64 by 64x32 int8 GEMM
with its data, from the latency-hiding generator (:func:`toolchain.vta.gemm_workload`).
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from toolchain.zoo import lenet5  # noqa: E402

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def seven() -> np.ndarray:
    """A 1x1x28x28 float32 image of the digit 7, normalised like MNIST inputs.

    >>> seven().shape
    (1, 1, 28, 28)
    """
    img = np.zeros((28, 28), np.float32)
    img[5:8, 6:22] = 1.0                        # the top bar
    for row in range(8, 24):                    # the stroke down to the left
        col = 21 - (row - 8) * 10 // 15
        img[row, col - 1:col + 2] = 1.0
    return ((img - MNIST_MEAN) / MNIST_STD).reshape(1, 1, 28, 28).astype(np.float32)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive with fixed timestamps (``np.savez`` stamps the current time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for key, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def example_files() -> dict[str, bytes]:
    """File name (in this folder) -> exact content."""
    from toolchain.vta.workloads import gemm_workload

    model = lenet5()
    input_name = model.graph.input[0].name
    return {
        "lenet5.onnx": model.SerializeToString(),
        "lenet5_input.npz": npz_bytes({input_name: seven()}),
        "vta_gemm.bin": gemm_workload(32, 64, 32).vthread.to_bytes(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare with the files on disk; exit 1 if they differ")
    args = parser.parse_args(argv)
    stale = []
    for name, data in example_files().items():
        path = HERE / name
        if path.exists() and path.read_bytes() == data:
            continue
        stale.append(name)
        if not args.check:
            path.write_bytes(data)
            print(f"wrote {path.relative_to(ROOT)} ({len(data)} bytes)")
    if args.check and stale:
        print("stale: " + ", ".join(stale) + " (run python examples/make_examples.py)")
        return 1
    if not stale:
        print("examples are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

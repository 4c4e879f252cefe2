"""Accuracy of the digits CNN on its held-out set: the Kiln bundle next to onnxruntime.

    python examples/digits/evaluate.py                  # compiles into build/digits first
    python examples/digits/evaluate.py build/digits     # a bundle from `kiln compile`

It compiles ``digits.onnx`` for ``c-generic`` (unless given a bundle directory), builds the
bundle on this host, runs it on each of the 360 held-out images (batch 1, the deployed
shape), runs onnxruntime on the same images, and prints both accuracies, how many
predictions agree, and the largest probability difference.  Exit status 1 if the two
disagree on any prediction.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    import onnxruntime as ort

    import toolchain.api as kiln

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", nargs="?", type=Path,
                    help="a bundle compiled from digits.onnx (default: compile one into "
                         "build/digits)")
    ap.add_argument("--target", default="c-generic")
    args = ap.parse_args(argv)
    model_path = HERE / "digits.onnx"
    if args.bundle is None:
        package = kiln.compile(kiln.load(model_path), target=args.target,
                               output=ROOT / "build" / "digits", force=True)
        bundle = package.path
        print(f"compiled {model_path.relative_to(ROOT)} -> {bundle} "
              f"(arena {package.metadata['arena_bytes']:,} B, weights "
              f"{package.metadata['weight_bytes']:,} B, {package.metadata['kernel_count']} "
              "kernels)")
    else:
        bundle = args.bundle
    from toolchain.bundle import load_bundle

    module = load_bundle(bundle)
    with np.load(HERE / "test_set.npz") as data:
        images, labels = data["images"], data["labels"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    kiln_pred, ort_pred, worst = [], [], 0.0
    for img in images:
        x = img[None]  # (1, 1, 8, 8)
        probs = module({"image": x})["probs"]
        ref = sess.run(["probs"], {"image": x})[0]
        worst = max(worst, float(np.abs(probs - ref).max()))
        kiln_pred.append(int(probs.argmax()))
        ort_pred.append(int(ref.argmax()))
    kiln_pred, ort_pred = np.array(kiln_pred), np.array(ort_pred)
    n = len(labels)
    print(f"held-out images: {n}")
    print(f"Kiln bundle accuracy: {(kiln_pred == labels).mean():.4f} "
          f"({int((kiln_pred == labels).sum())}/{n})")
    print(f"onnxruntime accuracy: {(ort_pred == labels).mean():.4f} "
          f"({int((ort_pred == labels).sum())}/{n})")
    agree = int((kiln_pred == ort_pred).sum())
    print(f"predictions agree: {agree}/{n}; max |probability difference| {worst:.2e}")
    return 0 if agree == n else 1


if __name__ == "__main__":
    sys.exit(main())

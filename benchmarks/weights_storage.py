"""Bundle size on disk and ``make`` time per weight storage mode, in one run.

    python benchmarks/weights_storage.py                  # ResNet-18 (zoo), c-generic
    python benchmarks/weights_storage.py --model mobilenet_v2 --jobs 2

For each ``--weights`` mode (``incbin``, the default; ``c-array``; ``external``) the zoo
model is compiled once; the table gives the bytes of the bundle's files on disk (all of
them, and the weights' own files), the bytes of source a weight byte costs, the wall time
of ``make build/weights.o`` (the weights' object alone) and of the whole ``make lib`` (the
library, ``-O3``, the weights' object included), each with its ratio to ``c-array``'s (the
form every bundle had before the blob). The library of each mode is then run on the same
input: the outputs must be identical. Times are one run on this machine: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

MODES = ("c-array", "incbin", "external")


def _size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="a zoo model (default resnet18)")
    ap.add_argument("--target", default="c-generic")
    ap.add_argument("--jobs", type=int, default=1, help="make -j (default 1)")
    args = ap.parse_args(argv)

    from toolchain.bundle import compile_model, load_bundle
    from toolchain.zoo import ZOO

    spec = ZOO[args.model]
    model = spec.build()
    rows, outs = [], {}
    with tempfile.TemporaryDirectory(prefix="kiln-weights-bench-") as tmp:
        for mode in MODES:
            t0 = time.perf_counter()
            path = compile_model(model, args.target, Path(tmp) / mode, progress=False,
                                 input_shapes=spec.input_shapes, weights=mode)
            compile_s = time.perf_counter() - t0
            files = [p for p in path.rglob("*") if p.is_file()]
            weight_files = [p for p in files if p.name.startswith("weights")]
            t0 = time.perf_counter()  # the weights' object alone, then the rest of the lib
            subprocess.run(["make", "-s", "-C", str(path), "build/weights.o"], check=True)
            weights_s = time.perf_counter() - t0
            subprocess.run(["make", "-s", "-C", str(path), f"-j{args.jobs}", "lib"],
                           check=True)
            make_s = time.perf_counter() - t0
            meta = json.loads((path / "metadata.json").read_text())
            mod = load_bundle(path)
            feeds = {t["name"]: np.random.default_rng(0).standard_normal(t["shape"]).astype(
                np.float32) for t in meta["inputs"]}
            outs[mode] = {k: v.tobytes() for k, v in mod(feeds).items()}
            rows.append((mode, _size(files), _size(weight_files),
                         _size(weight_files) / meta["weight_bytes"], compile_s, weights_s,
                         make_s))
    base = next(r for r in rows if r[0] == "c-array")
    print(f"{args.model} ({args.target}): {meta['weight_bytes']:,} bytes of weights")
    print(f"{'mode':9} {'bundle MB':>10} {'weights MB':>11} {'B/weight B':>11} "
          f"{'size ratio':>10} {'compile s':>10} {'weights.o s':>12} {'ratio':>7} "
          f"{'make lib s':>11} {'ratio':>7}")
    for mode, total, wsize, per, comp, wo, mk in rows:
        print(f"{mode:9} {total / 1e6:10.1f} {wsize / 1e6:11.1f} {per:11.2f} "
              f"{total / base[1]:10.3f} {comp:10.1f} {wo:12.2f} {wo / base[5]:7.3f} "
              f"{mk:11.2f} {mk / base[6]:7.3f}")
    same = all(outs[m] == outs["c-array"] for m in MODES)
    print("outputs identical in every mode" if same else "OUTPUTS DIFFER between modes")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""Digests of every file of every zoo bundle: proof that a refactor changed no bundle.

    python benchmarks/bundle_digests.py --save before.json           # at the old commit
    python benchmarks/bundle_digests.py --compare before.json        # after the change

Each zoo model (fp32; the four MLPerf-Tiny models also int8, quantized by Kiln's
post-training quantization with 8 seeded calibration samples) is compiled for every CPU
target in ``targets/`` and each rendered file is hashed (sha256), in memory: nothing is
written but the JSON. ``--compare`` prints one line per bundle (``same`` or the files that
differ) and exits 1 if any differs. ``--slow`` adds ResNet-18; ``--models``/``--targets``
narrow the set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGETS = ("c-generic", "x86_64-avx2", "x86_64-avx512", "cortex-m4", "cortex-m7")
INT8 = ("ds_cnn", "resnet8", "mobilenet_v1", "autoencoder")


def _digest(content: object) -> str:
    """SHA-256 of a rendered file: text, bytes, or a streamed one (the weights blob)."""
    from toolchain.bundle.render import Streamed

    if isinstance(content, Streamed):
        return content.digest()
    data = content if isinstance(content, bytes) else str(content).encode()
    return hashlib.sha256(data).hexdigest()


def digests(models: list[str], targets: list[str]) -> dict[str, dict[str, str]]:
    """``{"<model>/<precision>/<target>": {file: sha256}}``."""
    from toolchain.bundle import build_spec, render_files
    from toolchain.errors import KilnError
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    out: dict[str, dict[str, str]] = {}
    for name in models:
        spec = ZOO[name]
        model = spec.build()
        variants = [("fp32", model)]
        if name in INT8:
            variants.append(("int8", kiln_qdq(model)))
        for tag, m in variants:
            for target in targets:
                key = f"{name}/{tag}/{target}"
                try:
                    files = render_files(build_spec(m, target, input_shapes=spec.input_shapes,
                                                    name=name, progress=False))
                except KilnError as e:  # a refusal is a result too: it must stay the same
                    out[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
                    print(f"{key}: {out[key]['error'][:100]}", file=sys.stderr, flush=True)
                    continue
                out[key] = {str(f): _digest(c) for f, c in sorted(files.items())}
                print(f"{key}: {len(files)} files", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="write the digests to this JSON file")
    group.add_argument("--compare", type=Path, help="compare with digests saved before")
    ap.add_argument("--models", default=None, help="comma-separated zoo names")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--slow", action="store_true", help="include the slow models")
    args = ap.parse_args(argv)
    from toolchain.zoo import ZOO

    models = args.models.split(",") if args.models else \
        [n for n, s in ZOO.items() if args.slow or not s.slow]
    now = digests(models, args.targets.split(","))
    if args.save:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        return 0
    before = json.loads(args.compare.read_text())
    bad = 0
    for key, files in now.items():
        old = before.get(key)
        if old is None:
            print(f"{key:48s} not in {args.compare}")
            continue
        diff = sorted(f for f in set(files) | set(old) if files.get(f) != old.get(f))
        bad += bool(diff)
        print(f"{key:48s} {'same' if not diff else 'DIFFERS: ' + ', '.join(diff)}")
    print(f"{len(now) - bad} of {len(now)} bundles byte-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU seconds of compiling int8 zoo models for the accelerator, against another tree.

    PYTHONPATH=. python benchmarks/vta_compile_cpu.py --ref /tmp/old-kiln
    PYTHONPATH=. python benchmarks/vta_compile_cpu.py --ref /tmp/old-kiln \\
        --models resnet8,mobilenet_v1 --power-of-two-scales --rounds 3

Each model is quantized by Kiln's PTQ (``kiln_qdq``, or with ``--power-of-two-scales``
the PTQ whose layers requantize on the accelerator) once per process, then compiled with
``build_spec(..., target)`` (default ``vta``: the partition compiles every accelerator
layer, the default tile search included) and rendered, once untimed, then ``--repeat``
times timed (``time.process_time``, the collector paused as ``kiln compile`` does); the
minimum is printed (``--cold``: each timed compile searches again, the accelerator
compile's ``CHOSEN`` and ``LOWERED`` cleared before it). The trees alternate for
``--rounds`` fresh processes each and the table gives the best of each and the ratio
(below 1: this tree is faster). CPU time, so a loaded machine changes the figures less
than wall time, but still some: compare within one run. (``benchmarks/compile_cpu.py``
times the fp32 zoo models, which have no accelerator layers.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_cpu import run_child  # noqa: E402  (benchmarks/compile_cpu.py)

_CHILD = r"""
import json, sys, time, warnings
from toolchain.bundle import build_spec, render_files
from toolchain.gcpause import paused_gc
from toolchain.zoo import ZOO
from toolchain.zoo.quantized import calibration, kiln_qdq

name, repeat, target, pow2 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
cold = sys.argv[5] == "1"
spec = ZOO[name]
model = spec.build()
if pow2:
    from toolchain.quantize.ptq import quantize_model
    q = quantize_model(model, calibration(model), power_of_two_scales=True)[0]
else:
    q = kiln_qdq(model)


def run():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with paused_gc():
            render_files(build_spec(q, target, input_shapes=spec.input_shapes, name=name,
                                    progress=False))


run()
best = float("inf")
for _ in range(repeat):
    if cold:  # the search made again: no chosen point, no lowered function kept
        import toolchain.vta.compile as vc
        vc.CHOSEN.clear()
        vc.LOWERED.clear()
    t = time.process_time()
    run()
    best = min(best, time.process_time() - t)
print(json.dumps({"cpu_s": best}))
"""


def measure(tree: Path, name: str, repeat: int, target: str, pow2: bool,
            cold: bool = False) -> float:
    """One model's best compile CPU seconds in a fresh process on ``tree``."""
    return float(run_child(tree, _CHILD, [name, str(repeat), target, "1" if pow2 else "0",
                                          "1" if cold else "0"], name)["cpu_s"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, required=True, help="another Kiln source tree")
    ap.add_argument("--models", default="resnet8", help="comma-separated int8 zoo models")
    ap.add_argument("--target", default="vta")
    ap.add_argument("--power-of-two-scales", action="store_true")
    ap.add_argument("--cold", action="store_true",
                    help="clear the accelerator compile's CHOSEN and LOWERED before each "
                         "timed compile (the tile search made again)")
    ap.add_argument("--repeat", type=int, default=2, help="timed compiles per process")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree (alternating)")
    args = ap.parse_args(argv)
    print(f"| model | {args.ref} (CPU s) | this tree (CPU s) | this / ref | each run |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        runs: dict[str, list[float]] = {"ref": [], "new": []}
        for _ in range(args.rounds):
            for key, tree in (("ref", args.ref), ("new", ROOT)):
                runs[key].append(measure(tree, name, args.repeat, args.target,
                                         args.power_of_two_scales, args.cold))
        ref, new = min(runs["ref"]), min(runs["new"])
        each = "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in runs.items())
        print(f"| {name} | {ref:.2f} | {new:.2f} | {new / ref:.2f} | {each} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of the C functional simulator against the Python one, on compiled ResNet-18 layers.

Each layer of the TVM paper's ResNet-18 (``toolchain.vta.workloads.RESNET18_LAYERS``) is
compiled as a direct convolution (``compile_conv2d``, two virtual threads, tiles chosen by
the compiler) on one random image, then run in token mode on ``run_fsim`` (numpy) and on
``run_cfsim`` (runtime_c/kiln_vta_fsim.c through the C driver). The two DRAM images and
counters must agree bit for bit; the script prints the seconds of each (best of
``--repeat``) and the ratio. The machine is shared and noisy: quote the ratio.

    python benchmarks/vta_cfsim.py                      # C9
    python benchmarks/vta_cfsim.py --layers C2,C9,C12 --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.vta.cfsim import library, run_cfsim  # noqa: E402
from toolchain.vta.compile import compile_conv2d  # noqa: E402
from toolchain.vta.fsim import run_fsim  # noqa: E402
from toolchain.vta.workloads import RESNET18_LAYERS  # noqa: E402


def _best(run, program, dram, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = run(program, dram, tokens=True)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="C9", help="comma-separated, e.g. C2,C9 (default C9)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per simulator (best kept)")
    args = ap.parse_args(argv)
    library()  # build outside the timing
    print(f"{'layer':6} {'image':>9} {'insns':>6} {'MACs':>12} {'python s':>9} {'C s':>8} "
          f"{'speedup':>8}")
    for name in args.layers.split(","):
        spec = RESNET18_LAYERS[name]
        rng = np.random.default_rng(0)
        w = rng.integers(-128, 128, (spec.oc, spec.ic, spec.k, spec.k), dtype=np.int8)
        x = rng.integers(-128, 128, (spec.ic, spec.h, spec.w), dtype=np.int8)
        conv = compile_conv2d(w, spec.h, spec.w, shift=12, stride=spec.s, pad=spec.k // 2,
                              layer=name)
        dram = conv.image(x)
        tp, py = _best(run_fsim, conv.program, dram, args.repeat)
        tc, c = _best(run_cfsim, conv.program, dram, args.repeat)
        if not (np.array_equal(py.dram, c.dram)
                and c.counters == {k: v for k, v in py.counters.items() if v}):
            print(f"{name}: the C and Python simulators disagree", file=sys.stderr)
            return 1
        print(f"{name:6} {spec.h:>4}x{spec.w:<4} {len(conv.program.insns):>6} "
              f"{py.counters['macs']:>12,} {tp:>9.3f} {tc:>8.3f} {tp / tc:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Which GPU schedule each zoo model's GEMM-shaped groups get (no GPU needed): per model,
the groups whose anchor is a convolution, dense layer or matmul, how many of them the
strategy table's tiled GEMM takes (the others — a matrix-vector product, a depthwise
convolution — keep the generic one-thread-per-output kernel), how many of those are split-K
(partial sums, then their sum: ``gemm.split_k``), and the most shared memory
one of its kernels allocates. ``--races``: also run the race checker
(:func:`toolchain.tir.race.check_races`, the interpreter's bounds checks included) on the
first block of every tiled kernel, all its threads (slow: minutes for the zoo).

    python benchmarks/cuda_schedules.py                  # every zoo model, cuda-sm90
    python benchmarks/cuda_schedules.py --models resnet18 --target cuda-sm80
    python benchmarks/cuda_schedules.py --models resnet8 --show fused_conv2d_relu_1
                                              # that group's kernels, lowered
    python benchmarks/cuda_schedules.py --races  # + the race checker on each tiled kernel

It counts what is compiled; it measures no time (for that, ``benchmarks/cuda.py
--schedules tiled,generic`` on a machine with a GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.driver import lower  # noqa: E402
from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.passes import run_pipeline  # noqa: E402
from toolchain.graph.passes.layout import layout_for_target  # noqa: E402
from toolchain.schedules.generic.fused import anchor_of  # noqa: E402
from toolchain.schedules.gpu.gemm import GEMM_OPS, lowered_shared_bytes  # noqa: E402
from toolchain.schedules.gpu.generic import fused_schedule  # noqa: E402
from toolchain.target import load_target  # noqa: E402
from toolchain.tir.race import check_races  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cuda-sm90")
    ap.add_argument("--models", default=None, help="comma-separated zoo names")
    ap.add_argument("--show", default=None, help="print the lowered kernels of this group")
    ap.add_argument("--races", action="store_true",
                    help="check every tiled kernel's first block for data races")
    args = ap.parse_args(argv)
    t = load_target(args.target)
    names = args.models.split(",") if args.models else list(ZOO)
    print(f"{'model':26s} {'GEMM groups':>12s} {'tiled':>6s} {'split-K':>8s} "
          f"{'most shared B':>14s}"
          + ("  races" if args.races else ""))
    for name in names:
        spec = ZOO[name]
        graph = run_pipeline(from_onnx(spec.build(), input_shapes=spec.input_shapes),
                             layout_for_target(t))
        groups = tiled = split = most = 0
        for node in graph.nodes:
            anchor = anchor_of(node)
            if anchor is None or anchor.op not in GEMM_OPS:
                continue
            groups += 1
            s = fused_schedule(node, t)
            if args.show and node.attrs["kernel"] == args.show:
                print(lower(s.schedule, target=t))
            if s.info["schedule"] == "gpu tiled gemm":
                tiled += 1
                split += '_rf")' in str(s.schedule.mod)  # an rfactor block: split-K
                most = max(most, *lowered_shared_bytes(s.schedule, t).values())
                if args.races:
                    check_races(lower(s.schedule, target=t), max_blocks=1)  # raises
        print(f"{name:26s} {groups:12d} {tiled:6d} {split:8d} {most:14d}"
              + ("  none" if args.races else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

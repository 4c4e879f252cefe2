"""How well does the compiler's predicted cost rank a layer's tilings? The default tile
search's short list against every built point.

    PYTHONPATH=. python benchmarks/vta_search.py                        # ResNet-8
    PYTHONPATH=. python benchmarks/vta_search.py --models mobilenet_v1,autoencoder
    PYTHONPATH=. python benchmarks/vta_search.py --power-of-two-scales  # requant epilogues

Each zoo model is quantized by Kiln's PTQ (as ``benchmarks/vta_tune.py``) and its
accelerator layers extracted as ``kiln tune --target vta`` extracts them. **Every** valid
point of each layer's tiling space is compiled and its
:func:`~toolchain.vta.timing.program_cost` (the cycle model plus ``INSN_CYCLES`` an
instruction: what the default search ranks built programs by) taken; the same points are
predicted without building (:func:`toolchain.vta.estimate.predict`). Per layer: the
points, how many predicted instruction counts are exact, the rank correlation of the
prediction with the built cost over the space, where the built optimum ranks in the
prediction, and the built cost of three choices — the old search (the 8 best of the
analytic :func:`~toolchain.vta.schedule.candidate_tiles` ranking at 2 virtual threads,
built), the new one (of the 8 best predicted points of the whole space those within
``SLACK`` of the best, built: what ``compile_dense`` now does; ``builds`` counts them) and
the exhaustive optimum. Costs are deterministic; the last
columns are CPU seconds: the prediction of the whole space and a build, on average.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.vta_tune import measure_space, quantized_model, spearman  # noqa: E402
from toolchain.autotune.vta import extract_vta_tasks  # noqa: E402
from toolchain.vta.compile import CANDIDATES, SLACK  # noqa: E402
from toolchain.vta.estimate import predict, shortlist  # noqa: E402
from toolchain.vta.schedule import (  # noqa: E402
    DenseShape,
    candidate_conv_tiles,
    candidate_tiles,
)
from toolchain.vta.tiling import point_of, tiles_of  # noqa: E402
from toolchain.vta.timing import INSN_CYCLES  # noqa: E402


def layer_row(task, top: int) -> tuple[list, dict[str, float]]:
    """One table row for a task and its weighted costs (old, new, optimum)."""
    s, job = task.space, task.node
    tag = s.workload.split("|")[2]
    t0 = time.process_time()
    res = measure_space(task, "none")
    build_s = (time.process_time() - t0) / max(1, len(res["model"]))
    cost = {k: c + INSN_CYCLES * res["insns"][k] for k, (c, _) in res["model"].items()}
    points = {k: tiles_of(s, p) for k, (_, p) in res["model"].items()}
    t0 = time.process_time()
    pred = {k: predict(job.shape, job.config, tag, *tp) for k, tp in points.items()}
    short = shortlist(job.shape, job.config, tag, list(points.values()), top, SLACK)
    predict_s = time.process_time() - t0
    keys = list(cost)
    exact = sum(pred[k].insns == res["insns"][k] for k in keys)
    corr = spearman([pred[k].cost for k in keys], [cost[k] for k in keys])
    by_point = {points[k]: k for k in keys}
    new = min(cost[by_point[p]] for p in short)
    analytic = candidate_tiles if isinstance(job.shape, DenseShape) else candidate_conv_tiles
    try:
        old_pts = [(t, 2) for t in analytic(job.shape, job.config, 2, CANDIDATES)]
    except Exception:           # no tiling at 2 threads: the old search took 1
        old_pts = [(t, 1) for t in analytic(job.shape, job.config, 1, CANDIDATES)]
    old_keys = [s.key(s.canonical(point_of(*p))) for p in old_pts]
    old = min(cost[k] for k in old_keys if k in cost)
    best = min(cost.values())
    order = sorted(keys, key=lambda k: pred[k].cost)
    rank = next(i for i, k in enumerate(order) if cost[k] == best)
    row = [task.name, task.weight, len(keys), f"{exact}/{len(keys)}", f"{corr:.3f}", rank,
           f"{old:,}", f"{new:,}", len(short), f"{best:,}", f"{predict_s:.2f}",
           f"{build_s:.3f}"]
    w = task.weight
    return row, {"old": w * old, "new": w * new, "best": w * best}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet8", help="comma-separated zoo names")
    ap.add_argument("--power-of-two-scales", action="store_true",
                    help="requantize on the accelerator (the requant epilogue)")
    ap.add_argument("--top", type=int, default=CANDIDATES, help="short list length")
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        q, shapes = quantized_model(name, args.power_of_two_scales)
        tasks = extract_vta_tasks(q, "vta", shapes)
        print(f"\n{name}{' (power-of-two scales)' if args.power_of_two_scales else ''}: "
              f"{len(tasks)} layer workloads, short list of {args.top}")
        print("| layer | x | points | insns exact | rank corr. | optimum's rank | old search"
              " | new search | builds | optimum | predict s | build s |")
        print("|" + " --- |" * 12)
        tot = {"old": 0.0, "new": 0.0, "best": 0.0}
        for t in tasks:
            row, w = layer_row(t, args.top)
            for k in tot:
                tot[k] += w[k]
            print("| " + " | ".join(str(x) for x in row) + " |", flush=True)
        print(f"| total (x weight) | | | | | | {tot['old']:,.0f} | {tot['new']:,.0f} | | "
              f"{tot['best']:,.0f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

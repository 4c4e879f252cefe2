"""Does ``kiln tune``'s summary hold? Its "N.NNx the default" divides the default point's
one trial by the best trial (the least of many, each the least of its repeats); this
script times the two points of every workload again, side by side and alternately, with
the same local runner, and prints both ratios.

    kiln tune model.onnx --target x86_64-avx2 --trials 64 -o r.jsonl
    python benchmarks/retime_records.py model.onnx --target x86_64-avx2 --records r.jsonl

The machine is shared: run it quiet, and read the ratios, not the times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from toolchain.autotune.measure import BuildInput, LocalBuilder, LocalRunner
    from toolchain.autotune.records import best_records, load_records
    from toolchain.autotune.tasks import extract_tasks

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--target", default="x86_64-avx2")
    ap.add_argument("--records", required=True)
    ap.add_argument("--rounds", type=int, default=4, help="alternate timings of the pair")
    ap.add_argument("--flush-mb", type=int, default=8, help="as kiln tune's (default 8)")
    args = ap.parse_args()
    recs = load_records(args.records)
    best = best_records(recs)
    builder = LocalBuilder(1)
    runner = LocalRunner(repeat=3, flush_bytes=args.flush_mb << 20)
    print(f"{'task':28} {'tuner default/best':>19} {'again, alternately':>19}")
    try:
        for t in extract_tasks(args.model, args.target):
            s = t.space
            if s.workload not in best:
                continue
            default = s.trace(s.default())
            first = next((r for r in recs if r.workload == s.workload and r.ok
                          and s.key(s.canonical(s.point_of(r.trace))) == s.key(s.default())),
                         None)
            if first is None:
                continue
            builds = builder.build([BuildInput(t.node, t.target, s.workload, tr)
                                    for tr in (default, best[s.workload].trace)])
            d, b = float("inf"), float("inf")
            for _ in range(args.rounds):
                rd, rb = runner.run(builds)
                d, b = min(d, *rd.costs), min(b, *rb.costs)
            print(f"{t.name:28} {first.cost / best[s.workload].cost:19.2f} {d / b:19.2f}")
    finally:
        builder.close()
        runner.close()


if __name__ == "__main__":
    main()

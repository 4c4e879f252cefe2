"""``python -m tests.fuzz --count N --seed S``: explore more random graphs than CI does.

Each graph is compiled for every CPU target this host can run and compared with
onnxruntime (and Kiln's reference executor); each failure is shrunk to a minimal model
and saved as ``<out>/<kind>-<target>-seed<S>.onnx`` with its inputs (``.npz``) and the
finding (``.txt``). Exits 1 when anything was found.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from tests.fuzz.graphs import INT8_FAMILIES, random_model
from tests.fuzz.oracle import check, check_int8, shrink

#: every CPU target (one this host cannot run is skipped)
TARGETS = ("c-generic", "x86_64-avx2", "x86_64-avx512")
#: the other backends: kernels through LLVM, a GPU target's kernels emulated on the CPU,
#: the kernels split across 3 threads
BACKENDS = ("c-generic:llvm", "cuda-sm80:emulate", "c-generic:threads")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--count", type=int, default=100, help="graphs to try (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--targets", default=",".join(TARGETS + BACKENDS),
                    help="comma-separated targets; NAME:llvm compiles the kernels through "
                         "LLVM, NAME:emulate runs a GPU target's kernels on the CPU, "
                         "NAME:threads compiles for 3 cores and runs on 3 threads, "
                         "board:NAME runs a firmware for that board under QEMU")
    ap.add_argument("--int8", action="store_true",
                    help="quantize each graph (integer op families only) and require the "
                         "bundles to equal the integer reference bit for bit")
    ap.add_argument("--max-nodes", type=int, default=10)
    ap.add_argument("--out", default="fuzz-findings", help="where failing models go")
    args = ap.parse_args(argv)
    targets = tuple(t for t in args.targets.split(",") if t)
    out = Path(args.out)
    counts: collections.Counter[str] = collections.Counter()
    t0 = time.perf_counter()
    for seed in range(args.seed, args.seed + args.count):
        if args.int8:
            model, inputs = random_model(seed, args.max_nodes, INT8_FAMILIES)
            findings = check_int8(model, inputs, targets)
        else:
            model, inputs = random_model(seed, args.max_nodes)
            findings = check(model, inputs, targets)
        counts["graphs"] += 1
        for f in findings:
            counts[f.kind] += 1
            if f.kind in ("invalid", "ambiguous"):
                continue
            small = model if args.int8 else shrink(model, inputs, f, targets)
            out.mkdir(parents=True, exist_ok=True)
            stem = out / f"{f.kind}-{f.target}-seed{seed}"
            onnx.save(small, stem.with_suffix(".onnx"))
            np.savez(stem.with_suffix(".npz"),
                     **{i.name: inputs[i.name] for i in small.graph.input})
            stem.with_suffix(".txt").write_text(
                f"seed {seed}, {f.kind} on {f.target}: {f.detail}\n"
                f"nodes: {' '.join(n.op_type for n in small.graph.node)}\n")
            print(f"seed {seed}: {f.kind} on {f.target} ({len(small.graph.node)} nodes after "
                  f"shrinking): {f.detail.splitlines()[0][:200]}", flush=True)
    found = sum(v for k, v in counts.items() if k not in ("graphs", "invalid", "ambiguous"))
    print(f"{counts['graphs']} graphs on {', '.join(targets)} in "
          f"{time.perf_counter() - t0:.0f} s: {found} finding(s) "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()) if k != 'graphs')})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole-model latency of Kiln bundles vs onnxruntime, one thread or N, batch as in the zoo.

    python benchmarks/models.py                          # every zoo model (fcn_opset11 aside)
    python benchmarks/models.py lenet5 resnet8           # some models
    python benchmarks/models.py --target c-generic --runs 200 --keep build/bench
    python benchmarks/models.py --threads 2              # 2 threads each (docs/bundle.md)

The default target is the widest CPU descriptor this machine runs
(``toolchain.target.host_target()``: ``x86_64-avx512`` here).

For each model of ``toolchain/zoo/models.py``:

* **compile s** — ``kiln compile`` (import, passes, schedules, C, plan, weights, files);
* **layout** — the data layout the kernels use (the target's, or ``nchw`` where a kernel
  for the target's layout cannot be built yet);
* **nodes -> kernels** — graph nodes after import, fused kernels in the bundle;
* **arena / lower / naive** — the memory plan (KiB): the arena, the lower bound (largest sum
  of live bytes at one step) and every tensor in its own place;
* **weights** — KiB of constants in ``src/weights.c``;
* **kiln us** — the bundle's demo ``main`` built with ``make`` (``-O3`` + the target's flags) and
  timed *from C*: ``./main --repeat N`` runs ``<model>_run`` N times, and the minimum over
  the runs is reported (clock_gettime around each call: no Python in the loop);
* **ort us** — onnxruntime, ``intra_op_num_threads=1``, ``inter_op_num_threads=1``,
  sequential execution, all graph optimisations: the minimum of N ``session.run`` calls
  from Python.  Its per-call overhead (``run`` on a one-element Identity model) is measured
  and printed; **ort-ovh us** subtracts it;
* **ratio** — kiln / (ort - overhead): below 1 Kiln is faster.  The geometric mean is over
  all models.

``--threads N`` compiles each bundle for ``cores: N`` (its parallel kernels split across N
threads of the runtime's pthread pool), gives onnxruntime ``intra_op_num_threads=N``, and
adds **kiln 1t us** (the same bundle run with ``--threads 1``) and **speed-up** (1 thread
/ N threads) before the N-thread columns.

``--profile`` also builds ``make profile`` (per-kernel timing hooks, runtime/kiln_profile.c)
and prints, per model, each kernel's ops, MFLOP, minimum time over the runs, GFLOP/s and
share of the total:
where the time goes, kernel by kernel.

The machine is shared and noisy: only ratios from one run mean anything.  Tests never
assert times; this script only prints them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from toolchain.bundle import compile_model  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402

SKIP = {"fcn_opset11": "its Resize scales are computed at run time in the fused graph"}
#: on top of the bundle's own target flags (the Makefile's default CFLAGS are replaced)
CFLAGS = "-O3 -std=c99 -ffp-contract=fast"


def ort_session(model: onnx.ModelProto, threads: int = 1):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def time_ort(model: onnx.ModelProto, feeds: dict, runs: int, threads: int = 1) -> float:
    """Minimum seconds per ``session.run`` over ``runs`` calls (after a warm-up)."""
    sess = ort_session(model, threads)
    sess.run(None, feeds)
    best = math.inf
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def ort_overhead(runs: int) -> float:
    """onnxruntime's per-call cost on a one-element Identity model (seconds)."""
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return time_ort(m, {"x": np.zeros(1, np.float32)}, max(runs, 200))


def time_kiln(bundle: Path, feeds: dict, runs: int, threads: int = 1) -> float:
    """Minimum seconds per ``<model>_run`` on ``threads`` threads, timed by the demo main
    in C."""
    meta = json.loads((bundle / "metadata.json").read_text())
    flags = " ".join([CFLAGS, *meta["target"]["cflags"]])
    res = subprocess.run(["make", "-s", "-C", str(bundle), "main", f"CFLAGS={flags}"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"make failed in {bundle}:\n{res.stderr[-2000:]}")
    args = []
    for t in meta["inputs"]:
        f = bundle / f"bench_in_{t['field']}.bin"
        np.ascontiguousarray(feeds[t["name"]]).tofile(f)
        args.append(str(f))
    args += [str(bundle / f"bench_out_{t['field']}.bin") for t in meta["outputs"]]
    out = subprocess.run([str(bundle / "main"), "--repeat", str(runs), "--threads",
                          str(threads), *args],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"kiln-time-ns min (\d+)", out)
    if m is None:
        raise RuntimeError(f"unexpected output of main: {out!r}")
    return int(m.group(1)) * 1e-9


def profile(bundle: Path, runs: int) -> None:
    """Per-kernel mean times of the bundle (``make profile``), printed as a table."""
    meta = json.loads((bundle / "metadata.json").read_text())
    flags = " ".join([CFLAGS, *meta["target"]["cflags"]])
    subprocess.run(["make", "-s", "-C", str(bundle), "profile", f"CFLAGS={flags}"],
                   capture_output=True, text=True, check=True)
    args = [str(bundle / f"bench_in_{t['field']}.bin") for t in meta["inputs"]]
    args += [str(bundle / f"bench_out_{t['field']}.bin") for t in meta["outputs"]]
    out = subprocess.run([str(bundle / "main_profile"), "--repeat", str(runs), *args],
                         capture_output=True, text=True, check=True).stdout
    ns = {int(m.group(1)): float(m.group(2))
          for m in re.finditer(r"kiln-profile (\d+) \S+ (\d+)", out)}
    total = sum(ns.values()) or 1.0
    print(f"\n{meta['model']['name']}: per kernel (minimum of {runs} runs)\n")
    print("| # | kernel | ops | MFLOP | us | GFLOP/s | share |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for k in meta["kernels"]:
        t = ns.get(k["index"], 0.0)
        rate = k["flops"] / t if t else 0.0
        print(f"| {k['index']} | {k['kernel']} | {' '.join(k['ops'])} | "
              f"{k['flops'] / 1e6:.2f} | {t / 1e3:,.1f} | {rate:.1f} | {t / total:.0%} |")


def bench(name: str, target: Any, runs: int, root: Path, overhead: float,
          threads: int = 1) -> dict:
    spec = ZOO[name]
    model = spec.build()
    feeds = spec.inputs(model)
    t0 = time.perf_counter()
    bundle = compile_model(model, target, root / name, input_shapes=spec.input_shapes,
                           name=name, force=True, progress=False)
    compile_s = time.perf_counter() - t0
    meta = json.loads((bundle / "metadata.json").read_text())
    plan = meta["memory_plan"]
    kiln = time_kiln(bundle, feeds, runs, threads)
    kiln1 = time_kiln(bundle, feeds, runs, 1) if threads > 1 else kiln
    ort_t = time_ort(model, feeds, runs, threads)
    return {"model": name, "layout": meta["target"]["layout"].split()[0],
            "compile_s": compile_s, "nodes": meta["nodes_before_fusion"],
            "kernels": meta["kernel_count"], "arena": meta["arena_bytes"],
            "lower": plan["lower_bound"], "naive": plan["naive_bytes"],
            "weights": meta["weight_bytes"], "kiln": kiln, "kiln1": kiln1, "ort": ort_t,
            "ratio": kiln / max(ort_t - overhead, 1e-9)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="zoo models (default: all but "
                                              f"{', '.join(SKIP)})")
    ap.add_argument("--target", default=None, help="target name or YAML file (default: the "
                                                   "host's widest CPU target)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per model (min is kept)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for Kiln (the bundle compiled for cores: N) and onnxruntime")
    ap.add_argument("--profile", action="store_true",
                    help="also print each model's per-kernel times (make profile)")
    ap.add_argument("--keep", type=Path, help="write the bundles here (default: a temp dir)")
    args = ap.parse_args(argv)
    names = args.models or [n for n in ZOO if n not in SKIP]
    if args.target is None:
        from toolchain.target import host_target

        args.target = host_target().name
    from dataclasses import replace

    from toolchain.target import resolve_target

    target = replace(resolve_target(args.target), cores=max(args.threads, 1))
    n = target.cores
    root = args.keep or Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    overhead = ort_overhead(args.runs)
    print(f"target {args.target}; kiln: make CFLAGS='{CFLAGS} <target flags>', timed in C; "
          "onnxruntime: "
          f"{n} thread(s), sequential; its per-call overhead {overhead * 1e6:.1f} us "
          "(subtracted)")
    print()
    multi = "kiln 1t us | speed-up | " if n > 1 else ""
    print("| model | layout | compile s | nodes -> kernels | arena KiB | lower KiB | naive KiB | "
          f"weights KiB | {multi}kiln us | ort us | ort-ovh us | ratio |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
          + ("---: | ---: | " if n > 1 else "") + "---: | ---: | ---: | ---: |")
    rows = []
    for name in names:
        r = bench(name, target, args.runs, root, overhead, n)
        rows.append(r)
        one = f"{r['kiln1'] * 1e6:,.1f} | {r['kiln1'] / r['kiln']:.2f} | " if n > 1 else ""
        print(f"| {name} | {r['layout']} | {r['compile_s']:.1f} | {r['nodes']} -> {r['kernels']} | "
              f"{r['arena'] / 1024:,.1f} | {r['lower'] / 1024:,.1f} | {r['naive'] / 1024:,.1f} | "
              f"{r['weights'] / 1024:,.1f} | {one}{r['kiln'] * 1e6:,.1f} | {r['ort'] * 1e6:,.1f} | "
              f"{(r['ort'] - overhead) * 1e6:,.1f} | {r['ratio']:.2f} |", flush=True)
    if args.profile:
        for r in rows:
            profile(root / r["model"], args.runs)
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    print()
    print(f"geometric mean of kiln / onnxruntime: {geo:.2f} over {len(rows)} models "
          f"at {n} thread(s) (below 1: Kiln is faster)")
    if n > 1:
        up = math.exp(sum(math.log(r["kiln1"] / r["kiln"]) for r in rows) / len(rows))
        print(f"geometric mean of Kiln's speed-up from 1 to {n} threads: {up:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

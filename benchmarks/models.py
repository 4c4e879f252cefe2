"""Whole-model latency of Kiln bundles vs onnxruntime, one thread or N, batch as in the zoo.

    python benchmarks/models.py                          # every zoo model (fcn_opset11 aside)
    python benchmarks/models.py lenet5 resnet8           # some models
    python benchmarks/models.py --target c-generic --runs 200 --keep build/bench
    python benchmarks/models.py --threads 2              # 2 threads each (docs/bundle.md)
    python benchmarks/models.py vit_tiny transformer_encoder --compare-without fuse_attention
    python benchmarks/models.py --large --runs 5                # ResNet-50, BERT-base
    python benchmarks/models.py --large resnet18 --runs 5       # ... and ResNet-18

The default target is the widest CPU descriptor this machine runs
(``toolchain.target.host_target()``: ``x86_64-avx512`` here).

For each model of ``toolchain/zoo/models.py`` (``--large``: the models of its ``LARGE``
table, ResNet-50 and a BERT-base encoder, built locally with random weights from fixed
seeds; names from either table can be given):

* **compile s** — ``kiln compile`` (import, passes, schedules, C, plan, weights, files), run
  as its own process (``python -m toolchain compile model.onnx ...``): the time the command
  prints (from parsing its arguments to the written bundle, Python start-up excluded);
* **peak MiB** — the compiling process's peak resident memory (``ru_maxrss`` of that child
  alone, from ``os.wait4`` in a small launcher that forks it: a peak survives fork and exec,
  so a child forked from this large process would count its pages), and in brackets its
  ratio to the weight bytes;
* **build s** — ``make main`` of the bundle (gcc on kernels, weights and runtime, link): with
  compile s, the time from the ONNX file to a linked binary;
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

``--compare-without PASS`` compiles each model a second time with that graph pass left out
(``kiln compile --skip-pass PASS``) and adds its time and its ratio to onnxruntime (the
same onnxruntime measurement): the pass's effect, measured in one run.

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

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from toolchain.zoo import LARGE, ZOO  # noqa: E402

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


def compile_child(model: Path, target: str, out: Path, name: str,
                  shapes: dict[str, tuple[int, ...]] | None, cores: int = 1,
                  skip: str | None = None) -> tuple[float, int]:
    """``kiln compile`` as a child process: (the seconds it reports, its peak RSS bytes);
    ``cores`` > 1: ``--cores`` (the parallel kernels split across that many threads);
    ``skip``: ``--skip-pass`` (a graph pass left out)."""
    cmd = [sys.executable, "-m", "toolchain", "compile", str(model), "--target", target,
           "-o", str(out), "--name", name, "--force", "--no-progress"]
    if cores > 1:
        cmd += ["--cores", str(cores)]
    if skip:
        cmd += ["--skip-pass", skip]
    for k, v in (shapes or {}).items():
        cmd += ["--input-shape", f"{k}={','.join(map(str, v))}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as log:
        # a small launcher forks the compile: a process's peak RSS survives fork and exec,
        # so forked from this (large) process it would count this one's pages too
        proc = subprocess.run([sys.executable, "-c", _LAUNCH, *cmd], stdout=log,
                              stderr=subprocess.STDOUT, env=env, check=False)
        log.seek(0)
        text = log.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"kiln compile failed for {model}:\n{text[-2000:]}")
    m = re.search(r" in ([0-9.]+) s$", text, re.M)
    peak = re.search(r"^kiln-peak-kib (\d+)$", text, re.M)
    if m is None or peak is None:
        raise RuntimeError(f"unexpected output of kiln compile: {text[-500:]!r}")
    return float(m.group(1)), int(peak.group(1)) * 1024  # KiB on Linux


#: runs argv[1:] as a child and prints its peak RSS (os.wait4: that child's own usage)
_LAUNCH = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stdout.flush()
print(f"kiln-peak-kib {usage.ru_maxrss}", flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def build_main(bundle: Path) -> float:
    """``make main`` in the bundle (the target's flags); returns its seconds."""
    meta = json.loads((bundle / "metadata.json").read_text())
    flags = " ".join([CFLAGS, *meta["target"]["cflags"]])
    t0 = time.perf_counter()
    res = subprocess.run(["make", "-s", "-C", str(bundle), "main", f"CFLAGS={flags}"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"make failed in {bundle}:\n{res.stderr[-2000:]}")
    return time.perf_counter() - t0


def time_kiln(bundle: Path, feeds: dict, runs: int, threads: int = 1) -> float:
    """Minimum seconds per ``<model>_run`` on ``threads`` threads, timed by the demo main
    in C (built first where :func:`build_main` has not built it)."""
    meta = json.loads((bundle / "metadata.json").read_text())
    if not (bundle / "main").exists():
        build_main(bundle)
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


def with_records(model: onnx.ModelProto, target: str, work: Path, name: str, records: Path,
                 feeds: dict, runs: int, rounds: int, input_shapes: dict | None = None
                 ) -> tuple[int, float, float, float]:
    """``model`` compiled without and with the best ``records`` into ``work``, both bundles
    and onnxruntime timed alternately ``rounds`` times (least of each): the number of
    kernel schedules the records set, and the default, tuned and onnxruntime seconds."""
    from toolchain.autotune.apply import applying
    from toolchain.autotune.records import best_traces, load_records
    from toolchain.bundle import compile_model

    default = compile_model(model, target, work / "default", input_shapes=input_shapes,
                            name=name, progress=False)
    with applying(best_traces(load_records(records))) as applied:
        tuned = compile_model(model, target, work / "tuned", input_shapes=input_shapes,
                              name=name, progress=False)
    td = tt = to = math.inf
    for _ in range(rounds):  # alternately
        td = min(td, time_kiln(default, feeds, runs))
        tt = min(tt, time_kiln(tuned, feeds, runs))
        to = min(to, time_ort(model, feeds, runs))
    return len(applied), td, tt, to


def profile_output(bundle: Path, runs: int) -> tuple[dict, str]:
    """The bundle's metadata and what its ``main_profile`` prints over ``runs`` runs
    (``make profile``; the inputs :func:`time_kiln` wrote): ``kiln-profile INDEX KERNEL
    NS`` lines."""
    meta = json.loads((bundle / "metadata.json").read_text())
    flags = " ".join([CFLAGS, *meta["target"]["cflags"]])
    subprocess.run(["make", "-s", "-C", str(bundle), "profile", f"CFLAGS={flags}"],
                   capture_output=True, text=True, check=True)
    args = [str(bundle / f"bench_in_{t['field']}.bin") for t in meta["inputs"]]
    args += [str(bundle / f"bench_out_{t['field']}.bin") for t in meta["outputs"]]
    out = subprocess.run([str(bundle / "main_profile"), "--repeat", str(runs), *args],
                         capture_output=True, text=True, check=True).stdout
    return meta, out


def profile(bundle: Path, runs: int) -> None:
    """Per-kernel mean times of the bundle (``make profile``), printed as a table."""
    meta, out = profile_output(bundle, runs)
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


def bench(name: str, target: str, runs: int, root: Path, overhead: float,
          threads: int = 1, without: str | None = None) -> dict:
    spec = ZOO.get(name) or LARGE[name]
    model = spec.build()
    feeds = spec.inputs(model)
    root.mkdir(parents=True, exist_ok=True)
    onnx.save(model, root / f"{name}.onnx")
    bundle = root / name
    compile_s, peak = compile_child(root / f"{name}.onnx", target, bundle, name,
                                    spec.input_shapes, threads)
    build_s = build_main(bundle)
    meta = json.loads((bundle / "metadata.json").read_text())
    plan = meta["memory_plan"]
    kiln = time_kiln(bundle, feeds, runs, threads)
    kiln1 = time_kiln(bundle, feeds, runs, 1) if threads > 1 else kiln
    ort_t = time_ort(model, feeds, runs, threads)
    extra = {}
    if without:  # the same model with one graph pass left out, timed the same way
        other = root / f"{name}_without"
        compile_child(root / f"{name}.onnx", target, other, name, spec.input_shapes, threads,
                      skip=without)
        build_main(other)
        k_without = time_kiln(other, feeds, runs, threads)
        extra = {"without": k_without, "ratio_without": k_without / max(ort_t - overhead,
                                                                         1e-9)}
    return {**extra, "model": name, "layout": meta["target"]["layout"].split()[0],
            "compile_s": compile_s, "peak": peak, "build_s": build_s,
            "nodes": meta["nodes_before_fusion"],
            "kernels": meta["kernel_count"], "arena": meta["arena_bytes"],
            "lower": plan["lower_bound"], "naive": plan["naive_bytes"],
            "weights": meta["weight_bytes"], "kiln": kiln, "kiln1": kiln1, "ort": ort_t,
            "ratio": kiln / max(ort_t - overhead, 1e-9)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="zoo models (default: all but "
                                              f"{', '.join(SKIP)}) or large ones")
    ap.add_argument("--large", action="store_true",
                    help=f"also the large models ({', '.join(LARGE)}), generated locally")
    ap.add_argument("--target", default=None, help="target name or YAML file (default: the "
                                                   "host's widest CPU target)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per model (min is kept)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for Kiln (the bundle compiled for cores: N) and onnxruntime")
    ap.add_argument("--profile", action="store_true",
                    help="also print each model's per-kernel times (make profile)")
    ap.add_argument("--keep", type=Path, help="write the bundles here (default: a temp dir)")
    ap.add_argument("--compare-without", metavar="PASS",
                    help="also compile each model with this graph pass left out (kiln "
                         "compile --skip-pass) and print its time and ratio")
    args = ap.parse_args(argv)
    unknown = [n for n in args.models if n not in ZOO and n not in LARGE]
    if unknown:
        ap.error(f"unknown models {', '.join(unknown)} (zoo: {', '.join(ZOO)}; large: "
                 f"{', '.join(LARGE)})")
    names = args.models or ([] if args.large else [n for n in ZOO if n not in SKIP])
    names += [n for n in LARGE if args.large and n not in names]
    if args.target is None:
        from toolchain.target import host_target

        args.target = host_target().name
    n = max(args.threads, 1)
    root = args.keep or Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    overhead = ort_overhead(args.runs)
    print(f"target {args.target}; kiln: make CFLAGS='{CFLAGS} <target flags>', timed in C; "
          "onnxruntime: "
          f"{n} thread(s), sequential; its per-call overhead {overhead * 1e6:.1f} us "
          "(subtracted)")
    print()
    multi = "kiln 1t us | speed-up | " if n > 1 else ""
    wo = args.compare_without
    tail = f" kiln w/o {wo} us | ratio w/o {wo} |" if wo else ""
    print("| model | layout | compile s | peak MiB | build s | nodes -> kernels | arena KiB | "
          f"lower KiB | naive KiB | weights KiB | {multi}kiln us | ort us | ort-ovh us | ratio |"
          + tail)
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
          + ("---: | ---: | " if n > 1 else "") + "---: | ---: | ---: | ---: |"
          + (" ---: | ---: |" if wo else ""))
    rows = []
    for name in names:
        r = bench(name, args.target, args.runs, root, overhead, n, wo)
        rows.append(r)
        one = f"{r['kiln1'] * 1e6:,.1f} | {r['kiln1'] / r['kiln']:.2f} | " if n > 1 else ""
        peak = f"{r['peak'] / 2**20:,.0f} ({r['peak'] / max(r['weights'], 1):.1f}x)"
        print(f"| {name} | {r['layout']} | {r['compile_s']:.1f} | {peak} | {r['build_s']:.1f} | "
              f"{r['nodes']} -> {r['kernels']} | "
              f"{r['arena'] / 1024:,.1f} | {r['lower'] / 1024:,.1f} | {r['naive'] / 1024:,.1f} | "
              f"{r['weights'] / 1024:,.1f} | {one}{r['kiln'] * 1e6:,.1f} | {r['ort'] * 1e6:,.1f} | "
              f"{(r['ort'] - overhead) * 1e6:,.1f} | {r['ratio']:.2f} |"
              + (f" {r['without'] * 1e6:,.1f} | {r['ratio_without']:.2f} |" if wo else ""),
              flush=True)
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

"""Auto-tuning benchmark: tuned vs default vs onnxruntime, model vs random search.

    python benchmarks/tune.py                                  # C1-C12, DW1, D1-D9, dense at 64
    python benchmarks/tune.py --budgets 64,256                 # the issue's two budgets
    python benchmarks/tune.py --only C2,C6,D1024 --budgets 32 --curves C6 --svg build/curves
    python benchmarks/tune.py --resnet 8                       # + ResNet-18, 8 trials/task
    python benchmarks/tune.py --only none --mobilenet 8        # MobileNetV2 alone
    python benchmarks/tune.py --only none --transformer 16 --kinds attention,cpu_ops
                                         # the encoder's attention and generic-op kernels
    python benchmarks/tune.py --flush-mb 0                     # tune warm, as the table times
    python benchmarks/tune.py --point C4:ry=2,rw=7,epilogue=transposed  # one point, no tuning
    python benchmarks/tune.py --peak --point C3:b_pack=in_place  # + one core's FMA peak

For every case (the ResNet-18 convolutions C1-C12 of ``benchmarks/ops.py``, the depthwise
convolutions DW1 and D1-D9 and the dense shapes, batch 1, fp32, single thread) it tunes
the kernel alone with the xgboost-guided search at each budget (trials per task), then
measures in one run, alternately, the default schedule, the tuned one (the best record of
the largest budget) and onnxruntime (one-node model, one thread), and prints GFLOP/s and
the ratios. The tuned kernel's output is checked against onnxruntime. ``--curves`` also
tunes the named cases with random search at the largest budget and prints both best-so-far
curves (and with ``--svg`` draws them); "90 %" is the trial at which the model-guided
search reached 90 % of its final best. ``--resnet N`` tunes the kernels of the whole
ResNet-18 (``kiln tune`` with N trials per task, timed cold: ``--cold-mb``) and times the
bundle with and without the records against onnxruntime (per layer:
``benchmarks/resnet_layers.py``); ``--mobilenet N`` does the same for the zoo's
MobileNetV2, ``--transformer N`` for its transformer encoder. ``--kinds K,...`` tunes
only the tasks of those space kinds (the others keep their defaults; ``cpu_ops``, the
rule-driven schedule of softmax, layer norm, element-wise chains and transposes, is tuned
only when named there) and then also prints each tuned kernel's time in the default and
the tuned bundle (``make profile``, alternately, least of each).
Goals of the issue (reported, not asserted): tuned C1-C12 at least 1.3x
onnxruntime in geometric mean with no layer below 1.0x; 90 % of the final best within 64
trials per task. The machine is shared: read the ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import ops  # noqa: E402  (benchmarks/ops.py: cases, onnxruntime and timing helpers)

#: (name, input NCHW, kernel, stride): a MobileNet-style depthwise layer, and the TVM
#: paper's D1-D9 (MobileNet's 3x3 depthwise layers, batch 1, as benchmarks/ops_misc.py)
DEPTHWISE = [("DW1", (1, 128, 28, 28), 3, 1)] + [
    (f"D{i}", (1, c, hw, hw), 3, s) for i, (c, hw, s) in enumerate(
        [(32, 112, 1), (64, 112, 2), (128, 56, 1), (128, 56, 2), (256, 28, 1),
         (256, 28, 2), (512, 14, 1), (512, 14, 2), (1024, 7, 1)], 1)]


def make_tasks(names: set[str] | None, target: str) -> list[tuple[str, object]]:
    from toolchain.autotune.tasks import conv_task, dense_task, depthwise_task

    out = []
    for name, xs, oc, k, s in ops.CONVS:
        out.append((name, lambda xs=xs, oc=oc, k=k, s=s, n=name: conv_task(
            xs, oc, k, s, target, name=n)))
    for name, xs, k, s in DEPTHWISE:
        out.append((name, lambda xs=xs, k=k, s=s, n=name: depthwise_task(
            xs, k, s, target, name=n)))
    for name, m, kk, n in ops.DENSE[:3]:
        out.append((name, lambda m=m, kk=kk, n=n, nm=name: dense_task(m, kk, n, target,
                                                                       name=nm)))
    return [(n, f()) for n, f in out if names is None or n in names]


def tune(task: object, budget: int, strategy: str, seed: int, jobs: int, writer=None,
         flush_mb: float = 8, confirm: int = 4):
    from toolchain.autotune.measure import LocalBuilder, LocalRunner
    from toolchain.autotune.tuner import tune_tasks

    builder = LocalBuilder(jobs)
    try:
        with LocalRunner(repeat=3, flush_bytes=int(flush_mb * (1 << 20))) as runner:
            st, = tune_tasks([task], budget, builder=builder, runner=runner, writer=writer,
                             strategy=strategy, batch=8, seed=seed, progress=False,
                             confirm=confirm)
    finally:
        builder.close()
    return st


def _onnx_of(task) -> tuple[str, dict, dict, tuple]:
    node = task.node
    if node.op == "MatMul":
        return "MatMul", {"w": node.inputs[1].data}, {}, node.inputs[0].shape
    a = dict(node.attrs)
    attrs = {k: a[k] for k in ("strides", "pads", "kernel_shape", "group") if k in a}
    return "Conv", {"w": node.inputs[1].data, "b": node.inputs[2].data}, attrs, \
        node.inputs[0].shape


def compare(task, best_trace, repeat: int, rounds: int) -> dict:
    """Default, tuned and onnxruntime times of one case, measured alternately."""
    from toolchain.autotune.apply import forcing
    from toolchain.schedules import compile_op

    rng = np.random.default_rng(0)
    default = compile_op(task.node, task.target)
    with forcing({task.space.workload: best_trace}):
        tuned = compile_op(task.node, task.target)
    op, consts, attrs, xs = _onnx_of(task)
    ys = default.op_schedule.output_values[0].shape
    sess = ops.ort_session(ops.onnx_model(op, xs, consts, attrs, ys))
    x = rng.standard_normal(xs).astype(np.float32)
    ref = sess.run(None, {"x": x})[0]
    args_d, args_t = default.bound_args(x), tuned.bound_args(x)
    tuned.module(*args_t)
    err = float(np.abs(args_t[-1].reshape(ys) - ref).max() / max(1e-30, np.abs(ref).max()))
    calls = {"default": ops.raw_call(default.module, args_d),
             "tuned": ops.raw_call(tuned.module, args_t),
             "ort": ops.ort_bound_call(sess, x, ys)}
    best = dict.fromkeys(calls, math.inf)
    for _ in range(rounds):
        for k, c in calls.items():
            best[k] = min(best[k], ops.best_time(c, repeat))
    return {**best, "rel_err": err}


PEAK_C = r"""
#include <stdio.h>
#include <time.h>
typedef float vec __attribute__((vector_size(LANES * 4)));
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
  vec a[24], b, c; for (int l = 0; l < LANES; ++l) { b[l] = 1.0000001f; c[l] = 1e-7f; }
  for (int i = 0; i < 24; ++i) for (int l = 0; l < LANES; ++l) a[i][l] = (float)i;
  long n = 20000000; double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    double t0 = cpu();
    for (long k = 0; k < n; ++k) {
      #pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) a[i] = a[i] * b + c;
    }
    double t = cpu() - t0; if (t < best) best = t;
  }
  float s = 0; for (int i = 0; i < 24; ++i) for (int l = 0; l < LANES; ++l) s += a[i][l];
  printf("%f %f\n", 24.0 * 2 * LANES * n / best / 1e9, s);
  return 0;
}
"""


def fma_peak(lanes: int) -> float:
    """One core's fused multiply-add peak in GFLOP/s (thread CPU time, as the table's
    timings): 24 independent chains of ``lanes``-wide FMAs, compiled for this CPU."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "peak.c", Path(d) / "peak"
        src.write_text(PEAK_C.replace("LANES", str(lanes)))
        subprocess.run(["cc", "-O2", "-march=native", f"-mprefer-vector-width={lanes * 32}",
                        "-ffp-contract=fast", str(src), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def tuner_gain(st) -> float:
    """The tuner's own best/default: its default's least time over its best point's (both
    after confirming, where the search confirmed its points)."""
    best = min(st.confirmed.values()) if st.confirmed else st.best
    return st.default_cost / best


def to_90(curve: list[float]) -> int | None:
    """The trial (1-based) at which the best-so-far cost reached 90 % of the final
    throughput."""
    final = curve[-1]
    if not math.isfinite(final):
        return None
    return next(i for i, c in enumerate(curve, 1) if final / c >= 0.9)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated cases (C1..C12, DW1, D1..D9, D512, D1024, D768; "
                   "'none': only the whole models)")
    p.add_argument("--budgets", default="64", help="trials per task, comma-separated")
    p.add_argument("--curves", default="", help="cases also tuned by random search")
    p.add_argument("--svg", help="folder for the tuning-curve SVGs")
    p.add_argument("--records", help="append every trial to this records file")
    p.add_argument("--target", default=None)
    p.add_argument("--jobs", type=int, default=2, help="build processes")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flush-mb", type=float, default=8,
                   help="MiB the tuner's runner rewrites between repeats (0: warm caches, "
                        "as the table's side-by-side measurement runs)")
    p.add_argument("--confirm", type=int, default=4, metavar="K",
                   help="after each search, time its K best points and the default twice "
                        "more and pick by the least time (0: pick by the search's own)")
    p.add_argument("--peak", action="store_true",
                   help="also measure one core's FMA peak and print each kernel's share")
    p.add_argument("--resnet", type=int, default=0, metavar="N",
                   help="also tune ResNet-18's kernels (N trials per task) and time the "
                        "bundle with records vs onnxruntime")
    p.add_argument("--mobilenet", type=int, default=0, metavar="N",
                   help="the same for the zoo's MobileNetV2")
    p.add_argument("--transformer", type=int, default=0, metavar="N",
                   help="the same for the zoo's transformer encoder")
    p.add_argument("--kinds", default=None, metavar="K,...",
                   help="--resnet/--mobilenet/--transformer: tune only the tasks of these "
                        "space kinds (e.g. attention,cpu_ops) and print their kernels")
    p.add_argument("--cold-mb", type=float, default=64, metavar="MB",
                   help="--resnet/--mobilenet: the tuner's calls cycle through copies of each "
                        "kernel's arguments spanning this many MiB, so every call finds its "
                        "weights out of the caches as in the model (0: warm, as before "
                        "session 15)")
    p.add_argument("--point", action="append", default=[], metavar="CASE:K=V,...",
                   help="no tuning: time this point of CASE (its other knobs at their "
                        "defaults) against the default and onnxruntime, e.g. "
                        "C4:ry=2,rw=7,order=window_outer,epilogue=transposed (repeatable)")
    args = p.parse_args(argv)
    target = args.target or ops.default_target()
    lanes = {"x86_64-avx512": 16, "x86_64-avx2": 8}.get(target, 4)
    peak = fma_peak(lanes) if args.peak else None
    if peak is not None:
        print(f"one core's FMA peak ({lanes} lanes, 24 chains, thread CPU time): "
              f"{peak:.0f} GFLOP/s")
    if args.point:
        return time_points(args.point, target, args.repeat, args.rounds, peak)
    budgets = sorted(int(b) for b in args.budgets.split(","))
    names = set(args.only.split(",")) if args.only else None
    curves = set(filter(None, args.curves.split(",")))
    print(f"CPU: {ops.cpu_model()}; target {target}; single thread; budgets {budgets}; "
          f"the tuner flushes {args.flush_mb:g} MiB between repeats; confirms its "
          f"{args.confirm} best points; load {os.getloadavg()[0]:.1f}")
    writer = None
    if args.records:
        from toolchain.autotune.records import RecordWriter

        writer = RecordWriter(args.records, resume=True)
    rows = []
    t_start = time.perf_counter()
    for name, task in make_tasks(names, target):
        res = {}
        for b in budgets:
            t0 = time.perf_counter()
            st = tune(task, b, "xgb", args.seed, args.jobs, writer, args.flush_mb,
                      args.confirm)
            res[b] = st
            print(f"  {name}: {b} trials in {time.perf_counter() - t0:.0f} s, best/default "
                  f"{tuner_gain(st):.2f}x", file=sys.stderr, flush=True)
        final = res[budgets[-1]]
        rnd = tune(task, budgets[-1], "random", args.seed, args.jobs, writer,
                   args.flush_mb, 0) \
            if name in curves else None
        trace = task.space.trace(final.best_point)
        m = compare(task, trace, args.repeat, args.rounds)
        rows.append({"case": name, "flops": task.flops, "m": m, "res": res, "rnd": rnd,
                     "trace": str(trace)})
    if writer is not None:
        writer.commit()
    print(f"\ntuned at {budgets} trials per task ({time.perf_counter() - t_start:.0f} s); "
          f"GFLOP/s measured alternately in this run; load {os.getloadavg()[0]:.1f}")
    head = "| case | default | tuned | ort | tuned/default | tuned/ort | default/ort | " + \
        " | ".join(f"best@{b}/default" for b in budgets) + " | 90% at | rel err |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    conv_t, conv_d = [], []
    for r in rows:
        m, f = r["m"], r["flops"]
        gd, gt, go = (f / m[k] / 1e9 for k in ("default", "tuned", "ort"))
        at = [f"{tuner_gain(r['res'][b]):.2f}" for b in budgets]
        n90 = to_90(r["res"][budgets[-1]].curve)
        print(f"| {r['case']} | {gd:.1f} | {gt:.1f} | {go:.1f} | {gt / gd:.2f} | "
              f"{gt / go:.2f} | {gd / go:.2f} | " + " | ".join(at) +
              f" | {n90} | {m['rel_err']:.1e} |")
        if r["case"].startswith("C"):
            conv_t.append(gt / go)
            conv_d.append(gd / go)
    if conv_t:
        print(f"C1-C12 ({len(conv_t)} convs) geomean tuned/ort {geomean(conv_t):.2f} "
              f"(lowest {min(conv_t):.2f}), default/ort {geomean(conv_d):.2f}")
    if peak is not None:
        print("share of the FMA peak, tuned / ort: " + ", ".join(
            f"{r['case']} {100 * r['flops'] / r['m']['tuned'] / 1e9 / peak:.0f} / "
            f"{100 * r['flops'] / r['m']['ort'] / 1e9 / peak:.0f} %" for r in rows))
    n90s = [to_90(r["res"][budgets[-1]].curve) for r in rows]
    within = sum(1 for n in n90s if n is not None and n <= 64)
    print(f"90 % of the final best within 64 trials: {within} of {len(rows)} tasks")
    for r in rows:
        print(f"  {r['case']} best: {r['trace']}")
    if curves:
        print("\nbest-so-far throughput (GFLOP/s) after trials 8, 16, 32, ...: xgb vs random")
        for r in rows:
            if r["rnd"] is None:
                continue
            st, rs = r["res"][budgets[-1]], r["rnd"]
            marks = [k for k in (8, 16, 32, 64, 128, 256) if k <= len(st.curve)]
            g = lambda c, k, f=r["flops"]: f / c[k - 1] / 1e9  # noqa: E731
            print(f"  {r['case']}: " + ", ".join(
                f"@{k} {g(st.curve, k):.1f} vs {g(rs.curve, k):.1f}" for k in marks))
            if args.svg:
                from toolchain.autotune.plot import curve_svg

                d = Path(args.svg)
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{r['case']}.svg").write_text(curve_svg(
                    f"{r['case']} on {target}", {
                        "xgboost + annealing": [r["flops"] / c / 1e9 for c in st.curve],
                        "random": [r["flops"] / c / 1e9 for c in rs.curve]},
                    "GFLOP/s (best so far)"))
    kinds = set(args.kinds.split(",")) if args.kinds else None
    if args.resnet:
        resnet(target, args.resnet, args.jobs, args.seed, flush_mb=args.flush_mb,
               cold_mb=args.cold_mb, confirm=args.confirm, kinds=kinds)
    for n, zoo_name, label in ((args.mobilenet, "mobilenet_v2", "MobileNetV2"),
                               (args.transformer, "transformer_encoder", "Transformer encoder")):
        if n:
            whole_model(zoo_name, label, target, n, args.jobs, args.seed,
                        flush_mb=args.flush_mb, cold_mb=args.cold_mb, confirm=args.confirm,
                        kinds=kinds)
    return 0


def time_points(specs: list[str], target: str, repeat: int, rounds: int,
                peak: float | None = None) -> int:
    """``--point``: each given point against its case's default and onnxruntime, timed
    alternately in this run (as the tuned rows of the table)."""
    tasks = dict(make_tasks({s.split(":", 1)[0] for s in specs}, target))
    print(f"CPU: {ops.cpu_model()}; target {target}; single thread; load "
          f"{os.getloadavg()[0]:.1f}")
    print("| case | point | point/default | point/ort | default/ort | rel err | point, ort "
          "GFLOP/s |" + (" point, ort % of peak |" if peak else ""))
    print("|---|---|---:|---:|---:|---:|---:|" + ("---:|" if peak else ""))
    for spec in specs:
        case, _, kvs = spec.partition(":")
        space = tasks[case].space
        point = space.default()
        for kv in filter(None, kvs.split(",")):
            k, _, v = kv.partition("=")
            point[k] = {"True": True, "False": False}.get(v, int(v) if v.isdigit() else v)
        trace = space.trace(space.canonical(point))
        m = compare(tasks[case], trace, repeat, rounds)
        gt, go = (tasks[case].flops / m[k] / 1e9 for k in ("tuned", "ort"))
        share = f" {100 * gt / peak:.0f}, {100 * go / peak:.0f} |" if peak else ""
        print(f"| {case} | {kvs} | {m['default'] / m['tuned']:.2f} | "
              f"{m['ort'] / m['tuned']:.2f} | {m['ort'] / m['default']:.2f} | "
              f"{m['rel_err']:.1e} | {gt:.0f}, {go:.0f} |{share}", flush=True)
    return 0


def resnet(target: str, per_task: int, jobs: int, seed: int, runs: int = 20,
           flush_mb: float = 8, cold_mb: float = 64, confirm: int = 4,
           kinds: set[str] | None = None) -> None:
    """``--resnet``: the whole ResNet-18 (:func:`whole_model`)."""
    whole_model("resnet18", "ResNet-18", target, per_task, jobs, seed, runs, flush_mb,
                cold_mb, confirm, kinds)


def whole_model(zoo_name: str, label: str, target: str, per_task: int, jobs: int,
                seed: int, runs: int = 20, flush_mb: float = 8, cold_mb: float = 64,
                confirm: int = 4, kinds: set[str] | None = None) -> None:
    """Tune a zoo model's kernels (``per_task`` trials each, spread by the task scheduler;
    timed cold, ``cold_mb``: ResNet-18's 47-98 MB of weights do not stay in the caches
    between runs, and the points fastest with warm weights were up to 35 % slower in the
    bundle; the ``confirm`` best points of each task timed again), compile it with and
    without the records, and time both bundles (their C demo main,
    ``benchmarks/models.py``) and onnxruntime in this run."""
    import tempfile

    import models  # benchmarks/models.py

    from toolchain.autotune.measure import LocalBuilder, LocalRunner
    from toolchain.autotune.records import RecordWriter
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import tune_tasks
    from toolchain.zoo import ZOO

    spec = ZOO[zoo_name]
    model = spec.build()
    feeds = spec.inputs(model)
    tasks = extract_tasks(model, target, spec.input_shapes,
                          generic=kinds is not None and "cpu_ops" in kinds)
    if kinds is not None:
        tasks = [t for t in tasks if t.space.kind in kinds]
    work = Path(tempfile.mkdtemp(prefix=f"kiln-tune-{zoo_name}-"))
    out = work / f"{zoo_name}.jsonl"
    t0 = time.perf_counter()
    builder = LocalBuilder(jobs)
    try:
        with RecordWriter(out) as w, LocalRunner(
                repeat=3, flush_bytes=int(flush_mb * (1 << 20)),
                rotate_bytes=int(cold_mb * (1 << 20))) as r:
            tune_tasks(tasks, per_task * len(tasks), builder=builder, runner=r, writer=w,
                       seed=seed, progress=False, confirm=confirm)
    finally:
        builder.close()
    print(f"\n{label} on {target}: {len(tasks)} tasks, {per_task * len(tasks)} trials in "
          f"{time.perf_counter() - t0:.0f} s (records: {out})")
    applied, td, tt, to = models.with_records(model, target, work, zoo_name, out, feeds,
                                              runs, 2, spec.input_shapes)
    print(f"  {applied} kernel schedules from records; speed vs onnxruntime (ort time /"
          f" kiln time): default {to / td:.2f}, tuned {to / tt:.2f}; tuned/default "
          f"{td / tt:.2f}")
    if kinds is not None:
        kernel_table(work, tasks, runs)
        ort_ops(model, feeds, runs)


def ort_ops(model, feeds: dict, runs: int) -> None:
    """onnxruntime's nodes in its whole-model run (profiled, one thread, least per node),
    summed by op: the reference for the kernel table (its graph optimizer fuses nodes, so
    compare a Kiln kernel with the nodes doing the same work, e.g. LayerNormalization)."""
    from resnet_layers import ort_node_times  # benchmarks/resnet_layers.py

    by_op: dict[str, list[float]] = {}
    for op, t in ort_node_times(model, feeds, runs).values():
        by_op.setdefault(op, []).append(t)
    print("\n| onnxruntime op | nodes | us per node (mean of least) | us total |")
    print("|---|---:|---:|---:|")
    for op, ts in sorted(by_op.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {op} | {len(ts)} | {sum(ts) / len(ts) * 1e6:.2f} | {sum(ts) * 1e6:.2f} |")


def _kernel_ns(bundle: Path, runs: int) -> dict[str, float]:
    """Least ns per kernel of ``bundle`` over ``runs`` runs (``make profile``; the inputs
    ``models.time_kiln`` wrote)."""
    import re

    import models  # benchmarks/models.py

    _, out = models.profile_output(bundle, runs)
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"kiln-profile \d+ (\S+) (\d+)", out)}


def kernel_table(work: Path, tasks: list, runs: int, rounds: int = 3) -> None:
    """The tuned tasks' kernels in the default and the tuned bundle (alternately, least of
    ``rounds``): microseconds and tuned / default."""
    best: dict[str, dict[str, float]] = {"default": {}, "tuned": {}}
    for _ in range(rounds):
        for which in best:
            for k, ns in _kernel_ns(work / which, runs).items():
                best[which][k] = min(best[which].get(k, math.inf), ns)
    print("\n| kernel | space | x | default us | tuned us | tuned/default |")
    print("|---|---|---:|---:|---:|---:|")
    for t in tasks:
        name = next((k for k in best["default"] if k.endswith(t.name)), None)
        if name is None:
            continue
        d, u = best["default"][name], best["tuned"].get(name, math.nan)
        print(f"| {t.name} | {t.space.kind} | {t.weight} | {d / 1e3:.2f} | {u / 1e3:.2f} | "
              f"{u / d:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())

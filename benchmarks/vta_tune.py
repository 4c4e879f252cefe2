"""Does tuning find accelerator tilings the compiler's search misses? Default vs tuned
cycles per layer, on the cycle model and on the RTL.

    PYTHONPATH=. python benchmarks/vta_tune.py                       # ResNet-8, RTL on all
    PYTHONPATH=. python benchmarks/vta_tune.py --models resnet8,ds_cnn --rtl top
    PYTHONPATH=. python benchmarks/vta_tune.py --rtl none --power-of-two-scales

Each zoo model is quantized by Kiln's PTQ (``kiln_qdq``, or ``--power-of-two-scales``: the
layers requantize on the accelerator) and its accelerator layers are extracted as
``kiln tune --target vta`` extracts them (:func:`toolchain.autotune.vta.extract_vta_tasks`).
Every valid point of each layer's tiling space is compiled and costed on the cycle model
(exhaustive: the spaces hold 6-900 points), and with ``--rtl all`` also run on the Verilog
RTL (Verilator, through the C driver; every run's output checked against the C simulator),
``--rtl top`` only the default and the model's 8 best points. Per layer it prints the
default (the compiler's search) and the best point on each, the ratios default/best, the
RTL cycles of the model's best point, and the rank correlation of the model with the RTL
over the space (the plain model: what the compiler's search uses); with ``--rtl all`` also
how well the model plus ``k`` cycles per instruction ranks the points on the RTL. Then
``kiln tune``'s loop on its model runner (the model plus ``INSN_CYCLES`` an instruction) at
the ``--trials`` budgets (the share of the runner's exhaustive gain it reaches; with
``--rtl all`` also on the RTL at ``--rtl-trials``), the compile time of the model with and
without records (the records skip the per-layer search: CPU seconds, min of ``--repeat``),
and the bundles compiled with the best records of the plain model, the model runner and
the RTL: their outputs must be the default bundle's bit for bit, the default's the integer
reference's (a float softmax within 1e-5), and, with ``--rtl``, the RTL's the C
simulator's (whole-model RTL cycles).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from toolchain.autotune.vta import INSN_CYCLES  # noqa: E402

TOP = 8


def quantized_model(name: str, pow2: bool):
    from toolchain.quantize.ptq import quantize_model
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import calibration, kiln_qdq

    spec = ZOO[name]
    model = spec.build()
    q = quantize_model(model, calibration(model), power_of_two_scales=True)[0] if pow2 \
        else kiln_qdq(model)
    return q, spec.input_shapes


def measure_space(task, rtl: str) -> dict:
    """Every valid point's model cycles (and RTL cycles per ``rtl``)."""
    from toolchain.autotune.measure import BuildInput
    from toolchain.autotune.vta import RtlRunner, VtaBuilder

    s = task.space
    points = s.valid_points()
    builder = VtaBuilder(images=rtl != "none")
    model, rtl_cost, insns, errors = {}, {}, {}, []
    runner = RtlRunner() if rtl != "none" else None
    built = {}
    for p in points:
        b = builder.build_one(BuildInput(task.node, task.target, s.workload, s.trace(p)))
        if b.error is not None:
            errors.append(b.error)
            continue
        model[s.key(p)] = (b.extra["cycles"], p)     # the plain model (the compiler's)
        insns[s.key(p)] = b.extra["insns"]
        if rtl == "all":
            rr = runner.run([b])[0]
            if rr.costs is None:
                errors.append(rr.error)
            else:
                rtl_cost[s.key(p)] = rr.costs[0]
        elif rtl == "top":
            built[s.key(p)] = b
    dkey = s.key(s.default())
    if rtl == "top":
        ranked = sorted(model, key=lambda k: model[k][0])[:TOP]
        for k in {*ranked, dkey}:
            rr = runner.run([built[k]])[0]
            if rr.costs is None:
                errors.append(rr.error)
            else:
                rtl_cost[k] = rr.costs[0]
    return {"model": model, "rtl": rtl_cost, "errors": errors, "default": dkey,
            "points": len(points), "insns": insns}


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation (ties broken by order)."""
    if len(a) < 3:
        return math.nan
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def layer_table(tasks, results, rtl: str) -> tuple[dict, dict]:
    """Print one row per layer; the model's and the RTL's best traces by workload."""
    head = ("| layer | x | points | default tiling | model: default | best | default/best "
            "| RTL: default | RTL of model best | RTL best | default/best | rank corr |")
    print(head)
    print("|" + " --- |" * 12)
    best_model, best_rtl, notes = {}, {}, []
    tot = dict.fromkeys(("md", "mb", "rd", "rm", "rb"), 0.0)
    for t in tasks:
        res = results[t.space.workload]
        m, r, dk = res["model"], res["rtl"], res["default"]
        mk = min(m, key=lambda k: (m[k][0], k != dk))  # the default wins ties
        best_model[t.space.workload] = t.space.trace(m[mk][1])
        d = t.space.default()
        tiling = " ".join(f"{v}" for v in d.values())
        row = [t.name, t.weight, res["points"], tiling, f"{m[dk][0]:,.0f}", f"{m[mk][0]:,.0f}",
               f"{m[dk][0] / m[mk][0]:.3f}"]
        tot["md"] += t.weight * m[dk][0]
        tot["mb"] += t.weight * m[mk][0]
        if r and dk in r:
            rk = min(r, key=lambda k: (r[k], k != dk))
            best_rtl[t.space.workload] = t.space.trace(m[rk][1])
            both = [k for k in r if k in m]
            row += [f"{r[dk]:,.0f}", f"{r[mk]:,.0f}" if mk in r else "",
                    f"{r[rk]:,.0f}", f"{r[dk] / r[rk]:.3f}",
                    f"{spearman([m[k][0] for k in both], [r[k] for k in both]):.2f}"
                    if rtl == "all" else ""]
            tot["rd"] += t.weight * r[dk]
            tot["rm"] += t.weight * r.get(mk, math.nan)
            tot["rb"] += t.weight * r[rk]
        else:
            row += [""] * 5
        print("| " + " | ".join(str(x) for x in row) + " |")
        notes.append(f"  {t.name}: model best {' '.join(map(str, m[mk][1].values()))}"
                     + (f", RTL best {' '.join(map(str, m[rk][1].values()))}"
                        if r and dk in r else "")
                     + "".join(f"; failed: {e[:150]}" for e in sorted(set(res["errors"]))[:3]))
    rtl_cols = [f"{tot['rd']:,.0f}", f"{tot['rm']:,.0f}", f"{tot['rb']:,.0f}",
                f"{tot['rd'] / tot['rb']:.3f}", ""] if tot["rb"] else [""] * 5
    print("| total (x weight) | | | | " + " | ".join(
        [f"{tot['md']:,.0f}", f"{tot['mb']:,.0f}", f"{tot['md'] / tot['mb']:.3f}",
         *rtl_cols]) + " |")
    print("\nthe best points (toh/tm toc/tn tic/tk split resident vthreads):")
    print("\n".join(notes))
    return best_model, best_rtl


#: cycles per instruction added to the cycle model in :func:`per_instruction`
EXTRA = (0, 10, 20, 30, 50)


def runner_best(tasks, results) -> dict:
    """The best trace per workload on the model runner (the model plus
    :data:`~toolchain.autotune.vta.INSN_CYCLES` an instruction): what ``kiln tune`` keeps
    with a budget that covers the space."""
    out = {}
    for t in tasks:
        res = results[t.space.workload]
        m, n, dk = res["model"], res["insns"], res["default"]
        k = min(m, key=lambda x: (m[x][0] + INSN_CYCLES * n[x], x != dk))
        out[t.space.workload] = t.space.trace(m[k][1])
    return out


def per_instruction(tasks, results) -> None:
    """How the RTL ranks the points against the cycle model plus ``k`` cycles per
    instruction (what the model leaves out: fetch, issue, token hand-offs): the rank
    correlation per layer and the RTL cycles of each corrected model's best points."""
    print("\ncycle model + k cycles per instruction against the RTL (every point):")
    print("| k | rank corr. min | median | RTL default / RTL of its best points | "
          "RTL default / RTL best |")
    print("| --- | --- | --- | --- | --- |")
    for k in EXTRA:
        cors, d_tot, pick_tot, best_tot = [], 0.0, 0.0, 0.0
        for t in tasks:
            res = results[t.space.workload]
            m, r, n, dk = res["model"], res["rtl"], res["insns"], res["default"]
            keys = [x for x in r if x in m]
            adj = {x: m[x][0] + k * n[x] for x in keys}
            cors.append(spearman([adj[x] for x in keys], [r[x] for x in keys]))
            pick = min(keys, key=lambda x: (adj[x], x != dk))
            d_tot += t.weight * r[dk]
            pick_tot += t.weight * r[pick]
            best_tot += t.weight * min(r.values())
        ok = [c for c in cors if not math.isnan(c)]
        print(f"| {k} | {min(ok):.2f} | {float(np.median(ok)):.2f} | "
              f"{d_tot / pick_tot:.3f} | {d_tot / best_tot:.3f} |")


def tuner_share(tasks, trials: int, results, on: str) -> None:
    """kiln tune's loop on the cycle model (``on="model"``) or the RTL (``"rtl"``): the
    share of the exhaustive gain it reaches."""
    from toolchain.autotune.tuner import tune_tasks
    from toolchain.autotune.vta import vta_measurement

    builder, runner = vta_measurement(on)
    states = tune_tasks(tasks, trials, builder=builder, runner=runner, seed=0,
                        progress=False)
    gain = best = 0.0
    for t, st in zip(tasks, states, strict=True):
        res = results[t.space.workload]
        costs = [c + INSN_CYCLES * res["insns"][k] for k, (c, _) in res["model"].items()] \
            if on == "model" else list(res["rtl"].values())
        d, opt = st.default_cost, min(costs)
        gain += t.weight * (d - opt)
        best += t.weight * (d - st.best)
    share = f"{best / gain:.0%} of the exhaustive gain" if gain > 0 else \
        "no gain to find (the default is the optimum everywhere)"
    where = f"the model runner (+{INSN_CYCLES}/insn)" if on == "model" else "the RTL"
    print(f"kiln tune's loop (xgb), {trials} trials on {where}: {share}")


def compile_seconds(model, shapes, records: dict | None, repeat: int) -> float:
    from toolchain.autotune.apply import applying
    from toolchain.bundle import build_spec

    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        if records is None:
            build_spec(model, "vta", input_shapes=shapes, progress=False)
        else:
            with applying(records):
                build_spec(model, "vta", input_shapes=shapes, progress=False)
        best = min(best, time.process_time() - t0)
    return best


def bundle_check(name: str, model, records: dict | None, rtl: bool
                 ) -> tuple[dict, int | None]:
    """Compile with ``records``, run on the C simulator (and on the RTL, which must give the
    same bytes): the outputs and the whole model's RTL cycles (or None)."""
    import toolchain
    from toolchain.autotune.apply import applying
    from toolchain.frontend.onnx import from_onnx

    out = Path(tempfile.mkdtemp(prefix=f"kiln-vta-tune-{name}-")) / "bundle"
    if records is None:
        pkg = toolchain.compile(model, "vta", out)
    else:
        with applying(records):
            pkg = toolchain.compile(model, "vta", out)
    rng = np.random.default_rng(11)
    x = {v.name: rng.standard_normal(v.shape).astype(np.float32)
         for v in from_onnx(model).inputs}
    got = toolchain.run(pkg, x).outputs
    if not rtl:
        return got, None
    on_rtl = toolchain.run(pkg, x, device="rtl")
    for k in got:
        if not np.array_equal(on_rtl.outputs[k], got[k]):
            raise SystemExit(f"{name}: output {k} on the RTL differs from the simulator's")
    return got, sum(int(r["cycles"]) for r in on_rtl.accelerator)


def reference_check(name: str, model, got: dict) -> str:
    """The default bundle against Kiln's integer reference: which outputs are bit-exact
    (the int8 path, dequantized), and how far the float ones (a softmax on the host) are."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph

    graph = from_onnx(model)
    rng = np.random.default_rng(11)
    x = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    want = run_graph(quantize_ops(graph), x)
    words = []
    for k in want:
        diff = float(np.max(np.abs(got[k].astype(np.float64) - want[k])))
        if diff and not np.allclose(got[k], want[k], rtol=1e-5, atol=1e-7):
            raise SystemExit(f"{name}: output {k} is {diff:.3g} from the integer reference")
        words.append(f"{k} " + ("bit-exact" if diff == 0 else f"within {diff:.1e}"))
    return ", ".join(words)


def run_model(name: str, args: argparse.Namespace) -> None:
    from toolchain.autotune.vta import extract_vta_tasks

    model, shapes = quantized_model(name, args.power_of_two_scales)
    tasks = extract_vta_tasks(model, "vta", shapes)
    t0 = time.perf_counter()
    results = {t.space.workload: measure_space(t, args.rtl) for t in tasks}
    n = sum(r["points"] for r in results.values())
    print(f"\n{name} int8{' (power-of-two scales)' if args.power_of_two_scales else ''} on "
          f"vta: {len(tasks)} tasks, {n} points measured exhaustively on the cycle model"
          f"{' and the RTL' if args.rtl == 'all' else ''} in {time.perf_counter() - t0:.0f} s"
          f" (cycles; the default tiling as toh/tm toc/tn tic/tk split resident vthreads)\n")
    best_model, best_rtl = layer_table(tasks, results, args.rtl)
    if args.rtl == "all":
        per_instruction(tasks, results)
    print()
    for trials in (int(x) for x in args.trials.split(",") if int(x) > 0):
        tuner_share(tasks, trials, results, "model")
    for trials in (int(x) for x in args.rtl_trials.split(",") if int(x) > 0):
        if args.rtl == "all":
            tuner_share(tasks, trials, results, "rtl")
    plain = compile_seconds(model, shapes, None, args.repeat)
    tuned = compile_seconds(model, shapes, best_model, args.repeat)
    print(f"\ncompile (build_spec, CPU s, min of {args.repeat}): {plain:.2f} without records, "
          f"{tuned:.2f} with the model's best records ({plain - tuned:.2f} s of per-layer "
          f"search saved, {plain / tuned:.2f}x)")
    rtl = args.rtl != "none"
    cyc, outs = {}, {}
    for label, recs in (("default", None), ("model-best records", best_model),
                        (f"model-runner-best records (+{INSN_CYCLES}/insn)",
                         runner_best(tasks, results)),
                        ("RTL-best records", best_rtl or None)):
        if label != "default" and recs is None:
            continue
        outs[label], cyc[label] = bundle_check(name, model, recs, rtl)
        same = all(np.array_equal(outs[label][k], outs["default"][k]) for k in outs[label])
        if not same:
            raise SystemExit(f"{name}: the bundle with {label} computes other outputs")
        print(f"bundle with {label}: "
              + (reference_check(name, model, outs[label]) + " against the integer "
                 "reference on the C simulator" if label == "default" else
                 "the default bundle's outputs bit for bit")
              + (f"; the RTL's too; {cyc[label]:,} RTL cycles in its accelerator layers"
                 if rtl else ""))
    if rtl:
        base = cyc["default"]
        print("  whole model on the RTL, default / tuned: " + ", ".join(
            f"{k} {base / v:.3f}" for k, v in cyc.items() if k != "default"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet8", help="comma-separated zoo names")
    ap.add_argument("--rtl", choices=("all", "top", "none"), default="all",
                    help="all: every point on the RTL too; top: the default and the model's "
                         f"{TOP} best; none: the cycle model only")
    ap.add_argument("--trials", default="64,200",
                    help="kiln tune's budgets for the model on the cycle model, comma-"
                         "separated (0: skip)")
    ap.add_argument("--rtl-trials", default="200",
                    help="with --rtl all: kiln tune's budgets on the RTL (0: skip)")
    ap.add_argument("--repeat", type=int, default=3, help="compile timings (min of)")
    ap.add_argument("--power-of-two-scales", action="store_true",
                    help="quantize with power-of-two scales (requantization on the "
                         "accelerator, residual adds too)")
    args = ap.parse_args(argv)
    if args.rtl != "none":
        from toolchain.autotune.vta import rtl_missing

        why = rtl_missing()
        if why:
            print(f"{why}; measuring on the cycle model only", file=sys.stderr)
            args.rtl = "none"
    for name in args.models.split(","):
        run_model(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The C compiler's time and the kernels' speed with and without Kiln's loop flags.

    python benchmarks/cc_flags.py                                   # the zoo, four targets
    python benchmarks/cc_flags.py --models resnet8,mobilenet_v1 --targets host --rounds 5
    python benchmarks/cc_flags.py --models none --ops C2,C6,D768    # the ops cases only
    python benchmarks/cc_flags.py --flags "-fno-loop-unroll-and-jam" # another candidate set

Kiln builds its generated C with GCC's ``-O3`` but turns off the loop transformations that
redo what its schedules already did (:data:`toolchain.runtime.build.LOOP_FLAGS`:
unroll-and-jam and loop distribution; docs/bundle.md). This script
checks that choice against plain ``-O3`` (the reference, measured in the same run):

* every zoo bundle (fp32; ``--int8`` adds the Kiln-quantized MLPerf-Tiny models) for each
  target, ``host`` being the ``c-generic`` bundle with ``-march=native``: ``make -B main``
  in two copies of the bundle, one with ``KILN_LOOP_FLAGS=`` (the Makefile's switch; gcc's
  transformations on) and one with the candidate flags, each round in alternating order; the
  CPU seconds of the build (``make`` and every compiler it ran; min over the first
  ``--cc-rounds``) and the best of ``--repeat`` runs of ``./main --repeat N --threads 1``
  (its own ``kiln-time-ns min``), min over ``--rounds``; the two builds' outputs compared
  byte for byte, and their object code (``kernels.o`` and the model's ``.o``): where gcc
  made the same code both ways, the run-time ratio shows the measurement's noise;
* ``--ops``: cases of ``benchmarks/ops.py`` built by :func:`toolchain.schedules.compile_op`
  (Kiln's host build, :func:`toolchain.build`), the reference with the flags' positive forms
  appended (gcc takes the last), each round in a fresh build cache; best thread CPU time.

The machine's load average is printed before and after: on a shared machine read the
ratios (new / reference), not the seconds; a run-time ratio within a few percent of 1.00
is noise, which repeating the command shows.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

MODELS = ("lenet5", "mlp", "ds_cnn", "resnet8", "mobilenet_v1", "autoencoder", "mobilenet_v2",
          "transformer_encoder", "lstm_classifier", "vit_tiny", "resnet18")
TARGETS = ("c-generic", "x86_64-avx2", "x86_64-avx512", "host")
INT8 = ("ds_cnn", "resnet8", "mobilenet_v1", "autoencoder")


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def positive(flags: list[str]) -> list[str]:
    """``-fno-x`` -> ``-fx``: what plain ``-O3`` does, appended after the ``-fno-`` forms."""
    return [f.replace("-fno-", "-f", 1) for f in flags]


def write_inputs(d: Path, meta: dict, rng: np.random.Generator) -> list[str]:
    """Random inputs of the bundle's shapes and dtypes as raw files; their names."""
    names = []
    for t in meta["inputs"]:
        dt = np.dtype(t["dtype"])
        if dt.kind == "f":
            a = rng.standard_normal(t["shape"]).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(max(info.min, -100), min(info.max, 100) + 1, t["shape"]).astype(dt)
        name = f"in_{t['field']}.bin"
        a.tofile(d / name)
        names.append(name)
    return names


def make_main(d: Path, loop: list[str], native: bool) -> float:
    """``make -B main`` in bundle ``d`` with ``KILN_LOOP_FLAGS`` = ``loop``; its CPU s."""
    args = ["make", "-s", "-B", "main", f"KILN_LOOP_FLAGS={' '.join(loop)}"]
    if native:  # the host build: c-generic's flags and -march=native, as Kiln's host build
        line = next(x for x in (d / "Makefile").read_text().splitlines()
                    if x.startswith("CFLAGS ?="))
        args.append("CFLAGS=" + line.split("?=", 1)[1].strip() + " -march=native")
    t = children_cpu()
    subprocess.run(args, cwd=d, check=True, capture_output=True)
    return children_cpu() - t


def run_main(d: Path, inputs: list[str], outputs: list[str], repeat: int) -> float:
    """Best single-thread run of the model in seconds (``./main --repeat``'s own clock)."""
    res = subprocess.run(["./main", "--repeat", str(repeat), "--threads", "1", *inputs,
                          *outputs], cwd=d, check=True, capture_output=True, text=True)
    m = re.search(r"kiln-time-ns min (\d+)", res.stdout)
    if m is None:
        raise RuntimeError(f"{d}/main printed no time: {res.stdout[-300:]}")
    return int(m.group(1)) * 1e-9


def bench_bundle(model, name: str, target: str, flags: list[str], rounds: int, repeat: int,
                 work: Path, input_shapes, cc_rounds: int) -> dict:
    """Build and time one bundle both ways; a table row."""
    from toolchain.bundle import compile_model

    src = work / f"{name}-{target}"
    compile_model(model, "c-generic" if target == "host" else target, src,
                  input_shapes=input_shapes, name=name.split("-")[0], progress=False)
    import json

    meta = json.loads((src / "metadata.json").read_text())
    inputs = write_inputs(src, meta, np.random.default_rng(0))
    outputs = [f"out_{t['field']}.bin" for t in meta["outputs"]]
    dirs = {"ref": work / f"{name}-{target}-ref", "new": work / f"{name}-{target}-new"}
    for d in dirs.values():
        shutil.copytree(src, d)
    loop = {"ref": [], "new": flags}
    cc = {k: float("inf") for k in dirs}
    rt = dict(cc)
    for r in range(rounds):
        order = ("ref", "new") if r % 2 == 0 else ("new", "ref")
        for k in order if r < cc_rounds else ():
            cc[k] = min(cc[k], make_main(dirs[k], loop[k], target == "host"))
        for k in order:
            rt[k] = min(rt[k], run_main(dirs[k], inputs, outputs, repeat))
    same = all((dirs["ref"] / o).read_bytes() == (dirs["new"] / o).read_bytes()
               for o in outputs)
    code = "same" if all((dirs["ref"] / "build" / o).read_bytes() ==
                         (dirs["new"] / "build" / o).read_bytes()
                         for o in ("kernels.o", f"{meta['model']['name']}.o")) else "differs"
    for d in (src, *dirs.values()):
        shutil.rmtree(d)
    return {"bundle": f"{name}/{target}", "cc": cc, "run": rt, "same": same, "code": code}


def bench_op(case: tuple, target: str, flags: list[str], rounds: int, repeat: int,
             work: Path) -> dict:
    """Build and time one ``benchmarks/ops.py`` case both ways; a table row."""
    from ops import best_time, raw_call

    from toolchain.schedules import compile_op

    rng = np.random.default_rng(0)
    if case[0].startswith("C"):
        _, xs, oc, k, s = case
        w = (rng.standard_normal((oc, xs[1], k, k)) * 0.1).astype(np.float32)
        b = rng.standard_normal(oc).astype(np.float32)
        op_args = ("Conv", [xs, w, b], {"strides": [s, s], "pads": [k // 2] * 4,
                                        "kernel_shape": [k, k]})
    else:
        _, m, kk, n = case
        xs = (m, kk)
        op_args = ("MatMul", [xs, (rng.standard_normal((kk, n)) * 0.1).astype(np.float32)], {})
    x = rng.standard_normal(xs).astype(np.float32)
    extra = {"ref": positive(flags), "new": []}
    cc = {k: float("inf") for k in extra}
    rt = dict(cc)
    outs = {}
    for r in range(rounds):
        os.environ["KILN_CACHE_DIR"] = str(work / f"cache-{case[0]}-{target}-{r}")
        for k in (("ref", "new") if r % 2 == 0 else ("new", "ref")):
            t = children_cpu()
            op = compile_op(op_args[0], target, inputs=op_args[1], attrs=op_args[2],
                            extra_flags=extra[k])
            cc[k] = min(cc[k], children_cpu() - t)
            args = op.bound_args(x)
            op.module(*args)
            outs[k] = args[-1].copy()
            rt[k] = min(rt[k], best_time(raw_call(op.module, args), repeat))
    return {"bundle": f"op {case[0]}/{target}", "cc": cc, "run": rt,
            "same": outs["ref"].tobytes() == outs["new"].tobytes(), "code": "-"}


def print_row(row: dict) -> None:
    cc, rt = row["cc"], row["run"]
    print(f"{row['bundle']:38s} {cc['ref']:7.2f} {cc['new']:7.2f} {cc['new'] / cc['ref']:6.2f}x"
          f" {rt['ref'] * 1e6:10.1f} {rt['new'] * 1e6:10.1f} {rt['new'] / rt['ref']:6.3f}x"
          f"  {'yes' if row['same'] else 'NO':3s}  {row['code']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from ops import CONVS, DENSE, QUICK

    from toolchain.runtime.build import LOOP_FLAGS
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help="zoo models, or 'none'")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--int8", action="store_true", help="also the Kiln-quantized " +
                   ", ".join(INT8))
    p.add_argument("--ops", default="", help="ops.py cases (C1..C12, D512.., 'quick', 'all')")
    p.add_argument("--flags", default=" ".join(LOOP_FLAGS),
                   help="the candidate flags (default: Kiln's LOOP_FLAGS)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=50, help="model runs per round")
    p.add_argument("--cc-rounds", type=int, default=2,
                   help="rounds that build the bundles again (the first ones)")
    args = p.parse_args(argv)
    flags = args.flags.split()
    targets = args.targets.split(",")
    models = [] if args.models == "none" else args.models.split(",")
    print(f"load average {os.getloadavg()[0]:.1f}; candidate: {' '.join(flags)}; "
          f"reference: plain -O3; min of {args.rounds} rounds, runs of {args.repeat}, builds "
          f"in the first {args.cc_rounds}")
    print(f"{'bundle':38s} {'cc ref':>7s} {'cc new':>7s} {'ratio':>7s} {'run ref µs':>10s} "
          f"{'run new µs':>10s} {'ratio':>7s}  same outputs, object code")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in models:
            spec = ZOO[name]
            variants = [(name, spec.build())]
            if args.int8 and name in INT8:
                variants.append((f"{name}-int8", kiln_qdq(variants[0][1])))
            for tag, model in variants:
                for target in targets:
                    rows.append(bench_bundle(model, tag, target, flags, args.rounds,
                                             args.repeat, work, spec.input_shapes,
                                             max(1, min(args.cc_rounds, args.rounds))))
                    print_row(rows[-1])
        cases = {"": [], "quick": sorted(QUICK), "all": [c[0] for c in CONVS + DENSE]}.get(
            args.ops, args.ops.split(","))
        by_name = {c[0]: c for c in CONVS + DENSE}
        for case in cases:
            for target in (t for t in targets if t != "host"):  # compile_op takes descriptors
                rows.append(bench_op(by_name[case], target, flags, args.rounds,
                                     max(3, args.repeat // 10), work))
                print_row(rows[-1])
    if rows:
        ref = sum(r["cc"]["ref"] for r in rows)
        new = sum(r["cc"]["new"] for r in rows)
        ratios = np.array([r["run"]["new"] / r["run"]["ref"] for r in rows])
        twins = [r["run"]["new"] / r["run"]["ref"] for r in rows if r["code"] == "same"]
        print(f"compile CPU s, all rows: {ref:.1f} -> {new:.1f} ({new / ref:.2f}x); run time "
              f"ratio: geometric mean {float(np.exp(np.log(ratios).mean())):.3f}x, range "
              f"{ratios.min():.3f}-{ratios.max():.3f}x; outputs identical in "
              f"{sum(r['same'] for r in rows)} of {len(rows)}; object code identical in "
              f"{len(twins)} bundles" + (f", whose run-time ratios ({min(twins):.3f}-"
                                         f"{max(twins):.3f}x) are this run's noise"
                                         if twins else ""))
    print(f"load average {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M:%S')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

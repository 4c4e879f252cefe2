"""Where ResNet-18's time goes, layer by layer: Kiln's bundles, the tuner and onnxruntime.

    python benchmarks/resnet_layers.py --records r18.jsonl          # records from kiln tune
    python benchmarks/resnet_layers.py --trials 8 --save r18.jsonl  # tune first (8 per task)

For every kernel of the ResNet-18 bundle (x86_64-avx512 unless ``--target``; one thread)
it prints, measured in this run:

* **tuner**: the least cost of the record the tuned bundle applies (the kernel alone,
  built for the host by the tuner and timed in its child process: cold where the records
  were tuned with ``rotate_bytes``, as ``--trials`` and ``tune.py --resnet`` do);
* **tuned**, **default**: the kernel's least time inside the whole bundle, with and
  without the records (``make profile``, ``main_profile --repeat N --threads 1``);
* **ort**: onnxruntime's time for the same node inside its whole-model run
  (``SessionOptions.enable_profiling``, one intra-op thread, least over the runs; its
  node fuses the convolution with its BatchNormalization, Add and Relu as the kernel
  does), matched to the kernel by the convolution's weights (pools and the dense layer by
  their op);

then the whole model's time on both sides (the demo main and ``session.run``, alternately)
and the sums. The ratios to read: ort/tuned (the speed-up per layer in the model),
tuned/tuner (what the bundle loses against the tuner's measurement of the same point).
The machine is shared: the load is printed; read ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import collections
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (benchmarks/models.py: the bundle and onnxruntime timers)
import ops  # noqa: E402  (benchmarks/ops.py: C1-C12)

#: onnxruntime nodes matched by op (the convolutions are matched by their weights)
ORT_BY_OP = {"max_pool": "MaxPool", "global_average_pool": "GlobalAveragePool",
             "dense": "Gemm"}


def kernel_times(bundle: Path, runs: int) -> dict[int, float]:
    """Each kernel's least time in seconds over ``runs`` runs of the whole bundle."""
    meta = json.loads((bundle / "metadata.json").read_text())
    if not (bundle / "main_profile").exists():
        flags = " ".join([models.CFLAGS, *meta["target"]["cflags"]])
        subprocess.run(["make", "-s", "-C", str(bundle), "profile", f"CFLAGS={flags}"],
                       capture_output=True, text=True, check=True)
    args = [str(bundle / f"bench_in_{t['field']}.bin") for t in meta["inputs"]]
    args += [str(bundle / f"bench_out_{t['field']}.bin") for t in meta["outputs"]]
    out = subprocess.run([str(bundle / "main_profile"), "--repeat", str(runs), "--threads",
                          "1", *args], capture_output=True, text=True, check=True).stdout
    return {int(m.group(1)): float(m.group(2)) * 1e-9
            for m in re.finditer(r"kiln-profile (\d+) \S+ (\d+)", out)}


def ort_node_times(model, feeds: dict, runs: int) -> dict[str, tuple[str, float]]:
    """onnxruntime's whole-model run profiled: {node name: (op, least seconds)}."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = str(Path(d) / "ort")
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    best: dict[str, tuple[str, float]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        name, op = e["name"][:-len("_kernel_time")], e["args"].get("op_name", "?")
        t = e["dur"] * 1e-6
        if name not in best or t < best[name][1]:
            best[name] = (op, t)
    return best


def conv_of_ort_node(model, name: str) -> str | None:
    """The weight name of the Conv an onnxruntime node computes (its name is the output
    of the last op it fused: walk back through BatchNormalization and Relu)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    tensor = re.sub(r"_nchwc$", "", name)
    while tensor in producer:
        n = producer[tensor]
        if n.op_type == "Conv":
            return n.input[1]
        if n.op_type not in ("BatchNormalization", "Relu"):
            return None
        tensor = n.input[0]
    return None


def layer_name(workload: str) -> str:
    """C1-C12 (benchmarks/ops.py) for a convolution workload, else the space's kind."""
    parts = workload.split("|")
    if parts[0] != "conv2d":
        return parts[0]
    _, c, h, w = (int(v) for v in parts[2].split("x"))
    o, k, s = int(parts[3][1:]), int(parts[4].split("x")[0][1:]), int(parts[5].split("x")[0][1:])
    for name, xs, oc, kk, ss in ops.CONVS:
        if (xs[1], xs[2], xs[3], oc, kk, ss) == (c, h, w, o, k, s):
            return name
    return "conv"


def kernel_workloads(model, target: str) -> dict[str, str]:
    """{kernel instance name (metadata ``kernel``): its tuning workload}."""
    from toolchain.autotune.tasks import task_of
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes import run_pipeline
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.schedules.generic.fused import anchor_of, bind_constants
    from toolchain.target import resolve_target

    t = resolve_target(target)
    out = {}
    for node in run_pipeline(from_onnx(model), layout_for_target(t)).nodes:
        anchor = anchor_of(node) if node.op == "Fused" else None
        if anchor is None:
            continue
        task = task_of(bind_constants(node, anchor)[0], t)
        if task is not None:
            out[node.attrs.get("kernel", node.name)] = task.space.workload
    return out


def record_costs(path: Path) -> dict[str, float]:
    """{workload: the least cost of its records} (the record a compile applies)."""
    from toolchain.autotune.records import load_records

    best: dict[str, float] = {}
    for r in load_records(path):
        if r.costs:
            best[r.workload] = min(best.get(r.workload, math.inf), min(r.costs))
    return best


def tune(model, spec, target: str, per_task: int, out: Path, jobs: int) -> None:
    from toolchain.autotune.measure import LocalBuilder, LocalRunner
    from toolchain.autotune.records import RecordWriter
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import tune_tasks

    tasks = extract_tasks(model, target, spec.input_shapes)
    builder = LocalBuilder(jobs)
    try:
        with RecordWriter(out) as w, LocalRunner(repeat=3, flush_bytes=0,
                                                 rotate_bytes=64 << 20) as r:
            tune_tasks(tasks, per_task * len(tasks), builder=builder, runner=r, writer=w,
                       progress=False, confirm=4)
    finally:
        builder.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", help="tuning records of ResNet-18 (kiln tune)")
    p.add_argument("--trials", type=int, default=0,
                   help="tune first, this many trials per task (records to --save)")
    p.add_argument("--save", help="where --trials writes its records")
    p.add_argument("--target", default="x86_64-avx512")
    p.add_argument("--runs", type=int, default=20, help="runs per timing")
    p.add_argument("--rounds", type=int, default=2, help="alternate rounds (least kept)")
    p.add_argument("--out", help="folder for the two bundles (default: a temporary one)")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    from toolchain.autotune.apply import applying
    from toolchain.autotune.records import best_traces, load_records
    from toolchain.bundle import compile_model
    from toolchain.zoo import ZOO

    spec = ZOO["resnet18"]
    model = spec.build()
    feeds = spec.inputs(model)
    work = Path(args.out or tempfile.mkdtemp(prefix="kiln-resnet-layers-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.trials:
        rec = Path(args.save or work / "resnet18.jsonl")
        t0 = time.perf_counter()
        tune(model, spec, args.target, args.trials, rec, args.jobs)
        print(f"tuned {args.trials} trials per task in {time.perf_counter() - t0:.0f} s: "
              f"{rec}")
    elif args.records:
        rec = Path(args.records)
    else:
        p.error("give --records R.jsonl or --trials N")
    print(f"CPU: {ops.cpu_model()}; target {args.target}; one thread; load "
          f"{os.getloadavg()[0]:.1f}")
    bundles = {"default": compile_model(model, args.target, work / "default", force=True,
                                        name="resnet18", progress=False)}
    with applying(best_traces(load_records(rec))) as applied:
        bundles["tuned"] = compile_model(model, args.target, work / "tuned", force=True,
                                         name="resnet18", progress=False)
    for b in bundles.values():
        models.build_main(b)
        models.time_kiln(b, feeds, 1)  # writes the input files main_profile reads
    costs = record_costs(rec)
    workloads = kernel_workloads(model, args.target)
    kt: dict[str, dict[int, float]] = {k: {} for k in bundles}
    whole = dict.fromkeys([*bundles, "ort"], math.inf)
    ort_nodes: dict[str, tuple[str, float]] = {}
    for _ in range(args.rounds):  # alternately
        for k, b in bundles.items():
            for i, t in kernel_times(b, args.runs).items():
                kt[k][i] = min(kt[k].get(i, math.inf), t)
            whole[k] = min(whole[k], models.time_kiln(b, feeds, args.runs))
        whole["ort"] = min(whole["ort"], models.time_ort(model, feeds, args.runs))
        for n, (op, t) in ort_node_times(model, feeds, args.runs).items():
            if n not in ort_nodes or t < ort_nodes[n][1]:
                ort_nodes[n] = (op, t)
    report(json.loads((bundles["tuned"] / "metadata.json").read_text()), model, kt, whole,
           ort_nodes, costs, workloads, applied)
    print(f"load {os.getloadavg()[0]:.1f}; bundles in {work}")
    return 0


def _us(x: float | None) -> str:
    return f"{x * 1e6:,.1f}" if x else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def report(meta: dict, model, kt: dict, whole: dict, ort_nodes: dict, costs: dict,
           workloads: dict, applied: dict) -> None:
    by_weight = {}
    for name, (op, t) in ort_nodes.items():
        w = conv_of_ort_node(model, name) if op == "Conv" else None
        by_weight[w or op] = by_weight.get(w or op, 0.0) + t
    used = set()
    print("\n| # | layer | kernel | MFLOP | tuner us | tuned us | default us | ort us | "
          "ort/tuned | tuned/tuner |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    sums = collections.Counter()
    for k in meta["kernels"]:
        i, name = k["index"], k["kernel"]
        wl = workloads.get(name)
        weight = next((x.split(".weight")[0] + ".weight" for x in k["inputs"]
                       if ".weight" in x), None)
        key = weight if weight in by_weight else next(
            (op for frag, op in ORT_BY_OP.items() if frag in name), None)
        o = by_weight.get(key) if key not in used else None
        if o is not None:
            used.add(key)
        tu = costs.get(wl) if wl in applied else None
        t, d = kt["tuned"].get(i, 0.0), kt["default"].get(i, 0.0)  # elided: not run
        sums["tuned"] += t
        sums["default"] += d
        sums["ort"] += o or 0.0
        sums["tuner"] += tu if tu is not None else t
        print(f"| {i} | {layer_name(wl) if wl else '-'} | {' '.join(k['ops'])} | "
              f"{k['flops'] / 1e6:.1f} | {_us(tu)} | {_us(t)} | {_us(d)} | {_us(o)} | "
              f"{_ratio(o, t)} | {_ratio(t, tu)} |")
    rest = sum(t for key, t in by_weight.items() if key not in used)
    sums["ort"] += rest
    print(f"| | onnxruntime's other nodes (reorders, flatten) | | | | | | {rest * 1e6:,.1f} | | |")
    print(f"| | sum | | | {sums['tuner'] * 1e6:,.0f} | {sums['tuned'] * 1e6:,.0f} | "
          f"{sums['default'] * 1e6:,.0f} | {sums['ort'] * 1e6:,.0f} | "
          f"{sums['ort'] / sums['tuned']:.2f} | {sums['tuned'] / sums['tuner']:.2f} |")
    print(f"\n(tuner: the kernels without a record at their bundle time; {len(applied)} "
          "workloads from records)")
    print(f"whole model, least of the runs: tuned {whole['tuned'] * 1e3:.2f} ms, default "
          f"{whole['default'] * 1e3:.2f} ms, onnxruntime {whole['ort'] * 1e3:.2f} ms; "
          f"latency vs onnxruntime: tuned {whole['tuned'] / whole['ort']:.2f}, default "
          f"{whole['default'] / whole['ort']:.2f}; if every tuned kernel ran at the "
          f"tuner's time: {sums['tuner'] / whole['ort']:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())

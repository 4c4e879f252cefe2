"""The LLVM backend vs the C backend (gcc), measured in one run: kernel speed, compile time
per kernel (in-process JIT vs the compiler subprocess), whole-bundle build time, and
ResNet-18 from ONNX to a callable host module, cold.

    python benchmarks/backends.py                         # everything (a few minutes)
    python benchmarks/backends.py --ops-only --repeat 5   # the op table only
    python benchmarks/backends.py --ops-only --phases     # + where the JIT's time goes
    python benchmarks/backends.py --ops-only --variants O1,O2-cg1,min   # LLVM pipelines
    python benchmarks/backends.py --only C2,C6,D768 --models ''
    python benchmarks/backends.py --no-ops --models ds_cnn,resnet8 --no-resnet18
    python benchmarks/backends.py --target x86_64-avx2
    python benchmarks/backends.py --no-ops --models '' --no-resnet18 --boards qemu-mps2-an386

**Ops** (the ResNet-18 convolutions C1-C12 and the dense shapes of ``benchmarks/ops.py``,
then other ops: softmax, erf, sigmoid, layer norm, max pool, transpose), each with its
default schedule, scheduled and lowered once; the same lowered kernel is then built twice
with an empty ``KILN_CACHE_DIR`` (:func:`toolchain.runtime.build_lowered`):

* **C build** -- C text, gcc in a subprocess (``-O3``, the descriptor's ``-march`` and
  flags; ``cc`` as found on the PATH, with ``CCACHE_DISABLE=1`` should that be ccache), dlopen;
* **JIT build** -- LLVM IR through llvmlite, the descriptor's pipeline (``llvm.opt_level``:
  O2 with both vectorizers on the x86 descriptors, else O3) and object emission
  in-process, MCJIT load;

(build time: the wall clock, and the CPU time of this thread plus the processes it ran,
which a machine loaded by other jobs inflates less), and timed: the best thread CPU time
of ``--repeat`` calls (``Module.bind``: no argument
checks in the loop), the two sides alternately for ``--rounds`` rounds. The outputs of the
two builds are compared (``max|diff|``).

**LLVM variants** (``--variants``): the same kernels also built through other LLVM
pipelines than the descriptor's (:func:`parse_variant`: ``O1``, ``O2-cg1``, ``O2-novec``,
``min-cg0``...), each cold build timed in CPU and each kernel timed in the same rounds as
the two builds above; a table gives per variant the build CPU of all the kernels, the
geomean C/JIT build speed-up and the geomean LLVM/C kernel time. ``min`` is not a
pipeline Kiln ships: a handful of cleanup passes and no vectorizer or unroller beyond the
schedule's, the floor of what LLVM's passes can cost (docs/llvm.md, "Build time").

**Models** (``--models``): the zoo model compiled into a bundle with each backend
(``kiln compile``: kernels as C text or as LLVM objects) and built for this host
(:class:`~toolchain.bundle.host.BundleModule`: cc on the C parts), cold; then the best
median latency of ``<model>_run`` through ctypes over ``--rounds`` rounds.

**ResNet-18, cold**: a fresh Python process (imports included), an empty cache: load the
ONNX file, compile with ``--backend llvm`` (and, for reference, ``c``), build the host
module and call it once (wall clock per step; CPU time of the whole child with the
compilers it ran).

**Boards** (``--boards``): zoo models, fp32 and int8 (Kiln's PTQ), built for each board with
each backend and run once under QEMU: instructions per inference, flash, and whether the
two firmwares' outputs are equal bit for bit.

Ratios are LLVM / C for times (below 1: LLVM faster) and C / JIT for the build speed-up.
The goals of issue 15 are printed next to the figures, not asserted: the machine is shared
and noisy, read the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# cold means cold on the C side too: where ccache stands in for cc (a PATH with
# /usr/lib/ccache first), a rerun would find the same C text in ccache's own cache
os.environ["CCACHE_DISABLE"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from ops import CONVS, DENSE, cpu_model  # noqa: E402

F32 = np.float32
#: goals of issue 15 (printed, never asserted)
GOAL_SPEED, GOAL_JIT, GOAL_RESNET18_S = 0.95, 5.0, 10.0


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.1).astype(F32)


def op_cases() -> list[tuple[str, str, list, dict]]:
    """(name, op, inputs, attrs): shape tuples are run-time inputs, arrays constants."""
    rng = np.random.default_rng(0)
    out = []
    for name, xs, oc, k, s in CONVS:
        out.append((name, "Conv", [xs, _w(rng, oc, xs[1], k, k), _w(rng, oc)],
                    {"strides": [s, s], "pads": [k // 2] * 4, "kernel_shape": [k, k]}))
    for name, m, kk, n in DENSE:
        out.append((name, "MatMul", [(m, kk), _w(rng, kk, n)], {}))
    out += [
        ("softmax", "Softmax", [(64, 1000)], {"axis": -1}),
        ("erf", "Erf", [(1024, 1024)], {}),
        ("sigmoid", "Sigmoid", [(1024, 1024)], {}),
        ("layernorm", "LayerNormalization", [(128, 768), _w(rng, 768), _w(rng, 768)],
         {"axis": -1}),
        ("maxpool", "MaxPool", [(1, 64, 112, 112)],
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("transpose", "Transpose", [(512, 768)], {"perm": [1, 0]}),
    ]
    return out


def _best(call, repeat: int) -> float:
    """Best thread CPU time of ``repeat`` calls (after one warm-up call)."""
    call()
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        call()
        best = min(best, time.thread_time() - t)
    return best


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished child processes."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cold(fn, cpu: dict | None = None):
    """``fn()`` with an empty object cache; (result, seconds). ``cpu``: also store there,
    as ``cpu["s"]``, the CPU seconds it took: this thread's and those of the processes it
    ran (the compiler), which a loaded machine inflates less than the wall clock."""
    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("KILN_CACHE_DIR")
        os.environ["KILN_CACHE_DIR"] = d
        try:
            t0, c0 = time.perf_counter(), time.thread_time() + _children_cpu()
            res = fn()
            if cpu is not None:
                cpu["s"] = time.thread_time() + _children_cpu() - c0
            return res, time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("KILN_CACHE_DIR", None)
            else:
                os.environ["KILN_CACHE_DIR"] = old


def warm_up(target) -> None:
    """Build one tiny kernel with each backend (untimed): the one-time costs of a process
    (LLVM's target initialisation, the compiler's version probe) are not charged to the
    first case."""
    from toolchain.runtime import build_lowered
    from toolchain.schedules import make_node, schedule_for
    from toolchain.tir.transform.pipeline import lower

    s = schedule_for(make_node("Relu", [(8,)]), target)
    lowered = lower(s.schedule.mod, target=target)
    for backend in ("c", "llvm"):
        _cold(lambda b=backend: build_lowered(lowered, s.schedule.mod, target, backend=b))


#: ``--variants``: the passes of the ``min`` pipeline (llvmlite's names), in order
MIN_PASSES = ("sroa", "instruction_combine", "simplify_cfg", "loop_rotate", "loop_unroll",
              "sroa", "instruction_combine", "simplify_cfg")


def parse_variant(spec: str) -> dict:
    """An LLVM pipeline variant for ``--variants``: ``O1``/``O2``/``O3`` (LLVM's default
    pipeline at that level, with both vectorizers as Kiln runs it) or ``min``
    (:data:`MIN_PASSES`), then any of ``-cgN`` (the target machine's code-generation level,
    default 3), ``-novec`` / ``-noslp`` (without the loop / SLP vectorizer), ``-nounroll``
    (LLVM's unrollers only where the schedule asked: ``loop_unroll: scheduled``).

    >>> parse_variant("O1-cg2-novec")
    {'name': 'O1-cg2-novec', 'level': 1, 'codegen': 2, 'vec': False, 'slp': True, 'unroll': True}
    """
    head, *flags = spec.split("-")
    if head != "min" and head not in ("O1", "O2", "O3"):
        raise SystemExit(f"--variants: {spec!r} starts with neither O1, O2, O3 nor min")
    out = {"name": spec, "level": None if head == "min" else int(head[1]), "codegen": 3,
           "vec": True, "slp": True, "unroll": True}
    for f in flags:
        if f.startswith("cg") and f[2:] in ("0", "1", "2", "3"):
            out["codegen"] = int(f[2:])
        elif f in ("novec", "noslp", "nounroll"):
            out[{"novec": "vec", "noslp": "slp", "nounroll": "unroll"}[f]] = False
        else:
            raise SystemExit(f"--variants: {spec!r}: unknown part {f!r} (cgN, novec, noslp, "
                             "nounroll)")
    return out


def variant_object(kernel, machine, v: dict) -> bytes:
    """Object code of an :class:`~toolchain.codegen.llvm.LLVMKernel` through the pipeline
    variant ``v`` (:func:`parse_variant`): the steps of
    :func:`toolchain.codegen.llvm_target.optimize` and ``emit_object`` with other knobs."""
    from toolchain.codegen.llvm_target import llvm_binding, quiet_remarks

    llvm = llvm_binding()
    tm = llvm.Target.from_triple(machine.triple).create_target_machine(
        cpu=machine.cpu, features=machine.features, opt=v["codegen"], reloc="pic",
        codemodel="jitdefault", jit=True)
    mod = llvm.parse_assembly(kernel.ir)
    mod.verify()
    for text in kernel.definitions:
        mod.link_in(llvm.parse_assembly(text))
    mod.triple, mod.data_layout = machine.triple, str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=v["level"] or 0)
    pto.loop_vectorization, pto.slp_vectorization = v["vec"], v["slp"]
    pto.loop_unrolling = (machine.loop_unroll == "all" and v["unroll"]) or \
        bool(kernel.definitions)
    pb = llvm.create_pass_builder(tm, pto)
    if v["level"] is None:
        mpm = llvm.create_new_module_pass_manager()
        for name in MIN_PASSES:
            getattr(mpm, f"add_{name}_pass")()
    else:
        mpm = pb.getModulePassManager()
    with quiet_remarks():
        mpm.run(mod, pb)
        return bytes(tm.emit_object(mod))


def variant_build(lowered, func, target, v: dict):
    """A cold in-process build of ``lowered`` through the variant ``v``, as
    :func:`toolchain.runtime.jit.jit_build` does it (translate, optimize and emit, write
    the object to the cache folder, load it with MCJIT)."""
    from toolchain.codegen.llvm import LLVMCodegen
    from toolchain.codegen.llvm_target import machine_for
    from toolchain.runtime.cache import cache_dir
    from toolchain.runtime.jit import JITModule

    machine = machine_for(target)
    k = LLVMCodegen(machine).generate(lowered)
    obj = variant_object(k, machine, v)
    path = cache_dir() / f"{k.entry}-{v['name']}.o"
    path.write_bytes(obj)
    return JITModule(obj, path, k.entry, func, k.ir, k.extra_args, {"backend": "llvm"},
                     machine)


def bench_op(case: tuple, target, repeat: int, rounds: int, phases: bool = False,
             variants: tuple[dict, ...] = ()) -> dict:
    """Schedule + lower once, build with each backend (cold), time both kernels;
    ``phases``: also the JIT's phases (:func:`jit_phases`); ``variants``: also build and
    time the kernel through these LLVM pipelines (:func:`parse_variant`)."""
    from toolchain.runtime import build_lowered
    from toolchain.schedules import make_node, schedule_for
    from toolchain.tir.transform.pipeline import lower

    name, op, inputs, attrs = case
    t0 = time.perf_counter()
    s = schedule_for(make_node(op, inputs, attrs), target)
    func = s.schedule.mod
    lowered = lower(func, target=target)
    front = time.perf_counter() - t0
    mods, build_s, cpu_s = {}, {}, {}
    for backend in ("c", "llvm"):
        cpu: dict = {}
        mods[backend], build_s[backend] = _cold(lambda b=backend: build_lowered(
            lowered, func, target, extra_flags=target.cflags, backend=b), cpu)
        cpu_s[backend] = cpu["s"]
    for v in variants:
        cpu = {}
        mods[v["name"]], _ = _cold(lambda v=v: variant_build(lowered, func, target, v), cpu)
        cpu_s[v["name"]] = cpu["s"]
    rng = np.random.default_rng(1)
    feeds = iter([rng.standard_normal(x).astype(F32) for x in inputs if isinstance(x, tuple)])
    ins = [v.data if v.data is not None else next(feeds) for v in s.input_values]
    args = {b: [*ins, *[np.empty(v.shape or (1,), np.dtype(v.dtype))
                        for v in s.output_values]] for b in mods}
    calls = {b: mods[b].bind(*args[b]) for b in mods}
    for c in calls.values():
        c()
    n_out = len(s.output_values)
    diffs = {b: max(float(np.abs(x - y).max()) for x, y in zip(
        args["c"][-n_out:], args[b][-n_out:], strict=True)) for b in mods if b != "c"}
    diff = diffs["llvm"]
    best = {b: float("inf") for b in mods}
    for _ in range(rounds):  # alternate: the machine's load hits both sides alike
        for b in mods:
            best[b] = min(best[b], _best(calls[b], repeat))
    return {"case": name, "front_s": front, "c_build_s": build_s["c"],
            "jit_build_s": build_s["llvm"], "c_build_cpu_s": cpu_s["c"],
            "jit_build_cpu_s": cpu_s["llvm"], "c_s": best["c"], "llvm_s": best["llvm"],
            "max_diff": diff, **(jit_phases(lowered, target) if phases else {}),
            "variants": {v["name"]: {"cpu_s": cpu_s[v["name"]], "t_s": best[v["name"]],
                                     "max_diff": diffs[v["name"]]} for v in variants}}


def jit_phases(lowered, target, repeat: int = 3) -> dict[str, float]:
    """Thread CPU seconds of each phase of an in-process build of ``lowered`` (best of
    ``repeat``): translation to LLVM IR text (Python), parse + verify + the optimisation
    pipeline, object emission. The MCJIT load (~1 ms) and the cache write are left out."""
    from toolchain.codegen.llvm import LLVMCodegen
    from toolchain.codegen.llvm_target import machine_for, optimize, quiet_remarks

    machine = machine_for(target)
    best = {"translate_s": float("inf"), "passes_s": float("inf"), "emit_s": float("inf")}
    for _ in range(repeat):
        t0 = time.thread_time()
        k = LLVMCodegen(machine).generate(lowered)
        t1 = time.thread_time()
        mod, tm = optimize(k.ir, machine, jit=True, extra=k.definitions)
        t2 = time.thread_time()
        with quiet_remarks():
            tm.emit_object(mod)
        t3 = time.thread_time()
        for key, v in zip(best, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            best[key] = min(best[key], v)
    return best


def bench_model(name: str, target, repeat: int, rounds: int) -> dict:
    """Whole-bundle build time and latency with each backend; ``NAME:int8``: the zoo model
    quantized by Kiln's PTQ (:func:`toolchain.zoo.quantized.kiln_qdq`)."""
    import toolchain
    from toolchain.bundle.host import BundleModule
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    base, _, precision = name.partition(":")
    spec = ZOO[base]
    model = spec.build()
    feeds = spec.inputs(model)
    if precision == "int8":
        model = kiln_qdq(model)
    row: dict = {"model": name}
    mods = {}
    with tempfile.TemporaryDirectory() as work:
        for backend in ("c", "llvm"):
            def compile_and_build(b=backend):
                t0 = time.perf_counter()
                pkg = toolchain.compile(toolchain.load(model, shape_dict=spec.input_shapes,
                                                       name=base), target,
                                        Path(work) / b, backend=b)
                t1 = time.perf_counter()
                return pkg, t1 - t0, BundleModule(pkg.path), time.perf_counter() - t1
            (pkg, comp, mod, build), total = _cold(compile_and_build)
            mods[backend] = mod
            row[f"{backend}_compile_s"], row[f"{backend}_build_s"] = comp, build
            row[f"{backend}_total_s"] = total
        outs = {b: m(feeds) for b, m in mods.items()}
        row["max_diff"] = max(float(np.abs(outs["c"][k].astype(np.float64) - outs["llvm"][k])
                                    .max()) for k in outs["c"])
        best = {"c": float("inf"), "llvm": float("inf")}
        for _ in range(rounds):
            for b in ("c", "llvm"):
                best[b] = min(best[b], mods[b].time(feeds, repeat)["median"])
        row["c_s"], row["llvm_s"] = best["c"], best["llvm"]
    return row


def bench_board(name: str, precision: str, board: str) -> dict:
    """One zoo model (``int8``: Kiln's PTQ of it) on a board under QEMU, built with each
    backend: executed instructions of one inference, flash, and whether the outputs of the
    two firmwares are equal bit for bit."""
    import onnx

    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    spec = ZOO[name]
    model = spec.build(batch=1) if name == "autoencoder" else spec.build()
    feeds = spec.inputs(model)
    if precision == "int8":
        model = kiln_qdq(model)
    row: dict = {"model": name, "precision": precision, "board": board}
    runs = {}
    with tempfile.TemporaryDirectory() as work:
        onnx.save(model, Path(work) / "m.onnx")
        for b in ("c", "llvm"):
            path, report = compile_board(Path(work) / "m.onnx", board, Path(work) / b,
                                         backend=b)
            runs[b] = run_on_qemu(path, feeds, timeout=300)
            row[f"{b}_instructions"] = runs[b].instructions
            row[f"{b}_flash"] = report["flash"]["total"]
    row["equal"] = all(np.array_equal(runs["c"].outputs[k], runs["llvm"].outputs[k])
                       for k in runs["c"].outputs)
    return row


_COLD_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import numpy as np
import toolchain
from toolchain.bundle.host import BundleModule
path, target, backend, out = sys.argv[1:5]
t_import = time.perf_counter()
pkg = toolchain.compile(toolchain.load(path), target, out, backend=backend)
t_compile = time.perf_counter()
mod = BundleModule(pkg.path)
t_build = time.perf_counter()
feeds = {t["name"]: np.zeros(t["shape"], t["dtype"]) for t in mod.metadata["inputs"]}
mod(feeds)
t_call = time.perf_counter()
import resource
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"import_s": t_import - t0, "compile_s": t_compile - t_import,
                  "build_s": t_build - t_compile, "first_call_s": t_call - t_build,
                  "total_s": t_call - t0,
                  "cpu_s": time.process_time() + kids.ru_utime + kids.ru_stime}))
"""


def resnet18_cold(target: str, backends: tuple[str, ...]) -> dict[str, dict]:
    """ResNet-18 from its ONNX file to a called host module, each backend in a fresh
    process with an empty cache (wall clock of the child, Python start-up excluded)."""
    import onnx

    from toolchain.zoo import ZOO

    out = {}
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "resnet18.onnx"
        onnx.save(ZOO["resnet18"].build(), path)
        for backend in backends:
            cache = Path(work) / f"cache_{backend}"
            cache.mkdir()
            env = dict(os.environ, KILN_CACHE_DIR=str(cache),
                       PYTHONPATH=str(Path(__file__).resolve().parents[1]))
            res = subprocess.run([sys.executable, "-c", _COLD_CHILD, str(path), target,
                                  backend, str(Path(work) / f"b_{backend}")], env=env,
                                 capture_output=True, text=True, check=True)
            out[backend] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def gmean(xs: list[float]) -> float:
    """Geometric mean (nan for an empty list)."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _rule(*widths: int, left: int = 1) -> str:
    """A markdown table rule: the first ``left`` columns left-aligned, the others right."""
    return "|" + "|".join(["-" * (w + 2) for w in widths[:left]] +
                          ["-" * (w + 1) + ":" for w in widths[left:]]) + "|"


def _op_table(rows: list[dict]) -> None:
    print(f"| {'op':<9} | {'C build s':>9} | {'JIT s':>6} | {'C/JIT':>6} | {'CPU C/JIT':>9} | "
          f"{'C us':>9} | {'LLVM us':>9} | {'LLVM/C':>6} | {'max|diff|':>9} |")
    print(_rule(9, 9, 6, 6, 9, 9, 9, 6, 9))
    for r in rows:
        print(f"| {r['case']:<9} | {r['c_build_s']:9.3f} | {r['jit_build_s']:6.3f} | "
              f"{r['c_build_s'] / r['jit_build_s']:6.1f} | "
              f"{r['c_build_cpu_s'] / r['jit_build_cpu_s']:9.1f} | {r['c_s'] * 1e6:9.1f} | "
              f"{r['llvm_s'] * 1e6:9.1f} | {r['llvm_s'] / r['c_s']:6.2f} | "
              f"{r['max_diff']:9.1e} |")


def _phase_table(rows: list[dict]) -> None:
    print(f"| {'op':<9} | {'translate ms':>12} | {'parse+passes ms':>15} | {'emit ms':>7} | "
          f"{'JIT CPU ms':>10} | {'C build CPU ms':>14} |")
    print(_rule(9, 12, 15, 7, 10, 14))
    for r in [*rows, {"case": "total", **{k: sum(x[k] for x in rows) for k in (
            "translate_s", "passes_s", "emit_s", "jit_build_cpu_s", "c_build_cpu_s")}}]:
        print(f"| {r['case']:<9} | {r['translate_s'] * 1e3:12.1f} | {r['passes_s'] * 1e3:15.1f} | "
              f"{r['emit_s'] * 1e3:7.1f} | {r['jit_build_cpu_s'] * 1e3:10.1f} | "
              f"{r['c_build_cpu_s'] * 1e3:14.1f} |")


def _variant_table(rows: list[dict], names: list[str], shipped: str) -> None:
    """Per LLVM pipeline: build CPU over all the kernels, geomean C/JIT build speed-up (CPU),
    geomean LLVM/C kernel time over the layers (C1-C12, dense) and over the other ops."""
    layer = [r for r in rows if r["case"][0] in "CDG"]
    other = [r for r in rows if r not in layer]
    print(f"| {'LLVM pipeline':<22} | {'build CPU s':>11} | {'C/JIT CPU':>9} | "
          f"{'LLVM/C layers':>13} | {'LLVM/C other':>12} | {'max|diff|':>9} |")
    print(_rule(22, 11, 9, 13, 12, 9))
    gcc = sum(r["c_build_cpu_s"] for r in rows)
    print(f"| {'gcc -O3 (subprocess)':<22} | {gcc:11.3f} | {1.0:9.2f} | {1.0:13.3f} | "
          f"{1.0:12.3f} | {'':>9} |")
    cols = [(f"descriptor: {shipped}", lambda r: (
        r["jit_build_cpu_s"], r["llvm_s"], r["max_diff"]))]
    cols += [(n, lambda r, n=n: (r["variants"][n]["cpu_s"], r["variants"][n]["t_s"],
                                 r["variants"][n]["max_diff"])) for n in names]
    for label, get in cols:
        vals = {r["case"]: get(r) for r in rows}
        cpu = sum(v[0] for v in vals.values())
        speedup = gmean([r["c_build_cpu_s"] / vals[r["case"]][0] for r in rows])
        lt = gmean([vals[r["case"]][1] / r["c_s"] for r in layer])
        ot = gmean([vals[r["case"]][1] / r["c_s"] for r in other])
        diff = max(v[2] for v in vals.values())
        print(f"| {label:<22} | {cpu:11.3f} | {speedup:9.2f} | {lt:13.3f} | {ot:12.3f} | "
              f"{diff:9.1e} |")


def _model_table(rows: list[dict]) -> None:
    print(f"| {'model':<20} | {'C compile+build s':>17} | {'LLVM compile+build s':>20} | "
          f"{'LLVM/C':>6} | {'C us':>8} | {'LLVM us':>8} | {'LLVM/C':>6} | {'max|diff|':>9} |")
    print(_rule(20, 17, 20, 6, 8, 8, 6, 9))
    for r in rows:
        c = f"{r['c_compile_s']:.2f} + {r['c_build_s']:.2f}"
        llvm = f"{r['llvm_compile_s']:.2f} + {r['llvm_build_s']:.2f}"
        print(f"| {r['model']:<20} | {c:>17} | {llvm:>20} | "
              f"{r['llvm_total_s'] / r['c_total_s']:6.2f} | {r['c_s'] * 1e6:8.1f} | "
              f"{r['llvm_s'] * 1e6:8.1f} | {r['llvm_s'] / r['c_s']:6.2f} | "
              f"{r['max_diff']:9.1e} |")


def _board_table(rows: list[dict]) -> None:
    print(f"| {'model':<13} | {'prec':<4} | {'C instructions':>14} | {'LLVM instructions':>17} | "
          f"{'LLVM/C':>6} | {'C flash':>8} | {'LLVM flash':>10} | {'outputs':>9} |")
    print(_rule(13, 4, 14, 17, 6, 8, 10, 9, left=2))
    for r in rows:
        ratio = r["llvm_instructions"] / r["c_instructions"]
        same = "bit-exact" if r["equal"] else "DIFFER"
        print(f"| {r['model']:<13} | {r['precision']:<4} | {r['c_instructions']:>14,} | "
              f"{r['llvm_instructions']:>17,} | {ratio:6.2f} | {r['c_flash']:>8,} | "
              f"{r['llvm_flash']:>10,} | {same:>9} |")


def main(argv: list[str] | None = None) -> int:
    from toolchain.target import host_target, load_target

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=None,
                   help="target descriptor (default: the widest this host runs)")
    p.add_argument("--repeat", type=int, default=10, help="calls per timing (best of)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds per side")
    p.add_argument("--only", help="comma-separated op cases (C1..C12, D512, D1024, D768, "
                                  "G1024, softmax, erf, sigmoid, layernorm, maxpool, transpose)")
    p.add_argument("--convs-only", action="store_true", help="ops: C1-C12 and dense only")
    p.add_argument("--no-ops", action="store_true", help="skip the op table")
    p.add_argument("--phases", action="store_true", help="ops: also the JIT's phases in "
                   "thread CPU time (translation, parse + passes, emission; best of 3)")
    p.add_argument("--ops-only", action="store_true", help="only the op table")
    p.add_argument("--variants", default="", help="ops: also build and time every kernel "
                   "through these LLVM pipelines (comma-separated: O1, O2-cg1, O2-novec, "
                   "min-cg0, ...; see parse_variant) and print a table of them")
    p.add_argument("--models", default="lenet5,ds_cnn,resnet8,mobilenet_v1,mobilenet_v2,"
                   "transformer_encoder,ds_cnn:int8,resnet8:int8",
                   help="zoo models as whole bundles (comma-separated, NAME:int8 for Kiln's "
                        "int8 quantization of one; empty: none)")
    p.add_argument("--no-resnet18", action="store_true", help="skip the cold ResNet-18 figure")
    p.add_argument("--boards", default="", help="also run zoo models on these boards under "
                   "QEMU with each backend (e.g. qemu-mps2-an386; needs the Arm tools)")
    p.add_argument("--board-models", default="lenet5:fp32,ds_cnn:fp32,resnet8:fp32,"
                   "ds_cnn:int8,resnet8:int8,mobilenet_v1:int8,autoencoder:int8",
                   help="MODEL:PRECISION pairs for --boards")
    p.add_argument("--json", help="also write every row to this JSON file")
    args = p.parse_args(argv)
    target = load_target(args.target) if args.target else host_target()
    if not args.target:
        from dataclasses import replace

        target = replace(target, cores=1)  # one thread on both sides
    print(f"CPU: {cpu_model()}; target {target.name}; one thread; times: best thread CPU "
          f"time of {args.repeat} calls x {args.rounds} rounds")
    report: dict = {"cpu": cpu_model(), "target": target.name}
    speed: list[float] = []
    if not args.no_ops:
        cases = op_cases()
        if args.only:
            want = set(args.only.split(","))
            cases = [c for c in cases if c[0] in want]
        elif args.convs_only:
            cases = [c for c in cases if c[0][0] in "CDG"]
        variants = tuple(parse_variant(v) for v in args.variants.split(",") if v)
        warm_up(target)
        rows = []
        for case in cases:
            rows.append(bench_op(case, target, args.repeat, args.rounds, args.phases,
                                 variants))
        print("\nops: build = one lowered kernel to a callable module, cold; C = gcc "
              "subprocess, JIT = llvmlite in-process")
        _op_table(rows)
        layer = [r for r in rows if r["case"][0] in "CDG"]
        speed += [r["llvm_s"] / r["c_s"] for r in layer]
        other = [r for r in rows if r not in layer]
        print(f"geomean LLVM/C kernel time: C1-C12 + dense {gmean(speed):.2f}"
              + (f", other ops {gmean([r['llvm_s'] / r['c_s'] for r in other]):.2f}"
                 if other else ""))
        jit = gmean([r["c_build_s"] / r["jit_build_s"] for r in rows])
        jit_cpu = gmean([r["c_build_cpu_s"] / r["jit_build_cpu_s"] for r in rows])
        print(f"geomean build speed-up C/JIT: {jit:.1f}x (goal >= {GOAL_JIT:.0f}x); in CPU "
              f"time (this thread + the compiler's processes): {jit_cpu:.1f}x")
        if args.phases:
            print("\nJIT phases, thread CPU (best of 3; the cold build's CPU and gcc's next "
                  "to them):")
            _phase_table(rows)
        if variants:
            from toolchain.codegen.llvm_target import machine_for

            m = machine_for(target)
            print(f"\nLLVM pipelines, {len(rows)} kernels: cold build CPU (this thread), "
                  "geomean C/JIT build speed-up in CPU, geomean LLVM/C kernel time (all "
                  "timed in the same rounds)")
            _variant_table(rows, [v["name"] for v in variants], f"O{m.opt_level}")
        report["ops"] = rows
    names = [n for n in args.models.split(",") if n] if not args.ops_only else []
    if names:
        mrows = [bench_model(n, target, max(args.repeat, 20), args.rounds) for n in names]
        print("\nmodels: bundles, cold; compile = kiln compile, build = host build of the "
              "bundle (cc); us = best median of <model>_run")
        _model_table(mrows)
        zoo = [r["llvm_s"] / r["c_s"] for r in mrows if ":" not in r["model"]]
        int8 = [r["llvm_s"] / r["c_s"] for r in mrows if r["model"].endswith(":int8")]
        for what, ratios in (("fp32", zoo), ("int8", int8)):
            if ratios:
                print(f"geomean LLVM/C latency over {len(ratios)} {what} models: "
                      f"{gmean(ratios):.2f}")
        speed += zoo
        report["models"] = mrows
        if int8:
            print(f"LLVM int8 bundles vs gcc's: {1 / gmean(int8):.2f}x the speed")
    if speed:
        g = gmean(speed)
        print(f"\nLLVM kernel speed vs gcc, geomean over the layers and the fp32 models: "
              f"{1 / g:.2f}x (goal >= {GOAL_SPEED}x)")
    if not (args.ops_only or args.no_resnet18):
        cold = resnet18_cold(target.name, ("llvm", "c"))
        print("\nResNet-18, ONNX file -> called host module, cold (fresh process, empty "
              "cache), seconds:")
        print("| backend | import | compile | host build | first call | total | CPU |")
        print("|---------|-------:|--------:|-----------:|-----------:|------:|----:|")
        for b, r in cold.items():
            print(f"| {b:<7} | {r['import_s']:6.2f} | {r['compile_s']:7.2f} | "
                  f"{r['build_s']:10.2f} | {r['first_call_s']:10.3f} | {r['total_s']:5.2f} | "
                  f"{r['cpu_s']:5.2f} |")
        print("(CPU: seconds of CPU the child and the compilers it ran used, Python's start-up "
              "included; the wall clock exceeds it on a loaded machine)")
        print(f"LLVM total {cold['llvm']['total_s']:.1f} s (goal <= {GOAL_RESNET18_S:.0f} s)")
        report["resnet18_cold"] = cold
    boards = [b for b in args.boards.split(",") if b]
    for board in boards:
        brows = [bench_board(*pair.split(":"), board) for pair in args.board_models.split(",")]
        print(f"\n{board} under QEMU: executed instructions of one inference (-icount), flash "
              "bytes, outputs of the two firmwares compared")
        _board_table(brows)
        report.setdefault("boards", {})[board] = brows
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

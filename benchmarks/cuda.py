"""CUDA bundles on a GPU: correctness against the reference executor, and latency next to
references measured in the same run.

    python benchmarks/cuda.py                  # zoo models + GEMM 1024..4096 (needs a GPU)
    python benchmarks/cuda.py --models lenet5,ds_cnn --gemm 1024
    python benchmarks/cuda.py --models resnet18 --gemm ''    # + PyTorch eager's ResNet-18
    python benchmarks/cuda.py --schedules tiled,generic   # both GPU schedules, one run
    python benchmarks/cuda.py --models lenet5,resnet18 --gemm '' --cuda-graph  # + graph
    python benchmarks/cuda.py --models '' --gemm 4096 --gemm-precision fp16   # tensor cores
    python benchmarks/cuda.py --models resnet18 --gemm '' --per-kernel \
        --schedules tiled,tiled-no-occupancy,generic     # each kernel's GPU ms, side by side
    python benchmarks/cuda.py --models resnet18 --gemm '' --per-kernel --precision fp16 \
        --schedules tiled,tiled-simt-conv  # fp16 convs on tensor cores / SIMT, + cuDNN fp16
    python benchmarks/cuda.py --models '' --gemm '' --gemm-sweep 4096   # its tile variants
    python benchmarks/cuda.py --models resnet18 --gemm 4096 --tune 32  # tuned vs default

* **zoo** — every (non-slow) zoo model compiled for ``--target`` (default ``cuda-sm90``),
  built with nvcc, run on the GPU: the largest error relative to the reference executor's
  output, Kiln's milliseconds per ``<m>_run`` (host inputs in, host outputs back: copies
  included), the kernels alone (``<m>_run_device``), the launches per run, and
  onnxruntime's on this machine's CPU (its GPU provider is not installed where this was
  written, so the column says which it used).
* **GEMM** — ``C = A @ B`` (fp32, both inputs), Kiln's bundle against PyTorch
  (cuBLAS, TF32 off) on the same GPU: both from host arrays to host arrays (the copies
  included), then the kernels alone (Kiln: ``<m>_run_device``, launch and sync included;
  cuBLAS: CUDA events): the kernel ratio Kiln / cuBLAS is what to read.
  ``--gemm-precision fp16``: float16 A, B and C compiled with ``--precision fp16`` (the
  tensor-core kernel where the shapes allow: the ``kernel`` column says ``wmma`` or
  ``simt``), against PyTorch's float16 ``a @ b`` with float32 accumulation; the issue's
  goal is a kernel ratio of at most 1 / 0.7 = 1.43 at n = 4096.

``--gemm-sweep N``: the fp16 tensor-core GEMM ``N``^3 built with the default tiles and
each variant of ``--sweep-tiles`` (:data:`SWEEP`: the kernel's knobs -- warps a block,
fragments a warp, the step ``kf``, double buffer, padding of the shared rows, halves a
thread fetches at once), each one's kernel time and ratio to cuBLAS's fp16 kernel
(measured once, same run); the fastest is the candidate for
:func:`~toolchain.schedules.gpu.tensorcore.choose_wmma_tiles`. The ``kernel ms`` columns
are the GEMM kernel alone: the fp16 models have float16 inputs and output, so there is no
Cast kernel to time with it (the ``kernel`` column says how many launches a run makes: 1;
``kiln ms`` adds the host copies); Kiln's include one launch
and a ``cudaDeviceSynchronize`` each (tens of microseconds: visible at n = 1024, not at
4096), cuBLAS's are back-to-back launches between CUDA events.

``--schedules``: ``tiled`` (the default: the strategy table's tiled GEMM for the
convolution, dense and matmul groups, tiles by the occupancy rule), ``generic`` (those
groups as one thread per output, the schedule before the tiled GEMM existed: the GPU
entries of :data:`toolchain.schedules.gpu.gemm.GEMM_OPS` overridden with
``register_schedule``), ``tiled-no-occupancy`` (the tiled GEMM on a copy of the
descriptor without ``sm_count``: the tiles chosen as before the occupancy rule; zoo
models only), ``tiled-shared-tree`` (the descriptor without ``warp_size``: block
reductions as the shared-memory tree instead of warp shuffles; zoo models only),
``tiled-simt-conv`` (fp16 convolutions kept off tensor cores: the SIMT implicit GEMM), or
several (each model and GEMM size compiled and measured with each, in the same run;
the ``x/tiled`` column is the kernels' time over ``tiled``'s).

``--cuda-graph`` (zoo table): each model also compiled with ``--cuda-graph`` (the launch
sequence captured once into a CUDA graph, one ``cudaGraphLaunch`` a run) and measured in the
same run: its error, host-to-host and kernels-only milliseconds, and the kernels-only ratio
graph / plain (below 1: the graph saves launch overhead).

``--per-kernel`` (with ``--models``): instead of the whole-model table, each model's
profiling build (``-DKILN_PROFILE``: CUDA events around every launch) under each schedule,
one row per bundle kernel: its ops and output shape, per schedule the launch (kind, grid
blocks x threads) and its GPU milliseconds, and the ratio to the first schedule; with
ResNet-18, then cuDNN's time for each of PyTorch eager's convolutions alone.
``--precision fp16``: the models compiled with ``--precision fp16`` (the convolutions on
tensor cores where they apply: kind ``wmma``; ``tiled-simt-conv`` keeps them on the SIMT
implicit GEMM, for the same run's comparison) and cuDNN's convolutions in float16.

``--tune N``: instead of the tables above, the fp16 GEMMs of ``--gemm`` and the models
of ``--models`` tuned on this GPU with ``N`` trials each (:func:`tuned`; ``kiln tune``'s
CUDA builder and GPU runner), then their bundles with the records and without, timed in
the same run next to cuBLAS fp16's GEMM kernel and PyTorch eager's ResNet-18.

Without a GPU it says so and exits 0 (the CUDA bundles are checked on the CPU by the SIMT
emulation in ``tests/bundle/test_cuda.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from toolchain.bundle import compile_model, load_bundle  # noqa: E402
from toolchain.bundle.host import gpu_available  # noqa: E402
from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.reference import run_graph  # noqa: E402
from toolchain.schedules.gpu.tensorcore import WmmaTiles  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402

SCHEDULES = ("tiled", "generic", "tiled-no-occupancy", "tiled-shared-tree", "tiled-simt-conv")


def schedule_target(name: str, target: str) -> Any:
    """The target to compile for under the GPU schedule ``name``: the descriptor itself,
    or for ``tiled-shared-tree`` a variant without ``warp_size`` (block reductions as the
    shared tree, not warp shuffles), or for ``tiled-no-occupancy`` a variant without
    ``sm_count`` (the tiles then ignore the
    occupancy rule of :func:`toolchain.schedules.gpu.gemm.choose_tiles`: the choice before
    the rule existed)."""
    from dataclasses import replace

    from toolchain.target import load_target

    t = load_target(target)
    if name == "tiled-no-occupancy":
        return replace(t, name=f"{t.name}-no-occupancy", sm_count=None)
    if name == "tiled-shared-tree":  # no warp_size: block reductions as the shared tree
        return replace(t, name=f"{t.name}-shared-tree", warp_size=None)
    return t


@contextlib.contextmanager
def schedule(name: str) -> Iterator[None]:
    """Compile under the GPU schedule ``name``: ``tiled`` is the strategy table as it is
    (with ``tiled-no-occupancy``: compile for :func:`schedule_target`); ``generic``
    registers the generic fused schedule for the GEMM ops on ``gpu``; ``tiled-simt-conv``
    the tiled one with float16 convolutions kept off tensor cores (the SIMT implicit GEMM,
    as before they had them)."""
    import functools

    from toolchain.schedules.gpu.gemm import GEMM_OPS, schedule_tiled
    from toolchain.schedules.gpu.generic import fused_schedule
    from toolchain.schedules.registry import register_schedule, unregister_schedule

    if name not in SCHEDULES:
        raise SystemExit(f"--schedules: unknown schedule {name!r} (one of {SCHEDULES})")
    if name in ("generic", "tiled-simt-conv"):
        fn = fused_schedule if name == "generic" else functools.partial(
            schedule_tiled, conv_tensor_cores=False)
        for op in GEMM_OPS:
            register_schedule(op, "gpu")(fn)
    try:
        yield
    finally:
        if name in ("generic", "tiled-simt-conv"):
            for op in GEMM_OPS:
                unregister_schedule(op, "gpu")


def _ms(fn, repeat: int) -> float:
    fn()  # warm up (first run: workspace, weights upload, module load)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def _rel_err(got: dict, want: dict) -> float:
    """The largest absolute difference over the largest magnitude, across the outputs."""
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k])))
               / max(1e-6, float(np.max(np.abs(want[k])))) for k in want)


def zoo(names: list[str], target: str, root: Path, repeat: int,
        schedules: list[str], graph: bool = False) -> None:
    """Per model and schedule: the bundle's largest relative error against the reference
    executor and against onnxruntime (the issue's 1e-4 goal), its host-to-host and
    kernels-only milliseconds, and onnxruntime's on its best provider here; ``graph``: the
    same for the ``--cuda-graph`` bundle, after them."""
    import onnxruntime as ort

    print(f"{'model':26s} {'schedule':>8s} {'max rel err':>12s} {'vs ort':>9s} {'kiln ms':>9s} "
          f"{'kernels ms':>11s} {'launches':>9s} {'x/tiled':>14s} {'ort ms':>9s}  "
          "ort provider" + (f" {'graph err':>10s} {'graph ms':>9s} {'graph kern ms':>14s} "
                             f"{'graph/plain':>12s}" if graph else ""))
    for name in names:
        spec = ZOO[name]
        model = spec.build()
        feeds = spec.inputs(model)
        want = run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)
        sess = ort.InferenceSession(model.SerializeToString(), providers=[
            p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
            if p in ort.get_available_providers()])
        ref = _ms(lambda s=sess, f=feeds: s.run(None, f), repeat)
        theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds),
                          strict=True))
        kernels_of: dict[str, float] = {}
        for sname in schedules:
            with schedule(sname):
                d = compile_model(model, schedule_target(sname, target),
                                  root / f"{name}_{sname}",
                                  input_shapes=spec.input_shapes, progress=False, force=True)
            mod = load_bundle(d)
            got = mod(feeds)
            err, err_ort = _rel_err(got, want), _rel_err(got, theirs)
            kiln = _ms(lambda m=mod, f=feeds: m(f), repeat)
            kernels_of[sname] = 1e3 * mod.device_time(feeds, repeat)
            launches = mod.metadata["device"]["launches"]
            ratio = (f"{kernels_of[sname] / kernels_of['tiled']:14.2f}"
                     if sname != "tiled" and "tiled" in kernels_of else f"{'':14s}")
            extra = ""
            if graph:
                with schedule(sname):
                    g = load_bundle(compile_model(
                        model, schedule_target(sname, target), root / f"{name}_{sname}_graph",
                        input_shapes=spec.input_shapes, progress=False, force=True,
                        cuda_graph=True))
                g_err = _rel_err(g(feeds), want)
                g_ms = _ms(lambda m=g, f=feeds: m(f), repeat)
                g_kernels = 1e3 * g.device_time(feeds, repeat)
                extra = (f" {g_err:10.2e} {g_ms:9.3f} {g_kernels:14.3f} "
                         f"{g_kernels / kernels_of[sname]:12.2f}")
            print(f"{name:26s} {sname:>8s} {err:12.2e} {err_ort:9.2e} {kiln:9.3f} "
                  f"{kernels_of[sname]:11.3f} "
                  f"{launches:9d} {ratio} {ref:9.3f}  {sess.get_providers()[0]}{extra}",
                  flush=True)


def per_kernel(names: list[str], target: str, root: Path, repeat: int,
               schedules: list[str], precision: str = "fp32") -> bool:
    """``--per-kernel``: each model compiled under each schedule and run in its profiling
    build (``-DKILN_PROFILE``: CUDA events around every launch); one row per bundle kernel
    (a fused group: its ops and output shape), per schedule the launch (kind, grid blocks
    x threads a block; ``+n`` more launches) and its milliseconds on the GPU (median of
    ``repeat``), and each schedule's ms over the first one's. A schedule that fails is
    reported and left out of the table (the others still print); False if one did."""
    ok = True
    for name in names:
        spec = ZOO[name]
        model = spec.build()
        feeds = spec.inputs(model)
        rows: dict[str, list[dict]] = {}
        for sname in schedules:
            try:
                with schedule(sname):
                    d = compile_model(model, schedule_target(sname, target),
                                      root / f"{name}_{sname}_profile",
                                      input_shapes=spec.input_shapes, progress=False,
                                      force=True, precision=precision)
                rows[sname] = load_bundle(d, profile=True).launch_times(feeds, repeat)
            except Exception as e:  # noqa: BLE001 - the other schedules still count
                print(f"{name} under {sname}: {type(e).__name__}: {e}", flush=True)
                ok = False
        if not rows:
            continue
        print(f"\n{name} ({precision}): per-kernel GPU ms (CUDA events, median of {repeat}); "
              f"ratios: ms / {next(iter(rows))}'s ms")
        for line in per_kernel_table(rows):
            print(line, flush=True)
    return ok


def _launch_label(r: dict) -> str:
    blocks = int(np.prod([int(g) for g in r["grid"]]))
    return f"{r['kind']} {blocks}x{int(np.prod([int(b) for b in r['block']]))}"


def per_kernel_table(rows: dict[str, list[dict]]) -> list[str]:
    """The lines of the ``--per-kernel`` table from each schedule's
    :meth:`~toolchain.bundle.host.BundleModule.launch_times` rows (keyed by schedule, the
    first one the reference of the ratios): one line per step, then the totals.

    >>> r = {"step": 0, "ops": ["Conv", "Relu"], "shape": [[1, 8, 4, 4]], "kernel": "k0",
    ...      "grid": ["2", "1", "1"], "block": ["64", "1", "1"], "kind": "tiled", "ms": 0.02}
    >>> g = dict(r, kind="simple", grid=["1", "1", "1"], block=["128", "1", "1"], ms=0.01)
    >>> lines = per_kernel_table({"tiled": [r], "generic": [g, dict(g, step=1)]})
    >>> lines[0].split()[:5]
    ['step', 'ops', 'output', 'shape', 'tiled']
    >>> [line.split() for line in lines[1:]]  # doctest: +NORMALIZE_WHITESPACE
    [['0', 'Conv+Relu', '1x8x4x4', 'tiled', '2x64', '0.020', 'simple', '1x128', '0.010', '0.50'],
     ['1', 'Conv+Relu', '1x8x4x4', '-', '-', 'simple', '1x128', '0.010', '-'],
     ['total', '0.020', '0.020', '1.00']]
    """
    names = list(rows)
    steps: dict[int, dict[str, list[dict]]] = {}
    for sname, rs in rows.items():
        for r in rs:
            steps.setdefault(r["step"], {}).setdefault(sname, []).append(r)
    wide = {n: max(16, len(n) + 7) for n in names}  # "<schedule> launch"
    head = f"{'step':>4s}  {'ops':18s}  {'output shape':24s}"
    for i, sname in enumerate(names):
        head += f"  {sname + ' launch':{wide[sname]}s} {'ms':>7s}" + ("  ratio" if i else "")
    out = [head]
    totals = dict.fromkeys(names, 0.0)
    for step in sorted(steps):
        by = steps[step]
        first = next(iter(by.values()))[0]
        line = (f"{step:4d}  {'+'.join(first['ops'])[:18]:18s}  "
                f"{','.join('x'.join(map(str, sh)) for sh in first['shape'])[:24]:24s}")
        base = sum(r["ms"] for r in by[names[0]]) if names[0] in by else None
        for i, sname in enumerate(names):
            rs = by.get(sname)
            if not rs:
                line += f"  {'-':{wide[sname]}s} {'-':>7s}" + (f"  {'-':>5s}" if i else "")
                continue
            ms = sum(r["ms"] for r in rs)
            totals[sname] += ms
            main = next((r for r in rs if r["kind"] != "simple"), rs[0])  # split-K: tiled
            label = _launch_label(main) + (f" +{len(rs) - 1}" if len(rs) > 1 else "")
            line += f"  {label:{wide[sname]}s} {ms:7.3f}"
            if i:
                line += f"  {ms / base:5.2f}" if base else f"  {'-':>5s}"
        out.append(line)
    line = f"{'':4s}  {'total':18s}  {'':24s}"
    for i, sname in enumerate(names):
        line += f"  {'':{wide[sname]}s} {totals[sname]:7.3f}"
        if i:
            line += f"  {totals[sname] / totals[names[0]]:5.2f}" if totals[names[0]] else ""
    out.append(line)
    return out


def _eager_resnet18(what: str) -> tuple[Any, Any] | None:
    """``torch`` and torchvision's ResNet-18 on the GPU in eval mode, fp32 with TF32 off and
    ``cudnn.benchmark`` on; None (saying ``what`` is not measured) without torch."""
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"{what}: not measured ({e.name} is not installed)")
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return torch, torchvision.models.resnet18().cuda().eval()


def torch_resnet18_convolutions(repeat: int, precision: str = "fp32") -> None:
    """``--per-kernel`` with ResNet-18: cuDNN's GPU time for each convolution of PyTorch
    eager's ResNet-18 at batch 1 (torchvision's; fp32, TF32 off, ``cudnn.benchmark``;
    ``precision`` fp16: the network, its weights and input in float16, cuDNN's
    tensor-core convolutions: the reference for Kiln's fp16 rows),
    each on the input it gets in the model, alone (``F.conv2d``, no bias, batch norm or
    activation), ``repeat`` calls queued behind a busy-wait kernel between two CUDA events:
    the per-layer reference for the Kiln table's Conv rows (match them by output shape and
    order; Kiln's rows also carry the bias, activation and residual add)."""
    eager = _eager_resnet18("PyTorch's per-convolution times")
    if eager is None:
        return
    torch, net = eager
    dtype = torch.float16 if precision == "fp16" else torch.float32
    net = net.to(dtype)
    seen: dict[str, tuple] = {}

    def keep(name: str):  # a forward hook that returns something replaces the output
        def hook(_m, args, out) -> None:
            seen.setdefault(name, (args[0], tuple(out.shape)))
        return hook

    hooks = [m.register_forward_hook(keep(name))
             for name, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)]
    wait = getattr(torch.cuda, "_sleep", None)
    print(f"\nresnet18 (PyTorch eager, {precision}): cuDNN ms per convolution (CUDA "
          f"events, mean of {repeat})")
    print(f"{'layer':22s} {'input':>14s} {'output':>14s} {'kernel':>8s} {'cuDNN ms':>9s}")
    total = 0.0
    with torch.no_grad():
        net(torch.randn(1, 3, 224, 224, device="cuda", dtype=dtype))
        for h in hooks:
            h.remove()
        for name, (x, out) in seen.items():
            m = net.get_submodule(name)

            def conv(x=x, m=m):
                return torch.nn.functional.conv2d(x, m.weight, None, m.stride, m.padding)

            conv()  # cudnn.benchmark picks its algorithm
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if wait is not None:
                wait(4_000_000)  # the calls queue behind it: GPU time, not launch latency
            start.record()
            for _ in range(repeat):
                conv()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / repeat
            total += ms
            kh, kw = m.kernel_size
            print(f"{name:22s} {'x'.join(map(str, x.shape)):>14s} "
                  f"{'x'.join(map(str, out)):>14s} {f'{kh}x{kw}/{m.stride[0]}':>8s} "
                  f"{ms:9.4f}", flush=True)
    print(f"{'total':22s} {'':14s} {'':14s} {'':8s} {total:9.4f}", flush=True)


def torch_resnet18(repeat: int) -> tuple[float, float] | None:
    """PyTorch eager's ResNet-18 at batch 1 (torchvision's, the zoo model's architecture;
    fp32, TF32 off, ``cudnn.benchmark``): the reference the issue's ResNet-18 goal names,
    host to host like Kiln's ms and with the input already on the GPU like its kernels."""
    eager = _eager_resnet18("PyTorch eager resnet18")
    if eager is None:
        return None
    torch, net = eager
    xh = torch.randn(1, 3, 224, 224)
    xd = xh.cuda()
    with torch.no_grad():
        host = _ms(lambda: net(xh.cuda()).cpu(), repeat)

        def on_device() -> None:
            net(xd)
            torch.cuda.synchronize()

        device = _ms(on_device, repeat)
    print(f"{'resnet18 (PyTorch eager)':26s} {'':12s} {host:9.3f} {device:11.3f}", flush=True)
    return host, device


#: --gemm-precision -> (ONNX element type of A, B and C, numpy dtype)
GEMM_TYPES = {"fp32": (TensorProto.FLOAT, np.float32), "fp16": (TensorProto.FLOAT16, np.float16)}


def gemm_model(n: int, precision: str = "fp32") -> onnx.ModelProto:
    """``C = A @ B``, ``n x n``; fp16: float16 inputs and output (the bundle then is the one
    GEMM kernel, on tensor cores: no float32 conversions at its API to time with it)."""
    et = GEMM_TYPES[precision][0]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm",
        [helper.make_tensor_value_info(x, et, [n, n]) for x in "AB"],
        [helper.make_tensor_value_info("C", et, [n, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cublas(torch, a: np.ndarray, b: np.ndarray, repeat: int) -> tuple[float, float]:
    """PyTorch's ``a @ b`` (cuBLAS): ms host to host, and ms of the kernel (CUDA events)."""
    host = _ms(lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu(), repeat)
    at, bt = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    at @ bt
    start.record()
    for _ in range(repeat):
        at @ bt
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / repeat


def gemm(sizes: list[int], target: str, root: Path, repeat: int,
         schedules: list[str], precision: str = "fp32") -> None:
    """The GEMM table for ``precision``: fp32 (TF32 off on both sides) or fp16 (float16
    A, B and C; Kiln's tensor-core kernel, float32 sums, against cuBLAS's float16 GEMM
    with float32 accumulation: PyTorch's reduced-precision reduction off)."""
    try:
        import torch
    except ImportError:
        torch = None  # Kiln's columns alone; cuBLAS's read nan
        print("\nPyTorch is not installed: no cuBLAS reference in this run")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    print(f"\n{'GEMM n':>8s} {'prec':>5s} {'schedule':>8s} {'kiln ms':>10s} {'cuBLAS ms':>10s} "
          f"{'kiln kernel ms':>15s} {'cuBLAS kernel ms':>17s} {'kernel ratio':>13s} "
          f"{'kiln TFLOP/s':>13s} {'max rel err':>12s}  kernel")
    rng = np.random.default_rng(0)
    dt = GEMM_TYPES[precision][1]
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        want = a.astype(np.float64) @ b.astype(np.float64)
        try:
            cublas, kernel = _cublas(torch, a, b, repeat) if torch is not None else (np.nan,
                                                                                    np.nan)
        except Exception as e:  # noqa: BLE001 - the Kiln columns still count
            print(f"cuBLAS reference failed for n={n}: {type(e).__name__}: {e}")
            cublas, kernel = np.nan, np.nan
        for sname in schedules:
            t0 = time.perf_counter()
            with schedule(sname):
                d = compile_model(gemm_model(n, precision), target,
                                  root / f"gemm{n}_{precision}_{sname}", progress=False,
                                  force=True, precision=precision)
            kinds = sorted({k.get("schedule", "?") for k in _kernel_kinds(d)})
            mod = load_bundle(d)
            got = mod({"A": a, "B": b})["C"]
            err = float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))
            kiln = _ms(lambda m=mod, x=a, y=b: m({"A": x, "B": y}), repeat)
            kk = 1e3 * mod.device_time({"A": a, "B": b}, repeat)
            print(f"{n:8d} {precision:>5s} {sname:>8s} {kiln:10.3f} {cublas:10.3f} {kk:15.3f} "
                  f"{kernel:17.3f} {kk / kernel:13.2f} {2 * n ** 3 / kk / 1e9:13.2f} "
                  f"{err:12.2e}  {','.join(kinds)}, {mod.metadata['device']['launches']} "
                  f"launch(es) (compile+build "
                  f"{time.perf_counter() - t0:.0f} s)", flush=True)


#: the tensor-core kernel's variants ``--gemm-sweep`` builds (WmmaTiles.label() names), the
#: likeliest first (a step cut short keeps them): the ``.wgmma`` kernel (Hopper's warpgroup
#: MMA, sm_90a: toolchain/schedules/gpu/wgmma.py; first run on an H200 on 2026-11-29) on
#: 128-byte swizzled operand tiles (``.sw128``: warpgroups of 64 x 64, steps of 64; 2 x 2
#: warpgroups waiting over 2, 3 and 4 stages; the overlapped ones computed wrong there and
#: are left out), then on core-matrix shared tiles with each operand its own pad (``p16b8``:
#: A 16 halves, B 8, both operands' fetch stores conflict-free at steps of 32), overlapped
#: over 4 stages and waiting; then overlapped (``.ov1``: a step's products in flight through
#: the barrier and the next step's fetch) with 2 x 2 warpgroups of 64 x 128 over 4 or 3
#: stages (fetches 2 or 1 steps ahead) and 2 x 1 over 4; then, each call waiting for its own
#: products, with 2 x 2 warpgroups of 64 x 128 (128 x 256), the core- matrix slices padded
#: by 8 halves or not, 2 or 3 cp.async stages; 2 x 1 (128 x 128); 1 x 2 (64 x 256) padded by
#: 16; steps of 32; the ``.mma`` kernel (mma.sync on ldmatrix fragments, accumulators in
#: registers, no float32 shared tile: toolchain/schedules/gpu/mma.py) with the default's
#: tiles and 2, 3 (``.s3``) or 4 stages of cp.async operand tiles, 4 warps of 64 x 64, 16
#: warps (128 x 256), steps of 64; the default (wmma) with 3 stages; mma.sync with
#: synchronous fetches; then the kernel as it was first measured (one product call per
#: fragment, no padding, 2-byte fetches); 128 x 128 block tiles in dynamic shared memory
#: (the launcher opts in: up to 227 KiB on sm_90) with 8 warps of 32 x 64 or 64 x 32 or 4
#: warps of 64 x 64, with and without asynchronous fetches (``.async``: cp.async); 128 x 64
#: double-buffered (dynamic) and single-buffered inside the 48 KiB of static shared memory
#: (``sb``); the default's padding + 16-byte fetches with per-fragment calls, its warp-tile
#: calls without padding, and asynchronous; 128 x 256 (16 warps), 256 x 128 (8 warps of 64 x
#: 64) and 128 x 128 with steps of 64
SWEEP = ("8x2w.1x4f.kf4.db.p0.v8.async.sw128.wgmma",
         "8x2w.1x4f.kf4.db.p0.v8.async.s3.sw128.wgmma",
         "8x2w.1x4f.kf4.db.p0.v8.async.s4.sw128.wgmma",
         "8x2w.1x8f.kf2.db.p16b8.v8.async.s4.ov1.wgmma",
         "8x2w.1x8f.kf2.db.p16b8.v8.async.wgmma",
         "8x2w.1x8f.kf2.db.p8.v8.async.s4.ov1.wgmma",
         "8x2w.1x8f.kf2.db.p8.v8.async.s3.ov1.wgmma",
         "8x1w.1x8f.kf2.db.p8.v8.async.s4.ov1.wgmma", "8x2w.1x8f.kf2.db.p8.v8.async.wgmma",
         "8x2w.1x8f.kf2.db.p0.v8.async.wgmma",
         "8x1w.1x8f.kf2.db.p8.v8.async.wgmma", "8x2w.1x8f.kf2.db.p8.v8.async.s3.wgmma",
         "4x2w.1x8f.kf2.db.p16.v8.async.wgmma",
         "4x2w.2x4f.kf2.db.p8.v8.async.mma", "4x2w.2x4f.kf2.db.p8.v8.async.s3.mma",
         "4x2w.2x4f.kf2.db.p8.v8.async.s4.mma", "2x2w.4x4f.kf2.db.p8.v8.async.s3.mma",
         "4x4w.2x4f.kf2.db.p8.v8.async.s3.mma", "4x2w.2x4f.kf4.db.p8.v8.async.s3.mma",
         "4x2w.2x4f.kf2.db.p8.v8.async.s3", "4x2w.2x4f.kf2.db.p8.v8.mma",
         "2x2w.2x2f.kf2.db.p0.v1.frag", "4x2w.2x4f.kf2.db.p8.v8",
         "4x2w.2x4f.kf2.db.p8.v8.async", "2x4w.4x2f.kf2.db.p8.v8", "2x2w.4x4f.kf2.db.p8.v8",
         "2x2w.4x4f.kf2.db.p8.v8.async", "4x2w.2x2f.kf2.db.p8.v8", "4x2w.2x2f.kf2.sb.p8.v8",
         "2x2w.2x2f.kf2.db.p8.v8.frag", "2x2w.2x2f.kf2.db.p0.v8",
         "2x2w.2x2f.kf2.db.p8.v8.async", "4x4w.2x4f.kf2.db.p8.v8.async",
         "4x2w.4x4f.kf2.db.p8.v8.async", "4x2w.2x4f.kf4.db.p8.v8.async")


def parse_tiles(label: str, option: str = "--sweep-tiles") -> WmmaTiles:
    """The inverse of ``WmmaTiles.label()``: ``4x2w.2x2f.kf2.db.p8.v8``; a bad label is a
    ``SystemExit`` naming ``option``, the command-line option it came from."""
    m = re.fullmatch(r"(\d+)x(\d+)w\.(\d+)x(\d+)f\.kf(\d+)\.(db|sb)\.p(\d+)(?:b(\d+))?\.v(\d+)"
                     r"(\.frag)?(\.async)?(?:\.s(\d))?(?:\.ov(\d))?(?:\.sw(\d+))?(\.mma)?(\.wgmma)?",
                     label)
    if m is None:
        raise SystemExit(f"{option}: {label!r} is not a tile label such as "
                         "4x2w.2x2f.kf2.db.p8.v8 (warps, fragments a warp, step, db|sb, "
                         "padding (p16b8: A 16, B 8), fetch width, optional .frag, "
                         ".async, .sN stages, .ovN groups in flight, .sw128 swizzled, .mma, "
                         ".wgmma)")
    wy, wx, fm, fn, kf, db, pad, pad_b, vec, frag, async_copy, stages, flying, swizzle, mma, \
        wgmma = m.groups()
    return WmmaTiles(int(wy), int(wx), int(fm), int(fn), int(kf), db == "db", int(pad),
                     int(vec), frag is None, async_copy is not None, mma is not None,
                     int(stages or 2), wgmma is not None, int(flying or 0),
                     int(pad_b) if pad_b is not None else None, int(swizzle or 0))


def gemm_sweep(n: int, target: str, root: Path, repeat: int, labels: list[str]) -> None:
    """The fp16 tensor-core GEMM ``n``^3 built with each tile variant of ``labels`` (and
    the default tiles first), each one's kernel time next to cuBLAS's fp16 GEMM measured
    once in the same run: which knobs make the kernel fastest on this GPU."""
    from toolchain.schedules.gpu.gemm import wmma_tiles
    from toolchain.schedules.gpu.tensorcore import choose_wmma_tiles, tensor_core_intrinsics
    from toolchain.target import load_target

    try:
        import torch
    except ImportError:
        torch = None
        print("\nPyTorch is not installed: no cuBLAS reference in this run")
    else:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    kernel = _cublas(torch, a, b, repeat)[1] if torch is not None else np.nan
    t = load_target(target)
    default = choose_wmma_tiles(n, n, n, tensor_core_intrinsics(t), t)
    print(f"\nfp16 GEMM {n}^3 tile sweep on {target} (cuBLAS fp16 kernel {kernel:.3f} ms; "
          f"default tiles {default.label() if default else 'none'})")
    print(f"{'tiles':>38s} {'kiln kernel ms':>15s} {'kernel ratio':>13s} {'kiln TFLOP/s':>13s} "
          f"{'max rel err':>12s}  kernel")
    for label in ["default", *labels]:
        t0 = time.perf_counter()
        ctx = wmma_tiles(parse_tiles(label)) if label != "default" else contextlib.nullcontext()
        try:
            with ctx:
                d = compile_model(gemm_model(n, "fp16"), target, root / f"sweep{n}_{label}",
                                  progress=False, force=True, precision="fp16")
            mod = load_bundle(d)
            got = mod({"A": a, "B": b})["C"]
            kk = 1e3 * mod.device_time({"A": a, "B": b}, repeat)
        except Exception as e:  # noqa: BLE001 - one variant failing does not end the sweep
            print(f"{label:>38s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        err = float(np.max(np.abs(got.astype(np.float32) - want)) / np.max(np.abs(want)))
        kinds = ",".join(sorted({k.get("schedule", "?") for k in _kernel_kinds(d)}))
        print(f"{label:>38s} {kk:15.3f} {kk / kernel:13.2f} {2 * n ** 3 / kk / 1e9:13.2f} "
              f"{err:12.2e}  {kinds}, {mod.metadata['device']['launches']} launch(es) "
              f"(compile+build {time.perf_counter() - t0:.0f} s)",
              flush=True)


def tuned(names: list[str], sizes: list[int], target: str, root: Path, repeat: int,
          trials: int, jobs: int) -> None:
    """``--tune N``: the fp16 GEMMs ``sizes`` and the zoo models ``names`` tuned on this
    GPU with ``N`` trials each (``kiln tune``'s builder and runner: nvcc, CUDA events, L2
    flushed), then compiled with their records and without (the default) in one run:
    per task the tuner's default and best kernel times; per case the bundles' kernels ms,
    tuned / default and each against cuBLAS fp16's GEMM kernel or PyTorch eager's
    ResNet-18 (cuDNN), both measured in the same run."""
    import importlib.util

    from toolchain.autotune.apply import applying
    from toolchain.autotune.cuda import CudaBuilder, GpuRunner
    from toolchain.autotune.records import RecordWriter, best_traces, load_records
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import tune_tasks

    # the cost model needs xgboost (the [tune] extra); without it, random search
    strategy = "xgb" if importlib.util.find_spec("xgboost") else "random"
    rng = np.random.default_rng(0)
    cases = [(f"gemm{n}_fp16", gemm_model(n, "fp16"), None) for n in sizes]
    cases += [(name, ZOO[name].build(), ZOO[name].input_shapes) for name in names]
    for label, model, shapes in cases:
        t0 = time.perf_counter()
        tasks = extract_tasks(model, target, shapes)
        print(f"\n{label}: {len(tasks)} tasks ({', '.join(sorted({t.space.kind for t in tasks}))}"
              f"), {trials} trials on {target}, {strategy} search "
              f"({time.perf_counter() - t0:.0f} s to extract)", flush=True)
        out = root / f"{label}.jsonl"
        builder, runner = CudaBuilder(target, "gpu", jobs), GpuRunner(repeat=3, timeout=30)
        try:
            with RecordWriter(out) as w:
                states = tune_tasks(tasks, trials, builder=builder, runner=runner, writer=w,
                                    strategy=strategy, batch=jobs, progress=False)
        finally:
            builder.close()
        print(f"{'task':34s} {'GEMM (y x k w z)':>24s} {'kind':>15s} {'trials':>6s} "
              f"{'failed':>6s} {'default ms':>11s} {'best ms':>9s} {'default/best':>13s}  "
              "best point")
        for st in states:
            failed = sum(not math.isfinite(c) for c in st.costs)
            point = st.space.trace(st.best_point) if st.best_point else "-"
            gemm_shape = re.search(r"\|(y\d+x\d+k\d+\w*)\|", st.space.workload)
            print(f"{st.task.name[:34]:34s} {gemm_shape.group(1) if gemm_shape else '':>24s} "
                  f"{st.space.kind:>15s} {len(st.costs):6d} "
                  f"{failed:6d} {1e3 * st.default_cost:11.4f} {1e3 * st.best:9.4f} "
                  f"{st.default_cost / st.best:13.2f}  {point}", flush=True)
        errors = sorted({r.error for r in load_records(out) if r.error})
        for e in errors[:3]:  # why trials failed (a build error, a launch refused ...)
            print(f"  failed trial: {e[:300]}")
        g = from_onnx(model, input_shapes=shapes)
        feeds = {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in g.inputs}
        ms, outs = {}, {}
        for kind in ("default", "tuned"):
            ctx = applying(best_traces(load_records(out))) if kind == "tuned" else \
                contextlib.nullcontext()
            with ctx:
                d = compile_model(model, target, root / f"{label}_{kind}", input_shapes=shapes,
                                  progress=False, force=True)
            mod = load_bundle(d)
            outs[kind] = mod(feeds)
            ms[kind] = 1e3 * mod.device_time(feeds, repeat)
        diff = _rel_err(outs["tuned"], outs["default"])
        ref, what = np.nan, "PyTorch"
        if label.startswith("gemm"):
            try:
                import torch
            except ImportError:
                print("PyTorch is not installed: no cuBLAS reference")
            else:
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
                ref, what = (_cublas(torch, feeds["A"], feeds["B"], repeat)[1],
                             "cuBLAS fp16 kernel")
        elif label == "resnet18":
            got = torch_resnet18(repeat)
            ref, what = (got[1] if got else np.nan), "PyTorch eager kernels"
        print(f"{label}: kernels ms default {ms['default']:.3f}, tuned {ms['tuned']:.3f} "
              f"(tuned/default {ms['tuned'] / ms['default']:.2f}); {what} {ref:.3f} ms: "
              f"default/ref {ms['default'] / ref:.2f}, tuned/ref {ms['tuned'] / ref:.2f}; "
              f"tuned vs default output {diff:.1e} ({time.perf_counter() - t0:.0f} s)",
              flush=True)


def _kernel_kinds(bundle: Path) -> list[dict]:
    """What the bundle's kernels are (tensor cores or not): a call of a warpgroup product
    (``kiln_wgmma_f16_*``), an ``mma.sync`` product (``kiln_mma_f16_*``) or
    ``nvcuda::wmma`` in its source says whether a tensor-core kernel was chosen, and
    which."""
    src = (bundle / "src" / "kernels.cu").read_text()
    if "kiln_wgmma_f16_" in src:
        return [{"schedule": "wgmma"}]
    if "kiln_mma_f16_" in src:
        return [{"schedule": "mma"}]
    return [{"schedule": "wmma" if "nvcuda::wmma::mma_sync" in src else "simt"}]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cuda-sm90")
    ap.add_argument("--models", default=None, help="comma-separated zoo names")
    ap.add_argument("--gemm", default="1024,2048,4096", help="sizes ('' for none)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--schedules", default="tiled",
                    help="comma-separated GPU schedules to compare: tiled, generic, "
                         "tiled-no-occupancy, tiled-shared-tree")
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                    help="--per-kernel: the models compiled with this --precision (fp16: "
                         "tensor-core convolutions), ResNet-18's cuDNN rows in it too")
    ap.add_argument("--per-kernel", action="store_true",
                    help="for --models: each kernel's GPU ms per schedule (profiling build, "
                         "CUDA events), side by side, instead of the whole-model table")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="zoo table: also each model compiled with --cuda-graph (one graph "
                         "launch a run), its error and times beside the plain bundle's")
    ap.add_argument("--gemm-precision", default="fp32",
                    help="comma-separated: fp32 (TF32 off), fp16 (--precision fp16: tensor "
                         "cores, float32 sums; against cuBLAS fp16)")
    ap.add_argument("--gemm-sweep", type=int, default=0, metavar="N",
                    help="the fp16 tensor-core GEMM N^3 with each tile variant of "
                         "--sweep-tiles (and the default tiles), against cuBLAS fp16")
    ap.add_argument("--sweep-tiles", default=",".join(SWEEP),
                    help="comma-separated tile labels (WmmaTiles.label(): "
                         "4x2w.2x2f.kf2.db.p8.v8 = warps, fragments a warp, step, "
                         "db|sb, padding, fetch width; .frag: a product call a fragment)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="tune --models and the fp16 GEMMs --gemm with N trials each on "
                         "this GPU, then time their bundles tuned and default against "
                         "cuBLAS / PyTorch (instead of the other tables)")
    ap.add_argument("--tune-jobs", type=int, default=8, metavar="N",
                    help="with --tune: nvcc builds in parallel, and trials a batch")
    args = ap.parse_args(argv)
    sweep_labels = [x for x in args.sweep_tiles.split(",") if x]
    for label in sweep_labels:
        parse_tiles(label)
    schedules = [s for s in args.schedules.split(",") if s]
    for s in schedules:
        if s not in SCHEDULES:
            ap.error(f"--schedules: unknown schedule {s!r} (one of {', '.join(SCHEDULES)})")
    if not gpu_available():
        print("no NVIDIA GPU here (nvidia-smi -L): nothing to measure; the CUDA bundles are "
              "checked on the CPU by tests/bundle/test_cuda.py (SIMT emulation)")
        return 0
    precisions = [p for p in args.gemm_precision.split(",") if p]
    for p in precisions:
        if p not in GEMM_TYPES:
            ap.error(f"--gemm-precision: unknown precision {p!r} (one of "
                     f"{', '.join(GEMM_TYPES)})")
    names = [n for n in args.models.split(",") if n] if args.models is not None else \
        [n for n, s in ZOO.items() if not s.slow and n != "fcn_opset11"]
    status = 0
    if args.tune:
        with tempfile.TemporaryDirectory() as tmp:
            tuned(names, [int(s) for s in args.gemm.split(",") if s], args.target, Path(tmp),
                  args.repeat, args.tune, args.tune_jobs)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        if names and args.per_kernel:
            status = 0 if per_kernel(names, args.target, Path(tmp), args.repeat,
                                     schedules, args.precision) else 1
        elif names:
            zoo(names, args.target, Path(tmp), args.repeat, schedules, args.cuda_graph)
        if "resnet18" in names:
            try:
                if args.per_kernel:
                    torch_resnet18_convolutions(args.repeat, args.precision)
                else:
                    torch_resnet18(args.repeat)
            except Exception as e:  # noqa: BLE001 - a reference; Kiln's rows still count
                print(f"PyTorch eager resnet18: failed: {type(e).__name__}: {e}")
        sizes = [int(s) for s in args.gemm.split(",") if s]
        # the occupancy rule leaves GEMMs of 1024 and up as they were (tests/schedules/gpu/
        # test_occupancy.py): no tiled-no-occupancy rows for them
        gemm_schedules = [s for s in schedules  # (tiled-simt-conv: no GEMM differs)
                          if s not in ("tiled-no-occupancy", "tiled-shared-tree",
                                       "tiled-simt-conv")]
        for p in precisions if sizes and gemm_schedules else ():
            gemm(sizes, args.target, Path(tmp), args.repeat, gemm_schedules, p)
        if args.gemm_sweep:
            gemm_sweep(args.gemm_sweep, args.target, Path(tmp), args.repeat, sweep_labels)
    return status


if __name__ == "__main__":
    sys.exit(main())

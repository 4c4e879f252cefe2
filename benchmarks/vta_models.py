"""Whole int8 models compiled for the accelerator, per layer in RTL cycles.

The zoo model (default ``resnet8``, MLPerf Tiny IC) is quantized by Kiln's post-training
quantization (``kiln quantize``: :func:`toolchain.zoo.quantized.kiln_qdq`) and compiled with
``kiln compile --target vta``; the bundle runs once on the C functional simulator and once
on the Verilog RTL (``kiln run --device rtl``: Verilator, the target's DRAM latency and
bandwidth), and both must equal Kiln's integer reference bit for bit on the int8 outputs.
Then, per accelerator layer:

* ``bundle``: the layer's program as the bundle runs it — ``epi`` says where its
  epilogue runs: ``acc`` (bias, rounding shifts and clamp as ALU work, int8 stored; layers
  with power-of-two scales, :mod:`toolchain.vta.requant`) or ``host/N`` (int32
  accumulators stored as N byte planes, as few as its weights allow, requantised on the
  host) — RTL cycles, ``util`` = GEMM cycles / cycles (the GEMM core's occupancy, padded
  channels included: the ``util`` of ``kiln run --device rtl``) and ``MAC rate`` = the
  layer's own MACs / (the target's MACs per cycle, batch x BLOCK_IN x BLOCK_OUT, x cycles)
  (padding not counted: the RGB layer uses 3 of 16 input lanes;
  :func:`toolchain.commands.run_cmd.layer_rates`);
* ``int32``: for a layer whose epilogue runs on the accelerator, the same layer compiled
  the other way (int32 byte planes for the host to requantise, as without power-of-two
  scales) on the same RTL: the accelerator's cycles before and after (a QAdd that runs on
  the accelerator, ``add``, ran on the host before);
* ``int8``: the same convolution compiled with its requantisation on the accelerator
  (``compile_conv2d(..., output="int8")``: SHR/MIN/MAX, one int8 store; ``i2c`` after the
  shape: as the bundle does, an im2col GEMM, ``compile_conv2d_im2col``) — the program the
  hand generator's figures compare with;
* ``hand``: the hand-written generator's latency-hiding program
  (:func:`toolchain.vta.workloads.gemm_workload`) for the layer's im2col GEMM
  (M = OH*OW, K = IC*K*K, N = OC; its im2col input is given for free), on the same RTL;
  ``int8/hand`` < 1: the compiled direct convolution takes fewer cycles.

Every RTL result of the int8 and hand programs is checked against numpy. The last lines say
how much of the model's MACs run on the accelerator, the total cycles, and how the model's
time splits between host and accelerator: the host kernels and the host work inside the
accelerator kernels (packing, staging, unpacking), timed by the bundle's profiling build on
this CPU (``kiln run --split``), against the RTL cycles at ``--accel-mhz``.

    PYTHONPATH=. python benchmarks/vta_models.py                  # resnet8, ~1 minute
    PYTHONPATH=. python benchmarks/vta_models.py --power-of-two-scales --no-hand
    PYTHONPATH=. python benchmarks/vta_models.py --no-hand        # the bundle's table only
    PYTHONPATH=. python benchmarks/vta_models.py --target my_vta.yaml  # another core
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import toolchain  # noqa: E402
from toolchain.bundle.host import BundleModule  # noqa: E402
from toolchain.commands.run_cmd import layer_rates, split_report, time_split  # noqa: E402
from toolchain.errors import ScheduleError  # noqa: E402
from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: E402
from toolchain.graph.reference import run_graph  # noqa: E402
from toolchain.quantize.ptq import quantize_model  # noqa: E402
from toolchain.target import load_target  # noqa: E402
from toolchain.vta import gemm_workload  # noqa: E402
from toolchain.vta.compile import (  # noqa: E402
    compile_conv2d,
    compile_conv2d_im2col,
    compile_dense,
    im2col,
)
from toolchain.vta.config import config_from_target  # noqa: E402
from toolchain.vta.rtl_device import run_rtl_device  # noqa: E402
from toolchain.vta.workloads import expected_conv  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402
from toolchain.zoo.quantized import calibration, kiln_qdq  # noqa: E402


def geometry(node) -> tuple:
    """QConv ``node``'s stride and padding as the compilers take them: one number each where
    the layer is square, else (vertical, horizontal) and (top, left, bottom, right)."""
    st, pads = tuple(int(v) for v in node.attrs["strides"]), tuple(
        int(v) for v in node.attrs["pads"])
    return (st[0] if len(set(st)) == 1 else st), (pads[0] if len(set(pads)) == 1 else pads)


def compare_layer(node, target, cfg, as_im2col: bool) -> dict:
    """The layer's int8 compiled program (a direct convolution, or the im2col GEMM where the
    bundle runs it so) and the hand generator's im2col GEMM on the RTL."""
    w = np.asarray(node.inputs[1].data)
    _, ic, h, wd = node.inputs[0].shape
    stride, pad = geometry(node)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (ic, h, wd), dtype=np.int8)
    shift = 10
    ref = expected_conv(x, w, stride, pad, shift)
    if as_im2col:
        conv = compile_conv2d_im2col(w, h, wd, shift, target, stride=stride, pad=pad,
                                     layer=node.name)
        d_c, c_c = run_rtl_device(conv.program, conv.image(im2col(x, conv.conv)))
        oh, ow = conv.conv.out_hw
        got = conv.read_output(d_c).T.reshape(ref.shape)
    else:
        conv = compile_conv2d(w, h, wd, shift, target, stride=stride, pad=pad, layer=node.name)
        d_c, c_c = run_rtl_device(conv.program, conv.image(x))
        oh, ow = conv.shape.out_hw
        got = conv.read_output(d_c)
    ok = bool((got == ref).all())
    wl = gemm_workload(oh * ow, ic * w.shape[2] * w.shape[3], w.shape[0], cfg, name=node.name)
    d_h, c_h = run_rtl_device(wl.vthread)
    ok = ok and bool((wl.read_output(d_h) == wl.expected).all())
    return {"int8": c_c["cycles"], "int8_gemm": c_c["gemm_cycles"], "hand": c_h["cycles"],
            "hand_gemm": c_h["gemm_cycles"], "ok": ok}


def int32_cycles(node, target, as_im2col: bool) -> int:
    """RTL cycles of ``node`` compiled with int32 output (byte planes for the host to
    requantise), two virtual threads or else one, as the partition compiles it."""
    w = np.asarray(node.inputs[1].data)
    for vthreads in (2, 1):
        try:
            if node.op == "QGemm":
                layer = compile_dense(np.ascontiguousarray(w.T), node.inputs[0].shape[0], 0,
                                      target, vthreads=vthreads, output="int32")
            else:
                _, _, h, wd = node.inputs[0].shape
                stride, pad = geometry(node)
                kw = {"stride": stride, "pad": pad, "vthreads": vthreads, "output": "int32"}
                fn = compile_conv2d_im2col if as_im2col else compile_conv2d
                layer = fn(w, h, wd, 0, target, **kw)
            break
        except ScheduleError:
            continue
    return run_rtl_device(layer.program, layer.program.dram)[1]["cycles"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet8", help="zoo model (default resnet8)")
    ap.add_argument("--no-hand", action="store_true",
                    help="skip the int8 / hand generator comparison")
    ap.add_argument("--target", default="vta",
                    help="accelerator target, a name or a YAML file (default vta)")
    ap.add_argument("--seed", type=int, default=0, help="input seed")
    ap.add_argument("--power-of-two-scales", action="store_true",
                    help="quantize with power-of-two scales (kiln quantize "
                         "--power-of-two-scales): the layers requantize on the accelerator")
    ap.add_argument("--accel-mhz", type=float, default=100.0,
                    help="the accelerator clock of the host/accelerator split (default 100)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="runs of the profiling build that time the host kernels")
    args = ap.parse_args(argv)

    target = load_target(args.target)
    cfg = config_from_target(target)
    model = ZOO[args.model].build()
    q = (quantize_model(model, calibration(model), power_of_two_scales=True)[0]
         if args.power_of_two_scales else kiln_qdq(model))
    graph = quantize_ops(from_onnx(q))
    feeds = {v.name: np.random.default_rng(args.seed).standard_normal(v.shape)
             .astype(np.float32) for v in graph.inputs}
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(q, Path(tmp) / f"{args.model}_int8.onnx")
        t0 = time.perf_counter()
        pkg = toolchain.compile(Path(tmp) / f"{args.model}_int8.onnx", target,
                                output=Path(tmp) / "bundle")
        t_compile = time.perf_counter() - t0
        meta = json.loads((pkg.path / "metadata.json").read_text())
        fsim = toolchain.run(pkg, feeds)
        rtl = toolchain.run(pkg, feeds, device="rtl")
        profiled = BundleModule(pkg.path, device="rtl", profile=True)
        kernels = profiled.kernel_times(feeds, repeat=args.repeat)
        split = time_split(kernels, profiled.accelerator_counters(), args.accel_mhz)
    want = run_graph(graph, feeds)
    exact = {}
    for name, ref in want.items():  # int8-derived outputs bit for bit; a float softmax close
        same = np.array_equal(rtl.outputs[name], ref) and \
            np.array_equal(fsim.outputs[name], rtl.outputs[name])
        exact[name] = "bit-exact" if same else (
            "close" if np.allclose(rtl.outputs[name], ref, rtol=1e-5, atol=1e-7) else "DIFFERS")
    acc = meta["accelerator"]
    print(f"{args.model}: compiled for {target.name} in {t_compile:.1f} s; DRAM latency "
          f"{cfg.latency_cycles} cycles, {cfg.bytes_per_cycle} B/cycle; outputs vs integer "
          f"reference: " + ", ".join(f"{k} {v}" for k, v in exact.items()))
    on = [p for p in acc["placements"] if p["device"] == "accelerator"]
    print(f"{len(on)} of {len(acc['placements'])} nodes on the accelerator "
          f"({', '.join(sorted({p['op'] for p in on}))}); host: "
          + ", ".join(sorted({p["op"] for p in acc["placements"] if p["device"] == "host"})))

    nodes = {n.name + "_vta": n for n in graph.nodes if n.op in ("QConv", "QGemm", "QAdd")}
    flat = {p["node"] + "_vta" for p in acc["placements"] if "im2col GEMM" in p["reason"]}
    epi = {x["node"]: "acc" if x["epilogue"] == "accelerator" else f"host/{x['planes']}"
           for x in acc["layers"]}
    head = (f"{'layer':26} {'shape':24} {'epi':>6} {'bundle cyc':>10} {'util':>6} "
            f"{'MAC rate':>8} {'int32 cyc':>9} {'ratio':>6}"
            + ("" if args.no_hand else f" {'int8 cyc':>9} {'MAC rate':>8} {'hand cyc':>9} "
               f"{'MAC rate':>8} {'int8/hand':>9} {'check':>5}"))
    step = cfg.macs_per_step  # the target's core: batch x BLOCK_IN x BLOCK_OUT
    print()
    print(head)
    print("-" * len(head))
    tot = {"cycles": 0, "macs": 0, "conv_macs": 0, "int8": 0, "hand": 0, "gemm": 0,
           "int32": 0, "gemm_layers": 0}
    total_macs = 0
    for n in graph.nodes:
        if n.op == "QConv":
            total_macs += int(np.prod(n.outputs[0].shape)) * int(np.prod(n.inputs[1].shape[1:]))
        elif n.op == "QGemm":
            total_macs += int(np.prod(n.inputs[0].shape)) * n.inputs[1].shape[0]
    for c in rtl.accelerator:
        node = nodes[c["layer"]]
        w = node.inputs[1].shape
        if node.op == "QAdd":  # not a GEMM layer: its MACs are not the model's
            _, ch, h, wd = node.outputs[0].shape
            macs, shape = 0, f"add {ch} ch {h}x{wd}"
        elif node.op == "QGemm":
            m, k = node.inputs[0].shape
            macs, shape = m * k * w[0], f"dense {m}x{k} by {k}x{w[0]}"
        else:
            oh, ow = node.outputs[0].shape[2:]
            macs = oh * ow * int(np.prod(w))
            sh, sw = node.attrs["strides"]
            stride = f"{sh}" if sh == sw else f"{sh}x{sw}"  # 10x4/2x1: both when they differ
            shape = f"{w[1]}->{w[0]} {w[2]}x{w[3]}/{stride} {oh}x{ow}" + (
                " i2c" if c["layer"] in flat else "")
        rate = layer_rates(macs, c["gemm_cycles"], c["cycles"], step)
        line = (f"{c['layer']:26} {shape:24} {epi[c['layer']]:>6} {c['cycles']:>10,} "
                f"{rate['util']:>6.1%} {rate['MAC rate']:>8.1%}")
        if node.op == "QAdd":  # without the accelerator epilogue it runs on the host
            line += f" {'host':>9} {'':>6}"
        else:
            before = (int32_cycles(node, target, c["layer"] in flat)
                      if epi[c["layer"]] == "acc" else c["cycles"])
            tot["int32"] += before
            tot["gemm_layers"] += c["cycles"]
            line += f" {before:>9,} {c['cycles'] / before:>6.3f}"
        tot["cycles"] += c["cycles"]
        tot["gemm"] += c["gemm_cycles"]
        tot["macs"] += macs
        if not args.no_hand and node.op == "QConv":
            r = compare_layer(node, target, cfg, c["layer"] in flat)
            tot["conv_macs"] += macs
            tot["int8"] += r["int8"]
            tot["hand"] += r["hand"]
            line += (f" {r['int8']:>9,} {layer_rates(macs, 0, r['int8'], step)['MAC rate']:>8.1%}"
                     f" {r['hand']:>9,} {layer_rates(macs, 0, r['hand'], step)['MAC rate']:>8.1%}"
                     f" {r['int8'] / r['hand']:>9.3f} {'ok' if r['ok'] else 'FAIL':>5}")
        print(line)
    print("-" * len(head))
    rate = layer_rates(tot["macs"], tot["gemm"], tot["cycles"], step)
    line = (f"{'total':26} {'':24} {'':6} {tot['cycles']:>10,} "
            f"{rate['util']:>6.1%} {rate['MAC rate']:>8.1%}"
            f" {tot['int32']:>9,} {tot['gemm_layers'] / tot['int32']:>6.3f}")
    if not args.no_hand:
        conv = tot["conv_macs"]
        line += (f" {tot['int8']:>9,} {layer_rates(conv, 0, tot['int8'], step)['MAC rate']:>8.1%}"
                 f" {tot['hand']:>9,} {layer_rates(conv, 0, tot['hand'], step)['MAC rate']:>8.1%}"
                 f" {tot['int8'] / tot['hand']:>9.3f}")
    print(line)
    if tot["gemm_layers"] != tot["cycles"]:
        adds = tot["cycles"] - tot["gemm_layers"]
        print(f"(the ratio of the total: convolutions and matrix products only, "
              f"{tot['gemm_layers']:,} cycles; the adds take {adds:,})")
    print(f"\nMACs on the accelerator: {tot['macs']:,} of the model's {total_macs:,} in its "
          f"convolutions and matrix products ({tot['macs'] / total_macs:.1%}); the int8 and "
          "hand columns cover the convolutions")
    accel = sum("device_ns" in k for k in kernels)
    print()
    print(split_report(split, "rtl", args.accel_mhz, len(kernels) - accel, accel))
    return 0 if all(v != "DIFFERS" for v in exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Latency hiding on the VTA-like accelerator, measured in RTL cycles.

For the ResNet-18 layers C2-C12 of the TVM paper (as int8 GEMMs, toolchain.vta.workloads)
this runs the serial program and the two-virtual-thread program on the Verilog RTL
(Verilator) with the same DRAM latency/bandwidth, and prints per layer: cycles, GEMM
utilization = MACs / (MACs per cycle x cycles) without and with latency hiding, and the
speedup. Every RTL result is compared byte for byte with the functional simulator and with
numpy.

``roof`` is the best utilization any overlap could give: GEMM steps over the larger of the
compute engine's cycles (GEMM steps, plus accumulator resets and requantising ALU ops at two
rows per cycle) and the tile-load cycles at the DRAM bandwidth. ``bound`` names what sets the
roof: ``gemm`` (compute-bound and the GEMM core's own work is >= 90% of it), ``alu`` (the
compute engine is the bottleneck but resets/requantisation cost more than 10% of it, as in the
1x1 layers with short K) or ``dma`` (loads take longer than compute). The bar is >= 90%
utilization with hiding on the ``gemm`` layers, at a DRAM setting where the serial programs
stay below 70%.

The second table compares the compiler's programs (``toolchain.vta.compile.compile_dense``:
schedule, tensorize, virtual threads, instruction emission, token insertion) with the hand
generator's on the same data and DRAM setting: cycles with 1 and 2 virtual threads, GEMM
utilization, and the ratio of compiled to hand cycles (1-thread against the serial program,
2-thread against the latency-hiding one; < 1 means the compiled program is faster). The
2-thread tiles end in the axis split over the threads (``m`` rows, ``n`` output channels);
``n/a``: no split fits. ``--no-compiled`` skips the comparison.

The third table compiles each layer as a direct convolution (``compile_conv2d``: packed
NCHW{BATCH}n{BLOCK_IN}c image, zero padding done by the input DMA, two virtual threads) at an
image size scaled by sqrt(scale) per side, and runs it beside the hand generator's
latency-hiding im2col GEMM of the same output size (whose im2col input is given for free);
ratio = conv / hand cycles. ``--no-conv`` skips it.

    python benchmarks/vta_latency_hiding.py                     # all layers, full size
    python benchmarks/vta_latency_hiding.py --layers C2,C12 --scale 0.25
    python benchmarks/vta_latency_hiding.py --latency 64 --bandwidth 16 --no-fsim
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.errors import ScheduleError  # noqa: E402
from toolchain.target import load_target  # noqa: E402
from toolchain.vta import RESNET18_LAYERS, gemm_workload, load_config, run_fsim  # noqa: E402
from toolchain.vta.compile import compile_conv2d, compile_dense  # noqa: E402
from toolchain.vta.rtl import run_batch  # noqa: E402
from toolchain.vta.workloads import expected_conv  # noqa: E402


def load_cycles(wl, cfg) -> float:
    """DMA cycles of all INP/WGT tile loads at the configured bandwidth (no latency)."""
    total = 0
    for insn in wl.serial.insns:
        if type(insn).__name__ == "Load" and insn.memory_type in (1, 2):
            total += insn.y_size * insn.x_size * cfg.row_bytes(insn.memory_type)
    return total / cfg.bytes_per_cycle


def engine_cycles(insn) -> int:
    """Cycles the compute engine's micro-op pipeline needs for a GEMM/ALU instruction.

    Resets and immediate ALU ops with one micro-op and an odd inner destination factor run
    two inner steps per cycle (hw/README.md); everything else one step per cycle.
    """
    kind = type(insn).__name__
    paired = ((kind == "Gemm" and insn.reset) or (kind == "Alu" and insn.use_imm)) and \
        insn.uop_end - insn.uop_bgn == 1 and insn.dst_factor_in % 2 == 1
    return insn.iter_out * -(-insn.iter_in // 2) if paired else insn.steps


def compile_layer(wl, target, vthreads: int):
    """The compiler's program for the workload's GEMM (same weights and shift), or None
    when the layer has no such schedule (an odd M split over two threads)."""
    try:
        return compile_dense(wl.b, wl.m, wl.shift, target, vthreads=vthreads, layer=wl.name)
    except ScheduleError:
        return None


def run_layer(name: str, cfg, scale: float, check: bool, target=None) -> dict:
    layer = RESNET18_LAYERS[name]
    m, k, n = layer.gemm_shape
    m = max(cfg.batch, round(m * scale))
    wl = gemm_workload(m, k, n, cfg, name=name, seed=0)
    compiled = {vt: compile_layer(wl, target, vt) for vt in (1, 2)} if target else {}
    runs = [(wl.serial, None), (wl.vthread, None)]
    runs += [(c.program, c.image(wl.a)) for c in compiled.values() if c is not None]
    t0 = time.perf_counter()
    results = run_batch(runs, cfg, latency=cfg.latency_cycles, bandwidth=cfg.bytes_per_cycle)
    (d_ser, c_ser), (d_vt, c_vt) = results[:2]
    sim_s = time.perf_counter() - t0
    ok = bool((wl.read_output(d_ser) == wl.expected).all()
              and (wl.read_output(d_vt) == wl.expected).all())
    comp = {}
    rest = iter(results[2:])
    for vt, c in compiled.items():
        if c is not None:
            d_c, cnt = next(rest)
            good = bool((c.read_output(d_c) == wl.expected).all())
            if check:
                good = good and np.array_equal(
                    d_c, run_fsim(c.program, c.image(wl.a), tokens=True).dram)
            comp[vt] = {"tiles": c.tiles, "cycles": cnt["cycles"], "ok": good,
                        "util": wl.macs / (cfg.macs_per_step * cnt["cycles"])}
    if check:
        ref = run_fsim(wl.serial).dram
        ok = ok and np.array_equal(d_ser, ref) and np.array_equal(d_vt, ref)
    steps = wl.macs // cfg.macs_per_step
    # the compute engine also runs the accumulator resets and the requantising ALU ops
    engine = sum(engine_cycles(i) for i in wl.vthread.insns
                 if type(i).__name__ in ("Gemm", "Alu"))
    loads = load_cycles(wl, cfg)
    return {
        "name": name, "shape": f"{m}x{k}x{n}", "tiling": wl.tiling, "macs": wl.macs,
        "bound": "dma" if loads > engine else ("gemm" if steps >= 0.9 * engine else "alu"),
        "roof": steps / max(engine, loads),
        "ser": c_ser, "vt": c_vt, "ok": ok, "sim_s": sim_s, "comp": comp,
        "u_ser": wl.macs / (cfg.macs_per_step * c_ser["cycles"]),
        "u_vt": wl.macs / (cfg.macs_per_step * c_vt["cycles"]),
    }




def run_conv(name: str, cfg, scale: float, check: bool, target) -> dict:
    """The layer as a compiled direct convolution beside the hand im2col GEMM."""
    layer = RESNET18_LAYERS[name]
    h = max(layer.k, round(layer.h * scale ** 0.5))
    rng = np.random.default_rng(0)
    wt = rng.integers(-128, 128, (layer.oc, layer.ic, layer.k, layer.k), dtype=np.int8)
    x = rng.integers(-128, 128, (layer.ic, h, h), dtype=np.int8)
    shift = 12
    conv = compile_conv2d(wt, h, h, shift, target, stride=layer.s, pad=layer.k // 2,
                          layer=name)
    oh, ow = conv.shape.out_hw
    wl = gemm_workload(oh * ow, layer.ic * layer.k ** 2, layer.oc, cfg, name=name, seed=0)
    (d_h, c_h), (d_c, c_c) = run_batch([(wl.vthread, None), (conv.program, conv.image(x))],
                                       cfg, latency=cfg.latency_cycles,
                                       bandwidth=cfg.bytes_per_cycle)
    ok = bool((wl.read_output(d_h) == wl.expected).all()
              and (conv.read_output(d_c) == expected_conv(x, wt, layer.s, layer.k // 2,
                                                           shift)).all())
    if check:
        ok = ok and np.array_equal(d_c, run_fsim(conv.program, conv.image(x),
                                                 tokens=True).dram)
    macs = oh * ow * layer.oc * layer.ic * layer.k ** 2
    return {"name": name, "hw": f"{h}x{h}", "tiles": conv.tiles, "ok": ok,
            "conv": c_c["cycles"], "hand": c_h["cycles"],
            "u_conv": macs / (cfg.macs_per_step * c_c["cycles"]),
            "u_hand": wl.macs / (cfg.macs_per_step * c_h["cycles"])}


def print_conv(rows: list[dict]) -> None:
    print()
    print("compiled direct conv2d (2 threads) vs hand im2col GEMM (latency hiding), same RTL "
          "run; ratio = conv / hand cycles")
    head = (f"{'layer':5} {'image':>7} {'toh,toc,tic':>14} {'conv cyc':>10} {'util':>6} "
            f"{'hand cyc':>10} {'util':>6} {'ratio':>7} {'check':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        t = r["tiles"]
        tiles = f"{t.toh},{t.toc},{t.tic} {t.split}{' r' if t.resident else ''}"
        print(f"{r['name']:5} {r['hw']:>7} {tiles:>14} {r['conv']:>10} {r['u_conv']:>6.1%} "
              f"{r['hand']:>10} {r['u_hand']:>6.1%} {r['conv'] / r['hand']:>6.3f}x "
              f"{'ok' if r['ok'] else 'FAIL':>5}", flush=True)
    conv, hand = sum(r["conv"] for r in rows), sum(r["hand"] for r in rows)
    print(f"all layers: conv / hand cycles {conv / hand:.3f}x")


def print_compiled(rows: list[dict], cfg) -> None:
    """The compiled-vs-hand table (cycles from the same RTL run as the first table)."""
    print()
    print("compiled (compile_dense) vs hand generator, same RTL run; ratio = compiled / hand "
          "cycles")
    head = (f"{'layer':5} {'tiles 1 thr':>12} {'1-thr cyc':>10} {'util':>6} {'/serial':>7} "
            f"{'tiles 2 thr':>12} {'2-thr cyc':>10} {'util':>6} {'/vthread':>8} {'check':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = []
        for vt, ref in ((1, r["ser"]["cycles"]), (2, r["vt"]["cycles"])):
            c = r["comp"].get(vt)
            if c is None:
                cells.append(f"{'n/a':>12} {'':>10} {'':>6} {'':>{7 + (vt == 2)}}")
                continue
            t = c["tiles"]
            tiles = f"{t.tm},{t.tn},{t.tk}" + (f" {t.split}" if vt > 1 else "")
            cells.append(f"{tiles:>12} {c['cycles']:>10} {c['util']:>6.1%} "
                         f"{c['cycles'] / ref:>{6 + (vt == 2)}.3f}x")
        ok = all(c["ok"] for c in r["comp"].values())
        print(f"{r['name']:5} {cells[0]} {cells[1]} {'ok' if ok else 'FAIL':>5}", flush=True)
    both = [r for r in rows if 2 in r["comp"]]
    cb = [r for r in both if r["bound"] == "gemm"]
    if cb:
        print(f"GEMM-bound layers ({', '.join(r['name'] for r in cb)}), compiled with 2 threads: "
              f"{min(r['comp'][2]['util'] for r in cb):.1%}.."
              f"{max(r['comp'][2]['util'] for r in cb):.1%} GEMM utilization, >= 90% on "
              f"{sum(r['comp'][2]['util'] >= 0.9 for r in cb)} of {len(cb)}; compiled / hand "
              f"cycles {min(r['comp'][2]['cycles'] / r['vt']['cycles'] for r in cb):.3f}.."
              f"{max(r['comp'][2]['cycles'] / r['vt']['cycles'] for r in cb):.3f}x")
    if both:
        comp = sum(r["comp"][2]["cycles"] for r in both)
        hand = sum(r["vt"]["cycles"] for r in both)
        print(f"2 threads, layers {', '.join(r['name'] for r in both)}: compiled / hand cycles "
              f"{comp / hand:.3f}x; GEMM utilization compiled "
              f"{min(r['comp'][2]['util'] for r in both):.1%}.."
              f"{max(r['comp'][2]['util'] for r in both):.1%}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=",".join(RESNET18_LAYERS),
                    help="comma-separated ResNet-18 layers (default C2..C12)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="scale each layer's M (output pixels) to shorten simulation")
    ap.add_argument("--latency", type=int, default=64,
                    help="DRAM latency in cycles (default 64)")
    ap.add_argument("--bandwidth", type=float, default=8,
                    help="DRAM bytes per cycle (default 8: half the 128-bit bus, where the "
                         "serial programs stay below 70%% GEMM utilization)")
    ap.add_argument("--target", default=None, help="VTA target file")
    ap.add_argument("--no-fsim", action="store_true", help="skip the functional-sim check")
    ap.add_argument("--no-compiled", action="store_true",
                    help="skip the compiled-vs-hand comparison")
    ap.add_argument("--no-conv", action="store_true",
                    help="skip the compiled direct convolutions")
    args = ap.parse_args(argv)
    cfg = load_config(args.target)
    target = load_target(args.target or "vta")
    # the compiler sizes its tiles for the target's DRAM: give it the same setting
    target = dataclasses.replace(target, dram={**target.dram, "latency_cycles": args.latency,
                                               "bytes_per_cycle": args.bandwidth})
    # the workload generator sizes its tiles for the configured DRAM, so tell it the setting
    cfg = dataclasses.replace(cfg, latency_cycles=args.latency, bytes_per_cycle=args.bandwidth)
    names = [s.strip() for s in args.layers.split(",") if s.strip()]
    unknown = [s for s in names if s not in RESNET18_LAYERS]
    if unknown:
        print(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(RESNET18_LAYERS)}",
              file=sys.stderr)
        return 2
    print(f"VTA RTL latency hiding: GEMM core {cfg.batch}x{cfg.block_in}x{cfg.block_out} "
          f"({cfg.macs_per_step} MACs/cycle), DRAM latency {cfg.latency_cycles} cycles, "
          f"{cfg.bytes_per_cycle} B/cycle, layer M scale {args.scale}")
    head = (f"{'layer':5} {'M x K x N':>15} {'tm,tn,tk':>10} {'bound':>5} {'serial cyc':>11} "
            f"{'util':>6} {'vthread cyc':>11} {'util':>6} {'roof':>6} {'speedup':>7} {'check':>5} "
            f"{'sim s':>6}")
    print(head)
    print("-" * len(head))
    rows = []
    for name in names:
        r = run_layer(name, cfg, args.scale, not args.no_fsim,
                      None if args.no_compiled else target)
        rows.append(r)
        t = r["tiling"]
        print(f"{r['name']:5} {r['shape']:>15} {f'{t.tm},{t.tn},{t.tk}':>10} {r['bound']:>5} "
              f"{r['ser']['cycles']:>11} {r['u_ser']:>6.1%} {r['vt']['cycles']:>11} "
              f"{r['u_vt']:>6.1%} {r['roof']:>6.1%} "
              f"{r['ser']['cycles'] / r['vt']['cycles']:>6.2f}x "
              f"{'ok' if r['ok'] else 'FAIL':>5} {r['sim_s']:>6.1f}", flush=True)
    cb = [r for r in rows if r["bound"] == "gemm"]
    print("-" * len(head))
    tot_ser = sum(r["ser"]["cycles"] for r in rows)
    tot_vt = sum(r["vt"]["cycles"] for r in rows)
    macs = sum(r["macs"] for r in rows)
    print(f"all layers: utilization {macs / (cfg.macs_per_step * tot_ser):.1%} serial -> "
          f"{macs / (cfg.macs_per_step * tot_vt):.1%} with hiding, speedup "
          f"{tot_ser / tot_vt:.2f}x")
    if cb:
        met = sum(r["u_vt"] >= 0.9 for r in cb)
        print(f"GEMM-bound layers ({', '.join(r['name'] for r in cb)}): serial "
              f"{min(r['u_ser'] for r in cb):.1%}..{max(r['u_ser'] for r in cb):.1%}, with "
              f"hiding {min(r['u_vt'] for r in cb):.1%}..{max(r['u_vt'] for r in cb):.1%} "
              f"({min(r['u_vt'] / r['roof'] for r in cb):.1%}..."
              f"{max(r['u_vt'] / r['roof'] for r in cb):.1%} of their roofs); "
              f">= 90% on {met} of {len(cb)}")
    if not args.no_compiled:
        print_compiled(rows, cfg)
    convs = []
    if not args.no_conv:
        convs = [run_conv(name, cfg, args.scale, not args.no_fsim, target) for name in names]
        print_conv(convs)
    failed_conv = [f"{r['name']} (conv)" for r in convs if not r["ok"]]
    failed = [r["name"] for r in rows if not r["ok"]]
    failed += [f"{r['name']} (compiled, {vt} thread{'s' * (vt > 1)})"
               for r in rows for vt, c in r["comp"].items() if not c["ok"]]
    failed += failed_conv
    if failed:
        print(f"MISMATCH between RTL and the functional simulator / numpy: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

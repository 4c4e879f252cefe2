"""``python -m tests.fuzz --count N --seed S``: explore more random graphs than CI does.

Each graph is compiled for every CPU target this host can run and compared with
onnxruntime (and Kiln's reference executor); each failure is shrunk to a minimal model
and saved as ``<out>/<kind>-<target>-seed<S>.onnx`` with its inputs (``.npz``) and the
finding (``.txt``). Each graph is checked in a forked child process, so a bundle that
crashes (a segmentation fault in generated code) is a finding of kind ``crash`` with its
seed and unshrunk model, not the end of the campaign. Exits 1 when anything was found.

``--wide`` draws float graphs from the op families, dtypes (casts, integer arithmetic),
ranks and structures the CI generator leaves out (:mod:`tests.fuzz.wide`).

``--opset18``, ``--recurrent``, ``--attention`` and ``--control-flow`` (any together)
draw opset-23 graphs with those op groups (:mod:`tests.fuzz.modern`,
:mod:`tests.fuzz.sequence`); ``--symbolic`` declares their inputs' dimensions symbolic
(bound at compile time) and adds Shape-computed Reshapes. A target ``NAME:budget``
compiles under a RAM budget below the plain plan's arena (patch stages).

``--accelerator`` draws int8 graphs shaped for an accelerator target
(:mod:`tests.fuzz.accel`; targets default to ``vta``) and reports how many bundles put
layers on the accelerator, so a campaign that silently stays on the host shows.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

from tests.fuzz.accel import random_accel_model
from tests.fuzz.graphs import INT8_FAMILIES, random_model
from tests.fuzz.modern import random_modern_model
from tests.fuzz.oracle import check, check_int8, shrink, slug
from tests.fuzz.wide import random_wide_model

#: every CPU target (one this host cannot run is skipped)
TARGETS = ("c-generic", "x86_64-avx2", "x86_64-avx512")
#: the other backends: kernels through LLVM, a GPU target's kernels emulated on the CPU,
#: the kernels split across 3 threads
BACKENDS = ("c-generic:llvm", "cuda-sm80:emulate", "c-generic:threads")
#: what a finding is (the other counts: graphs, invalid, ambiguous, placements)
FINDINGS = ("wrong", "crash", "refused")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--count", type=int, default=100, help="graphs to try (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--targets", default=None,
                    help="comma-separated targets; NAME:llvm compiles the kernels through "
                         "LLVM, NAME:emulate runs a GPU target's kernels on the CPU, "
                         "NAME:threads compiles for 3 cores and runs on 3 threads, "
                         "board:NAME runs a firmware for that board under QEMU, "
                         "NAME:fp16 compiles with --precision fp16 (a coarse tolerance), "
                         "'reference' builds no bundle (the reference executor alone) "
                         "(default: every CPU target and backend; vta with --accelerator)")
    ap.add_argument("--int8", action="store_true",
                    help="quantize each graph (integer op families only) and require the "
                         "bundles to equal the integer reference bit for bit")
    ap.add_argument("--accelerator", action="store_true",
                    help="int8 graphs of accelerator-shaped layers (square convs, 2-D "
                         "Gemm; implies --int8) and a count of the bundles that put "
                         "layers on the accelerator")
    ap.add_argument("--power-of-two-scales", action="store_true",
                    help="quantize with power-of-two scales (implies --int8): on vta the "
                         "layers then requantize on the accelerator")
    ap.add_argument("--wide", action="store_true",
                    help="float graphs over the op families, dtypes, ranks and structures "
                         "the CI generator never draws as well (tests/fuzz/wide.py)")
    for flag, what in (("--opset18", "opset 18+ forms: reductions with an axes input, "
                         "Split num_outputs, Pad axes/wrap, Layer/GroupNormalization, Gelu, "
                         "Mish, Resize axes/antialias"),
                       ("--recurrent", "LSTM, GRU and RNN with their attributes"),
                       ("--attention", "the attention pattern (MatMul-scale-mask-Softmax-"
                        "MatMul, heads) and the Attention op"),
                       ("--control-flow", "If, Loop and Scan"),
                       ("--conv-chain", "a chain of 2-4 convolutions from a 12-28 pixel "
                        "image first (what NAME:budget tiles)")):
        ap.add_argument(flag, action="store_true", help=f"opset-23 graphs with {what} "
                        "(tests/fuzz/modern.py; combine freely)")
    ap.add_argument("--symbolic", action="store_true",
                    help="inputs with symbolic dimensions, bound at compile time, and "
                         "Shape-computed Reshapes (alone: with --opset18's groups)")
    ap.add_argument("--max-nodes", type=int, default=10)
    ap.add_argument("--out", default="fuzz-findings", help="where failing models go")
    args = ap.parse_args(argv)
    args.int8 = args.int8 or args.accelerator or args.power_of_two_scales
    args.groups = tuple(g for g, on in (("opset18", args.opset18), ("recurrent", args.recurrent),
                                        ("attention", args.attention),
                                        ("control", args.control_flow),
                                        ("convchain", args.conv_chain)) if on) or \
        (("opset18",) if args.symbolic else ())
    default = "vta" if args.accelerator else ",".join(TARGETS + BACKENDS)
    # "reference": no bundle, the reference executor alone (thousands of graphs cheaply)
    targets = tuple(t for t in (args.targets or default).split(",") if t and t != "reference")
    out = Path(args.out)
    # imported once here, not again in every forked child (about 0.4 CPU s a graph)
    import onnxruntime  # noqa: F401

    import toolchain.bundle  # noqa: F401
    import toolchain.frontend.onnx  # noqa: F401
    import toolchain.graph.reference  # noqa: F401
    counts: collections.Counter[str] = collections.Counter()
    t0 = time.perf_counter()
    for seed in range(args.seed, args.seed + args.count):
        counts["graphs"] += 1
        counts.update(isolated(seed, args, targets, out))
    found = sum(counts[k] for k in FINDINGS)
    kinds = [k for k in sorted(counts) if k in (*FINDINGS, "invalid", "ambiguous",
                                                 "onnxruntime")]
    print(f"{counts['graphs']} graphs on {', '.join(targets) or 'the reference executor'} in "
          f"{time.perf_counter() - t0:.0f} s: {found} finding(s) "
          f"({', '.join(f'{k} {counts[k]}' for k in kinds)})")
    for t in targets:
        if counts[f"{t} bundles"] and not t.endswith(":budget"):
            print(f"{t}: {counts[f'{t} with accelerator layers']} of "
                  f"{counts[f'{t} bundles']} bundles put layers on the accelerator "
                  f"({counts[f'{t} accelerator layers']} layers in all, "
                  f"{counts[f'{t} requantizing layers']} with their epilogue there)")
        if t.endswith(":budget"):
            print(f"{t}: {counts[f'{t} patched']} of {counts[f'{t} bundles']} bundles met "
                  f"the budget with a patch stage, {counts[f'{t} unmet']} budgets unmet")
    return 1 if found else 0


def make(seed: int, args: argparse.Namespace) -> tuple[onnx.ModelProto, dict]:
    """The graph of ``seed`` for the options ``args``."""
    if args.accelerator:
        return random_accel_model(seed, args.max_nodes)
    if args.wide:
        return random_wide_model(seed, args.max_nodes)
    if args.groups:
        return random_modern_model(seed, args.max_nodes, args.groups, args.symbolic)
    return random_model(seed, args.max_nodes, INT8_FAMILIES if args.int8 else None)


def one_graph(seed: int, args: argparse.Namespace, targets: tuple[str, ...],
              out: Path) -> collections.Counter[str]:
    """Check the graph of ``seed``; save each real finding, shrunk; the kinds counted."""
    counts: collections.Counter[str] = collections.Counter()
    model, inputs = make(seed, args)
    if args.int8:
        findings = check_int8(model, inputs, targets, counts, args.power_of_two_scales)
    else:
        findings = check(model, inputs, targets, counts)
    for f in findings:
        counts[f.kind] += 1
        if f.kind in ("invalid", "ambiguous", "onnxruntime"):
            continue
        small = model if args.int8 else shrink(model, inputs, f, targets)
        save(out, f"{f.kind}-{slug(f.target)}-seed{seed}", small, inputs,
             f"seed {seed}, {f.kind} on {f.target}: {f.detail}\n")
        print(f"seed {seed}: {f.kind} on {f.target} ({len(small.graph.node)} nodes after "
              f"shrinking): {f.detail.splitlines()[0][:200]}", flush=True)
    return counts


def save(out: Path, stem: str, model: onnx.ModelProto, inputs: dict, text: str) -> None:
    """``<out>/<stem>.onnx``, its inputs (``.npz``) and the finding (``.txt``)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / stem
    onnx.save(model, path.with_suffix(".onnx"))
    np.savez(path.with_suffix(".npz"), **{i.name: inputs[i.name] for i in model.graph.input})
    path.with_suffix(".txt").write_text(
        text + f"nodes: {' '.join(n.op_type for n in model.graph.node)}\n")


def isolated(seed: int, args: argparse.Namespace, targets: tuple[str, ...],
             out: Path) -> collections.Counter[str]:
    """:func:`one_graph` in a forked child: a child killed by a signal (a bundle that
    crashed) is a ``crash`` finding, saved with the seed's whole model."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: check, report the counts, and leave without cleanup
        os.close(read)
        code = 0
        try:
            counts = one_graph(seed, args, targets, out)
            os.write(write, json.dumps(counts).encode())
        except BaseException:  # noqa: BLE001 - a Python error is reported, then exit 3
            traceback.print_exc()
            code = 3
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or os.waitstatus_to_exitcode(status) == 3:
        why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else "the check raised (traceback above)")
        model, inputs = make(seed, args)
        save(out, f"crash-seed{seed}", model, inputs, f"seed {seed}: crash, {why}\n")
        print(f"seed {seed}: crash ({why})", flush=True)
        return collections.Counter(crash=1)
    return collections.Counter(json.loads(data))


if __name__ == "__main__":
    sys.exit(main())

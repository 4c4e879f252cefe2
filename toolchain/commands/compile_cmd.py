"""``kiln compile``: an ONNX model -> a self-contained C bundle directory.

The bundle builds with a C compiler and make (or CMake) alone; see docs/bundle.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from toolchain.commands._model_args import add_model_arguments, input_shapes
from toolchain.target import bare_metal, resolve_target

HELP = "compile an ONNX model into a self-contained C bundle (no malloc, static arena)"

EPILOG = """\
examples:
  kiln compile model.onnx --target c-generic -o build/model
  kiln compile model.onnx --target targets/my-board.yaml -o build/model --force
  kiln compile model.onnx --target c-generic -o build/model --input-shape input=1,3,96,96
  kiln compile model.onnx --target c-generic -o build/model --dump-ir build/ir
  kiln compile model.onnx --target x86_64-avx2 --cores 4 -o build/model  # up to 4 threads
  kiln compile model.onnx --target cuda-sm90 -o build/model_gpu        # CUDA (nvcc)
  kiln compile model.onnx --target cuda-sm90 -o build/model_emu --emulate   # ... on the CPU
  kiln compile model.onnx --target cuda-sm90 -o build/model_g --cuda-graph  # one graph launch
  kiln compile model.onnx --target cortex-m4 -o build/model_m4 --backend llvm  # kernels as .o
  kiln compile model.onnx --target x86_64-avx2 --records model.records.jsonl -o build/m
  cd build/model && make && ./main input.bin output.out.bin

The output directory is written atomically: a failed compile leaves nothing, and an
existing directory is refused unless --force (which replaces only a previous Kiln bundle).
Then `kiln run build/model --inputs in.npz --check` builds it here, runs it and compares
it with the reference executor.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_model_arguments(parser)
    parser.add_argument("--target", default="c-generic", metavar="NAME|FILE.yaml",
                        help="target descriptor: a name from targets/, a YAML file, or "
                             "host (the widest shipped CPU descriptor this machine runs, "
                             "with all its cores) (default: c-generic)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="the bundle directory to write")
    parser.add_argument("--name", metavar="NAME",
                        help="C prefix of the API (default: the model file's name)")
    parser.add_argument("--dump-ir", metavar="DIR",
                        help="write the graph after every pass into DIR (NN_<pass>.txt)")
    parser.add_argument("--force", action="store_true",
                        help="replace the output directory if it holds a previous bundle")
    parser.add_argument("--no-progress", action="store_true",
                        help="never show a progress bar")
    parser.add_argument("--skip-pass", action="append", default=[], metavar="PASS",
                        help="leave this default graph pass out (repeatable; e.g. "
                             "fuse_attention to compare with the unfused attention)")
    parser.add_argument("--emulate", action="store_true",
                        help="GPU targets: write a C bundle whose kernels are the GPU kernels' "
                             "code run thread by thread on the CPU (checks them without a GPU)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="CUDA targets: <model>_init captures the kernel launches into one "
                             "CUDA graph, which <model>_run launches (one launch a run instead "
                             "of one a kernel; docs/cuda.md \"CUDA graphs\"); ignored, with a "
                             "warning and a note in metadata.json, with --emulate")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                        help="fp16: the model's float32 tensors and weights stored as float16 "
                             "inside the bundle (float32 sums; tensor cores for GEMMs on CUDA "
                             "targets), float32 inputs and outputs at its API "
                             "(docs/tensor_cores.md)")
    parser.add_argument("--backend", choices=("c", "llvm"), default="c",
                        help="c (default): kernels as C source; llvm: kernels as object files "
                             "for the target's triple, compiled in-process by LLVM, next to "
                             "the same C runtime and model code (docs/llvm.md)")
    parser.add_argument("--cores", type=int, metavar="N",
                        help="threads the bundle's parallel kernels may use (overrides the "
                             "target's cores; the caller picks 1..N at run time, docs/bundle.md "
                             "\"Threads\")")
    parser.add_argument("--weights", choices=("auto", "incbin", "c-array", "external"),
                        default="auto",
                        help="how the bundle stores its weights: incbin (src/weights.bin, "
                             "linked by an assembler .incbin stub), c-array (src/weights.c, "
                             "for toolchains without .incbin such as MSVC), external (the "
                             "program loads src/weights.bin and calls <model>_set_weights); "
                             "auto (default): incbin, or external above 2 GiB of weights")
    parser.add_argument("--records", metavar="RECORDS.jsonl",
                        help="apply the best tuning record per kernel (from kiln tune; "
                             "kernels without one keep the default schedule); the summary "
                             "counts the kernels and workloads applied and says how their "
                             "records were measured (docs/tuning.md)")
    parser.add_argument("--ram-budget", type=int, metavar="BYTES",
                        help="the most arena bytes: where the plain plan needs more, the first "
                             "convolutions run tile by tile (patch-based inference, "
                             "docs/embedded.md); with --board, default: the board's RAM less "
                             "its stack")
    parser.add_argument("--board", metavar="NAME|FILE.yaml",
                        help="also write a firmware project for this board (boards/*.yaml): "
                             "fit check, cross build, size report (see docs/embedded.md)")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "records", None):
        from toolchain.autotune.apply import applying
        from toolchain.autotune.conditions import warn_mixed
        from toolchain.autotune.records import best_records, load_records

        records = load_records(args.records)
        chosen = best_records(records, f"records file {args.records}")
        best = {w: r.trace for w, r in chosen.items()}
        with applying(best) as applied:
            status = _run(args)
        warn_mixed(records, applied, f"records file {args.records}")
        print(f"  tuning records from {args.records}: {records_summary(records, best, applied)}")
        if applied.traces:
            print(f"  measured: {measured_summary(chosen, applied)}")
        return status
    return _run(args)


def measured_summary(chosen: dict[str, Any], applied: Any,
                     here: str | None = None) -> str:
    r"""How the records a compile applied were measured (:mod:`toolchain.autotune.
    conditions`), kernels and workloads counted per set of conditions; a CPU other than
    ``here`` (default: this machine's) is named as such. Reported, not refused: a record
    chooses among valid points, so the bundle computes the same either way, and tuning on
    one machine to compile on another (or for another) is the usual flow.

    >>> from toolchain.autotune.apply import Applied
    >>> from toolchain.autotune.records import Record
    >>> from toolchain.autotune.space import Trace
    >>> c = {"repeat": 3, "machine": "Imaginary 9"}
    >>> chosen = {w: Record(w, "toy", "c", Trace("toy", ()), [1.0], conditions=c if w != "w3"
    ...                     else None) for w in ("w1", "w2", "w3")}
    >>> a = Applied(traces=dict.fromkeys(chosen), kernels={"w1": 2, "w2": 1, "w3": 1})
    >>> print(measured_summary(chosen, a, here="Real 1").replace("; ", ";\n"))
    3 kernels (2 workloads) with --repeat 3, CPU 'Imaginary 9' (not this machine's CPU, 'Real 1');
    1 kernel (1 workload) in conditions not recorded (written by an earlier Kiln)
    """
    from toolchain.autotune.conditions import cpu_model, describe, key_of

    groups: dict[Any, list[str]] = {}
    for w in applied.traces:
        if w in chosen:
            groups.setdefault(key_of(chosen[w].conditions), []).append(w)
    parts = []
    for key in sorted(groups, key=lambda k: k is None):  # unknown last
        ws = groups[key]
        cond = chosen[ws[0]].conditions
        text = (f"{_count(applied.kernels_of(set(ws)), 'kernel')} "
                f"({_count(len(ws), 'workload')}) "
                f"{'in' if cond is None else 'with'} {describe(cond)}")
        if cond and "machine" in cond:
            here = here if here is not None else cpu_model()
            if cond["machine"] != here:
                text += f" (not this machine's CPU, {here!r})"
        parts.append(text)
    return "; ".join(parts)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def records_summary(records: list[Any], best: dict[str, Any], applied: Any) -> str:
    r"""What ``kiln compile --records`` took from its file, in words: by workload (a
    kernel shape, one record each) and by kernel (every kernel of one shape gets its
    workload's record: ResNet-18's repeated blocks share theirs), the tuned schedules
    apart from records whose best point is the default one.

    >>> from toolchain.autotune.apply import Applied
    >>> a = Applied(traces={"w1": None, "w2": None}, tuned={"w1"}, default={"w2"},
    ...             kernels={"w1": 3, "w2": 1}, kernel_total=4)
    >>> print(records_summary([], {"w1": 0, "w2": 0, "w3": 0}, a).replace(": ", ":\n")
    ...       .replace(" the default, ", " the default,\n"))
    2 of its 3 tuned workloads serve 4 kernels of this compile:
    3 kernels (1 workload) built with a tuned schedule that differs from the default,
    1 kernel (1 workload) whose best record is the default schedule; every other kernel default
    """
    if not best:
        return ("it holds no timed successful trial (--runner emulate checks and failed trials "
                "are never applied): every kernel default")
    matched = set(applied.traces) | applied.skipped
    if not matched:  # records of another target or model: say so
        targets = ", ".join(sorted({r.target for r in records}))
        return (f"none of its {_count(len(best), 'tuned workload')} is a workload of this "
                f"compile's kernels (tuned for {targets}): every kernel default")

    def by(workloads: set[str]) -> str:
        kernels = applied.kernels_of(workloads)
        return (f"{_count(kernels, 'kernel')} ({_count(len(workloads), 'workload')})"
                if workloads else "0 kernels")

    parts = [f"{by(applied.tuned)} built with a tuned schedule that differs from the default"]
    if applied.default:
        parts.append(f"{by(applied.default)} whose best record is the default schedule")
    other = set(applied.traces) - applied.tuned - applied.default
    if other:  # a space whose default is a search (the accelerator's tilings)
        parts.append(f"{by(other)} built from its record (the default is a search, not "
                     "compared)")
    if applied.skipped:
        parts.append(f"{by(applied.skipped)} not applied (no longer a valid point, warned "
                     "above)")
    total = applied.kernel_total or applied.kernels_of(matched)
    return (f"{len(matched)} of its {_count(len(best), 'tuned workload')} "
            f"{'serves' if len(matched) == 1 else 'serve'} {_count(total, 'kernel')} of this "
            f"compile: {', '.join(parts)}; every other kernel default")


def _run(args: argparse.Namespace) -> int:
    from toolchain.bundle import compile_model
    from toolchain.errors import InputError, OptionError

    if args.name is not None and not args.name.strip():
        raise OptionError("--name '': empty; give the API's C prefix, or leave --name out for "
                          "the model file's name")

    if getattr(args, "board", None):
        if args.cores is not None:
            from toolchain.errors import OptionError

            raise OptionError("--cores does not go with --board: a board's firmware runs on "
                              "one core")
        if args.cuda_graph:
            from toolchain.errors import OptionError

            raise OptionError("--cuda-graph applies to CUDA targets; --board compiles for a "
                              "board's CPU")
        if args.precision != "fp32":
            from toolchain.errors import OptionError

            raise OptionError("--precision fp16 does not go with --board yet (the board "
                              "flow compiles float32 models as they are)")
        return compile_for_board(args, input_shapes(args))
    if not Path(args.model).is_file():
        raise InputError(f"model file {args.model} does not exist")
    start = time.perf_counter()
    target = with_cores(resolve_target(args.target), args.cores)  # once, for every stage
    out = compile_model(args.model, target, args.output, input_shapes=input_shapes(args),
                        name=args.name, dump_ir=args.dump_ir, force=args.force,
                        progress=False if args.no_progress else None,
                        emulate=args.emulate, backend=args.backend, weights=args.weights,
                        skip_passes=tuple(args.skip_pass), ram_budget=args.ram_budget,
                        precision=args.precision, cuda_graph=args.cuda_graph)
    meta = json.loads((out / "metadata.json").read_text())
    plan = meta["memory_plan"]
    fallback = [k for k in meta["kernels"] if k["schedule"] != "default"]
    acc = meta.get("accelerator")
    # an accelerator bundle's metadata target is its host kernels' target: name both
    target_note = (f"{acc['target']} (host kernels for {acc['host_target']})"
                   if acc is not None else meta["target"]["name"])
    print(f"wrote {args.output}: model {meta['model']['name']} for target {target_note} "
          f"in {time.perf_counter() - start:.1f} s")
    print(f"  kernels {meta['kernel_count']} (from {meta['nodes_before_fusion']} nodes)"
          + (f", {len(fallback)} without a default schedule" if fallback else ""))
    for k in fallback:  # declared fallbacks only (toolchain.errors.NoScheduleError)
        print(f"    kernel {k['index']} {k['name']}: {k['schedule']}")
    dev = meta.get("device")
    arena = dev["arena_bytes"] if dev else meta["arena_bytes"]
    scratch = max((t["size"] for t in plan.get("tensors", ()) if t.get("kind") == "scratch"),
                  default=0)
    print(f"  {'device ' if dev else ''}arena {arena:,} B (lower bound "
          f"{plan['lower_bound']:,} B, naive {plan['naive_bytes']:,} B{_order_note(plan)}), "
          f"weights {weights_note(meta)}" + (f"; device workspace {dev['workspace_bytes']:,} B "
                                          f"({dev['launches']} launches"
                                          f"{_graph_note(meta)})" if dev else ""))
    print(f"    (the arena holds the activations in the target's layout "
          f"({meta['target']['layout']}) and the kernels' scratch (the largest {scratch:,} B); "
          "weights are packed for the target's kernels: kiln inspect's memory plan counts the "
          "graph before both)")
    for line in patch_lines(meta):
        print(line)
    threaded = sum(1 for k in meta["kernels"] if k.get("threaded"))
    if not threaded and meta.get("max_threads", 1) > 1:
        print(f"  threads: none of the {meta['kernel_count']} kernels is large enough to split "
              f"across the {meta['max_threads']} cores (that takes a parallel loop and 1 MFLOP "
              "or 1 MiB of data, docs/bundle.md \"Threads\"): the bundle runs on one thread")
    if threaded:
        print(f"  threads: up to {meta['max_threads']} ({threaded} of {meta['kernel_count']} "
              "kernels split their parallel loops; <model>_set_threads or main --threads N "
              "picks fewer; make THREADS=pthread|openmp|none)")
    notes = [k["tensor_cores"] for k in meta["kernels"] if "tensor_cores" in k]
    if notes:  # float16 convolutions on a tensor-core target (docs/tensor_cores.md)
        from toolchain.schedules.gpu.conv_tc import ON_TENSOR_CORES

        on = sum(1 for n in notes if n == ON_TENSOR_CORES)
        print(f"  tensor cores: {on} of {len(notes)} fp16 convolution kernels"
              + (f"; the others keep the SIMT kernel, why in metadata.json's kernels[]."
                 f"tensor_cores (first: {next(n for n in notes if n != ON_TENSOR_CORES)})"
                 if on < len(notes) else ""))
    if "failed" in meta["target"]["layout"]:
        print(f"  note: layout {meta['target']['layout']}")
    if acc is not None:  # which node runs where, and why
        on = sum(p["device"] == "accelerator" for p in acc["placements"])
        print(f"  accelerator {acc['target']}: {on} of {len(acc['placements'])} nodes, host "
              f"kernels for {acc['host_target']}, device {acc['device']} (make DEVICE=...)")
        for p in acc["placements"]:
            print(f"    {p['device']:<11} {p['node']} ({p['op']}): {p['reason']}")
        floats = sorted({p["op"] for p in acc["placements"] if p["op"] in FLOAT_GEMM_OPS})
        if not on and floats:  # a float model: nothing for an int8 core, say what to do
            print(f"  note: no node runs on the accelerator: the model's {', '.join(floats)} "
                  "are float and the accelerator runs int8 layers; quantize the model first, "
                  "e.g. kiln quantize MODEL.onnx --calibration DATA.npz -o MODEL_int8.onnx "
                  "(docs/int8.md), and compile that")
    if bare_metal(meta["target"].get("compiler")):  # kiln run refuses it: no OS here
        print(f"  build: make -C {args.output} (lib{meta['model']['name']}.a for firmware, "
              "docs/bundle.md)   run: on the board, or compile with --board NAME to run "
              "under QEMU (docs/embedded.md)")
    else:
        print(f"  build: make -C {args.output}   run: kiln run {args.output} --inputs IN.npz "
              "--check")
    return 0


#: float ops that the accelerator would run once quantized (QConv, QGemm)
FLOAT_GEMM_OPS = ("Conv", "Gemm", "MatMul")


def _graph_note(meta: dict[str, Any]) -> str:
    """The device line's note on ``--cuda-graph``.

    >>> _graph_note({"options": {"cuda_graph": True}, "model": {"name": "net"}})
    ', captured in one CUDA graph by net_init'
    >>> _graph_note({"options": {}, "model": {"name": "net"}})
    ''
    """
    return (f", captured in one CUDA graph by {meta['model']['name']}_init"
            if meta["options"].get("cuda_graph") is True else "")


def with_cores(target: Any, cores: int | None) -> Any:
    """``target`` with ``--cores`` applied (a positive count, CPU targets only)."""
    from dataclasses import replace

    from toolchain.errors import OptionError

    if cores is None:
        return target
    if cores < 1:
        raise OptionError(f"--cores {cores}: must be at least 1")
    if target.kind != "c":
        raise OptionError(f"--cores applies to CPU targets; target {target.name!r} has kind "
                          f"{target.kind!r}")
    return replace(target, cores=cores)


def compile_for_board(args: argparse.Namespace, shapes: dict[str, tuple[int, ...]]) -> int:
    """``kiln compile MODEL --board NAME -o DIR``: the bundle, its firmware project, the fit
    check and the size report (:func:`toolchain.boards.compile_board`)."""
    from toolchain.boards.build import compile_board
    from toolchain.boards.descriptor import load_board
    from toolchain.boards.size import format_report
    from toolchain.errors import InputError, OptionError

    board = load_board(args.board)
    if args.target not in ("c-generic", board.target):
        raise OptionError(f"--target {args.target} and --board {board.name} disagree: the "
                          f"board compiles for target {board.target}; drop --target")
    if not Path(args.model).is_file():
        raise InputError(f"model file {args.model} does not exist")
    start = time.perf_counter()
    out, report = compile_board(args.model, board, args.output, input_shapes=shapes,
                                name=args.name, dump_ir=args.dump_ir, force=args.force,
                                progress=False if args.no_progress else None,
                                backend=getattr(args, "backend", None),
                                weights=getattr(args, "weights", None),
                                ram_budget=getattr(args, "ram_budget", None))
    meta = json.loads((out / "metadata.json").read_text())
    print(f"wrote {args.output}: model {meta['model']['name']} for board {board.name} "
          f"({board.core}, target {board.target}) in {time.perf_counter() - start:.1f} s")
    print(f"  kernels {meta['kernel_count']}, arena {meta['arena_bytes']:,} B, weights "
          f"{weights_note(meta)}")
    for line in patch_lines(meta):
        print(line)
    if report is not None:
        print("  " + format_report(report).replace("\n", "\n  "))
    print(f"  run on QEMU {board.qemu.machine}: kiln run {args.output} --inputs IN.npz --check")
    if not board.is_emulator:
        print(f"  flash: kiln flash {args.output} --board {board.name}")
    return 0


def patch_lines(meta: dict[str, Any]) -> list[str]:
    """The compile summary's lines for the bundle's patch stages (docs/embedded.md,
    "Patch-based inference"): layers, grid, halo, the arena with and without, the extra
    multiply-adds.

    >>> patch_lines({"arena_bytes": 900, "patch_stages": [{"name": "patch_stage_0",
    ...     "layers": ["c0", "c1"], "grid": [2, 3], "tile": [4, 3], "halo": [5, 5],
    ...     "arena_without": 2000, "extra_macs": 0.25}]})[0]  # doctest: +NORMALIZE_WHITESPACE
    '  patch stage patch_stage_0: layers c0 .. c1 (2), 2x3 tiles of 4x3 output pixels,
    halo 5x5; arena 900 B instead of 2,000 B, +25.0% MACs recomputed'
    """
    return [f"  patch stage {st['name']}: layers {st['layers'][0]} .. {st['layers'][-1]} "
            f"({len(st['layers'])}), {st['grid'][0]}x{st['grid'][1]} tiles of "
            f"{st['tile'][0]}x{st['tile'][1]} output pixels, halo {st['halo'][0]}x"
            f"{st['halo'][1]}"
            + (f", takes in {st['absorbs']} (gathers NHWC)" if st.get("absorbs") else "")
            + f"; arena {meta['arena_bytes']:,} B instead of "
            f"{st['arena_without']:,} B, +{st['extra_macs']:.1%} MACs recomputed"
            for st in meta.get("patch_stages", ())]


def weights_note(meta: dict[str, Any]) -> str:
    """The bundle's weight bytes, split by element type where there are several (int8
    weights beside their int32 biases and requantisation tables, say).

    >>> weights_note({"weight_bytes": 64, "weights": [{"dtype": "float32", "bytes": 64}]})
    '64 B'
    >>> weights_note({"weight_bytes": 1200, "weights": [{"dtype": "int8", "bytes": 1024},
    ...     {"dtype": "int32", "bytes": 160}, {"dtype": "int8", "bytes": 16}]})
    '1,200 B (int8 1,040, int32 160)'
    """
    by: dict[str, int] = {}
    for w in meta.get("weights", ()):
        by[w["dtype"]] = by.get(w["dtype"], 0) + int(w["bytes"])
    split = sorted(by.items(), key=lambda kv: -kv[1])
    return f"{meta['weight_bytes']:,} B" + (
        f" ({', '.join(f'{k} {v:,}' for k, v in split)})" if len(split) > 1 else "")


def _order_note(plan: dict[str, Any]) -> str:
    """The node order's part of the summary (from metadata.json's ``memory_plan``): when
    the order search changed the order, the arena and lower bound of the file's order.

    >>> _order_note({"order_search": {"searched": True, "changed": True},
    ...              "file_order": {"arena_bytes": 4096, "lower_bound": 4096}})
    '; node order searched: the file order needs 4,096 B, lower bound 4,096 B'
    >>> _order_note({"order_search": {"searched": True, "changed": False}})
    "; the file's node order is best"
    """
    search = plan.get("order_search") or {}
    if not search.get("searched"):
        return ""
    if search.get("changed"):
        file = plan["file_order"]
        return (f"; node order searched: the file order needs {file['arena_bytes']:,} B, "
                f"lower bound {file['lower_bound']:,} B")
    return "; the file's node order is best"

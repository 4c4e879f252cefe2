"""Embedded benchmark: the MLPerf-Tiny-style zoo models in fp32 and int8 on the boards.

    python benchmarks/embedded.py            # 4 models x (qemu-mps2-an386, nucleo-l4r5zi) x
                                             # (fp32, int8)
    python benchmarks/embedded.py --models ds_cnn --boards nucleo-l4r5zi --precisions int8 \\
        --kernels
    python benchmarks/embedded.py --models ds_cnn --boards qemu-mps2-an386 --precisions int8 \\
        --ram-budget 6144                     # patch stages (docs/embedded.md)
    python benchmarks/embedded.py --models ds_cnn,resnet8,mobilenet_v1 \\
        --boards qemu-mps2-an386 --precisions int8 --tune 64   # default vs tuned (QEMU)

Per model, board and precision it compiles with ``--board`` (fit check, cross build), reads
flash and RAM from the linked ELF's map (toolchain.boards.size), runs the firmware once on
the board's QEMU machine and prints the executed instructions of one inference.

The models are batch 1; the autoencoder returns its reconstruction (MLPerf Tiny AD: the
harness computes the anomaly score). int8 is Kiln's own post-training quantization (8
seeded random calibration samples) with int8 input and output tensors, as the MLPerf Tiny
int8 reference models (:func:`toolchain.zoo.quantized.anchor_model`), so the arena compares
with microTVM's workspace (the anchor column). ``check``: fp32, the largest error relative
to the output's scale against Kiln's float reference; int8, whether every integer output
equals Kiln's integer reference bit for bit ("exact"), then the float outputs' error (a
Softmax after the int8 logits).

QEMU does not model cycles (DWT CYCCNT reads 0).  With ``-icount shift=0`` its virtual
clock advances 1 ns per instruction, so the 25 MHz CMSDK timer the firmware reads around
the inference counts instructions in steps of 40 (exact to within 40).  Instructions are
not cycles: a Cortex-M4 needs ~1.2-2 cycles per instruction on this code (loads, FPU,
flash wait states), so multiply by that for a rough time at the board's clock.

``--tune N`` tunes each model's kernels for the board's target first (``kiln tune --runner
qemu``: each trial one kernel's instructions under QEMU, N trials a model, records in a
temporary folder), ``--records R`` takes records from a file instead; then every row is
compiled and run twice, with the default schedules and with the records
(``kiln compile --records``), and a second table prints both counts and tuned / default.

``--models odd_cnn`` (not in the default set) is a small CNN built here (:func:`odd_cnn`)
whose convolutions have odd channel counts (15, 7, 5, 3) and a depthwise layer of 7: the
one-pixel kernels the two-pixel DSP tile does not take (``cm_int8_conv1``, docs/tuning.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from toolchain.zoo.quantized import (  # noqa: E402
    ANCHORS,
    anchor_float,
    anchor_model,
    calibration,  # noqa: E402
)

MODELS = ["ds_cnn", "resnet8", "mobilenet_v1", "autoencoder"]
BOARDS = ["qemu-mps2-an386", "nucleo-l4r5zi"]
PRECISIONS = ["fp32", "int8"]


def odd_cnn() -> onnx.ModelProto:
    """A 1x3x24x24 CNN with odd channel counts (seeded weights): 3x3 convolutions 3 -> 15,
    15 -> 7 (stride 2), a 3x3 depthwise of 7, 1x1 7 -> 5 and 3x3 5 -> 3, each with ReLU."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    nodes, inits, x = [], [], "input"
    layers = [(3, 15, 3, 1, 1), (15, 7, 3, 2, 1), (7, 7, 3, 1, 7), (7, 5, 1, 1, 1),
              (5, 3, 3, 1, 1)]
    for i, (c, m, k, s, g) in enumerate(layers):
        w = (rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(m).astype(np.float32) * 0.1,
                                          f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], f"conv_{i}",
                                   kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4,
                                   group=g),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], f"relu_{i}")]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "odd_cnn",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                             [1, 3, 24, 24])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                             [1, 3, 12, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _model(name: str, precision: str) -> onnx.ModelProto:
    """The float or int8 model ``name`` (an anchor, or :func:`odd_cnn` quantized the same
    way)."""
    if name != "odd_cnn":
        return anchor_float(name) if precision == "fp32" else anchor_model(name)
    from toolchain.quantize.ptq import quantize_model

    m = odd_cnn()
    return m if precision == "fp32" else \
        quantize_model(m, calibration(m), integer_io=True)[0]


def _inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Seeded inputs: normal floats, or for int8 inputs those floats quantized with the
    scale ``kiln quantize`` recorded (``kiln.io.NAME``)."""
    props = {p.key: p.value for p in model.metadata_props}
    rng = np.random.default_rng(0)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape).astype(np.float32)
        if f"kiln.io.{vi.name}" in props:
            scale, zp, _ = props[f"kiln.io.{vi.name}"].split()
            x = np.clip(np.rint(x / np.float32(scale)) + int(zp), -128, 127).astype(np.int8)
        out[vi.name] = x
    return out


def _check(model: onnx.ModelProto, inputs: dict, outputs: dict, precision: str) -> str:
    from toolchain.bundle.check import compare
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph

    g = from_onnx(model)
    if precision == "fp32":
        return f"{max(r['max_rel'] for r in compare(outputs, run_graph(g, inputs))):.1e}"
    ref = run_graph(quantize_ops(g), inputs)
    ints = [k for k in ref if ref[k].dtype.kind in "iu"]
    text = "exact" if all(np.array_equal(outputs[k], ref[k]) for k in ints) else "DIFFERS"
    floats = {k: v for k, v in ref.items() if k not in ints}  # e.g. a Softmax after logits
    if floats:
        text += f"/{max(r['max_rel'] for r in compare(outputs, floats)):.0e}"
    return text


def _tune(path: Path, board: str, trials: int, out: Path) -> Path:
    """Tune the kernels of model ``path`` for ``board``'s target under QEMU (``kiln tune
    --runner qemu``), ``trials`` in all; the records go to ``out``."""
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.records import RecordWriter
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import tune_tasks
    from toolchain.boards.descriptor import load_board

    target = load_board(board).target
    tasks = extract_tasks(path, target)
    builder, runner = QemuBuilder(target, work=out.parent / "firmware"), QemuRunner(target)
    with RecordWriter(out) as writer:
        tune_tasks(tasks, trials, builder=builder, runner=runner, writer=writer,
                   progress=False)
    return out


def _row(model: str, board: str, precision: str, work: Path, kernels: bool,
         ram_budget: int | None = None, records: Path | None = None) -> dict:
    from toolchain.autotune.apply import applying
    from toolchain.autotune.records import best_traces, load_records
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.errors import TargetError

    m = _model(model, precision)
    path = work / f"{model}_{precision}.onnx"
    onnx.save(m, path)
    inputs = _inputs(m)
    key = {"model": model, "board": board, "precision": precision}
    t0 = time.perf_counter()
    traces = best_traces(load_records(records)) if records else {}
    tag = "-tuned" if records else ""
    try:
        with applying(traces):
            out, report = compile_board(path, board, work / f"{model}-{precision}-{board}{tag}",
                                        name=f"{model}_{precision}", ram_budget=ram_budget)
    except TargetError as exc:
        return {**key, "refused": str(exc)}
    compile_s = time.perf_counter() - t0
    run = run_on_qemu(out, inputs, timeout=300,
                      extra_cflags="-DKILN_ENABLE_TIMING" if kernels else "")
    return {**key, "flash": report["flash"], "ram": report["ram"],
            "instructions": run.instructions, "compile_s": compile_s, "qemu_s": run.seconds,
            "stack_used": (run.stack_bytes or (0, 0))[0],
            "check": _check(m, inputs, run.outputs, precision), "kernels": run.kernel_ticks,
            "hz": run.timer_hz}


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def print_table(rows: list[dict]) -> None:
    """The size table (KiB) with instructions per inference."""
    head = (f"{'model':<13} {'board':<16} {'prec':<4} {'flash':>7} {'kernels':>8} "
            f"{'weights':>8} {'runtime':>8} {'RAM':>7} {'arena':>7} {'anchor':>7} "
            f"{'stack':>9} {'instructions':>13} {'check':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        lead = f"{r['model']:<13} {r['board']:<16} {r['precision']:<4}"
        if "refused" in r:
            why = r["refused"].split(":", 1)[1].strip().split(" (estimate")[0]
            print(f"{lead} refused: {why}")
            continue
        f, ram = r["flash"], r["ram"]
        part = {k: f[k]["text"] + f[k]["rodata"] for k in ("weights", "kernels", "runtime")}
        anchor = _kib(ANCHORS[r["model"]][1]) \
            if r["precision"] == "int8" and r["model"] in ANCHORS else "-"
        stack = f"{_kib(r['stack_used'])}/{_kib(ram['stack']).split('.')[0]}"
        print(f"{lead} {_kib(f['total']):>7} {_kib(part['kernels']):>8} "
              f"{_kib(part['weights']):>8} {_kib(part['runtime']):>8} {_kib(ram['total']):>7} "
              f"{_kib(ram['arena']):>7} {anchor:>7} {stack:>9} {r['instructions'] or 0:>13,} "
              f"{r['check']:>11}")
    print("\nKiB = 1024 B. flash = .text + .rodata + .data init of the board link (kernels, "
          "weights, runtime = picolibc, start-up, main); RAM = arena + outputs + stack + "
          ".data/.bss; arena: the planned activations and kernel scratch (int8: int8 I/O "
          "tensors are the caller's); anchor: microTVM + CMSIS-NN int8 workspace (MLPerf "
          "Tiny v0.5); stack: high-water mark / size; instructions: QEMU -icount, one "
          "inference.")


def print_tuned(pairs: list[tuple[dict, dict]], trials: int) -> None:
    """Default vs tuned instructions per model (the same run, QEMU -icount)."""
    print(f"\ndefault vs tuned schedules ({f'--tune {trials}' if trials else 'records'}; "
          "instructions: QEMU -icount, one inference)")
    head = (f"{'model':<13} {'board':<16} {'prec':<4} {'default':>12} {'tuned':>12} "
            f"{'tuned/default':>13} {'flash KiB':>15} {'tune s':>7} {'check':>11}")
    print(head)
    print("-" * len(head))
    for r, t in pairs:
        if "refused" in r or "refused" in t:
            continue
        ratio = t["instructions"] / r["instructions"] if r["instructions"] else float("nan")
        flash = f"{_kib(r['flash']['total'])}/{_kib(t['flash']['total'])}"
        print(f"{r['model']:<13} {r['board']:<16} {r['precision']:<4} "
              f"{r['instructions'] or 0:>12,} {t['instructions'] or 0:>12,} {ratio:>13.3f} "
              f"{flash:>15} {format(r['tune_s'], '.0f') if 'tune_s' in r else '-':>7} "
              f"{t['check']:>11}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--ram-budget", type=int, default=None,
                    help="the most arena bytes (patch stages; default: the board's RAM)")
    ap.add_argument("--kernels", action="store_true",
                    help="also print instructions per kernel (firmware built with "
                         "-DKILN_ENABLE_TIMING)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="tune each model for the board under QEMU (N trials), then compare "
                         "default and tuned instructions")
    ap.add_argument("--records", type=Path, default=None, metavar="R.jsonl",
                    help="compare default and tuned instructions with these records")
    args = ap.parse_args()
    rows, tuned = [], []
    with tempfile.TemporaryDirectory(prefix="kiln-embedded-") as tmp:
        for model in args.models.split(","):
            for precision in args.precisions.split(","):
                for board in args.boards.split(","):
                    rows.append(_row(model, board, precision, Path(tmp), args.kernels,
                                     args.ram_budget))
                    records = args.records
                    if args.tune:
                        t0 = time.perf_counter()
                        records = _tune(Path(tmp) / f"{model}_{precision}.onnx", board,
                                        args.tune, Path(tmp) / f"{model}-{precision}-{board}"
                                        f".jsonl")
                        rows[-1]["tune_s"] = time.perf_counter() - t0
                    if records:
                        tuned.append((rows[-1], _row(model, board, precision, Path(tmp),
                                                     args.kernels, args.ram_budget, records)))
                    print(f"  done {model} {precision} on {board}", file=sys.stderr)
    print_table(rows)
    if tuned:
        print_tuned(tuned, args.tune)
    if args.kernels:
        for r in rows + [t for _, t in tuned]:
            if r.get("kernels"):
                how = " (tuned)" if r in (t for _, t in tuned) else ""
                print(f"\n{r['model']} {r['precision']} on {r['board']}{how}: instructions "
                      "per kernel")
                for index, name, ticks in r["kernels"]:
                    print(f"  {index:>3} {name:<48} {round(ticks * 1e9 / r['hz']):>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

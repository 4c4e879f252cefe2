"""Embedded benchmark: the MLPerf-Tiny-style zoo models in fp32 on each board.

    python benchmarks/embedded.py                   # 4 models x 4 boards
    python benchmarks/embedded.py --models ds_cnn --boards nucleo-l4r5zi --kernels

Per model and board it compiles with ``--board`` (fit check, cross build), reads flash and
RAM from the linked ELF's map (toolchain.boards.size), runs the firmware once on the
board's QEMU machine and prints the executed instructions of one inference.

QEMU does not model cycles (DWT CYCCNT reads 0).  With ``-icount shift=0`` its virtual
clock advances 1 ns per instruction, so the 25 MHz CMSDK timer the firmware reads around
the inference counts instructions in steps of 40 (exact to within 40).  Instructions are
not cycles: a Cortex-M4 needs ~1.2-2 cycles per instruction on this code (loads, FPU,
flash wait states), so multiply by that for a rough time at the board's clock.

The MLPerf Tiny v0.5 anchors (microTVM + CMSIS-NN, int8) are printed beside the arena for
reference; these runs are fp32 (4x the weights and activations), the int8 path comes later.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

#: MLPerf Tiny v0.5 microTVM (CMSIS-NN, int8) workspace bytes per model
ANCHORS = {"ds_cnn": 17_232, "mobilenet_v1": 64_800, "resnet8": 66_112, "autoencoder": 1_160}
MODELS = ["ds_cnn", "resnet8", "mobilenet_v1", "autoencoder"]
BOARDS = ["qemu-mps2-an386", "nucleo-l4r5zi", "stm32f746g-disco", "nrf52840dk"]


def _row(model: str, board: str, work: Path, kernels: bool) -> dict:
    from tests.models.zoo import ZOO
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.bundle.check import compare
    from toolchain.errors import TargetError
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    spec = ZOO[model]
    m = spec.build()
    path = work / f"{model}.onnx"
    onnx.save(m, path)
    inputs = spec.inputs(m)
    t0 = time.perf_counter()
    try:
        out, report = compile_board(path, board, work / f"{model}-{board}", name=model)
    except TargetError as exc:
        return {"model": model, "board": board, "refused": str(exc)}
    compile_s = time.perf_counter() - t0
    run = run_on_qemu(out, inputs, timeout=300,
                      extra_cflags="-DKILN_ENABLE_TIMING" if kernels else "")
    ref = run_graph(from_onnx(m), inputs)
    err = max(r["max_rel"] for r in compare(run.outputs, ref))
    return {"model": model, "board": board, "flash": report["flash"], "ram": report["ram"],
            "instructions": run.instructions, "compile_s": compile_s, "qemu_s": run.seconds,
            "max_rel": err, "kernels": run.kernel_ticks, "hz": run.timer_hz}


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--kernels", action="store_true",
                    help="also print instructions per kernel (firmware built with "
                         "-DKILN_ENABLE_TIMING)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-embedded-") as tmp:
        for model in args.models.split(","):
            for board in args.boards.split(","):
                rows.append(_row(model, board, Path(tmp), args.kernels))
                print(f"  done {model} on {board}", file=sys.stderr)
    head = (f"{'model':<13} {'board':<17} {'flash KiB':>9} {'weights':>8} {'kernels':>8} "
            f"{'runtime':>8} {'RAM KiB':>8} {'arena':>8} {'int8 anchor':>11} "
            f"{'instructions':>13} {'max rel err':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "refused" in r:
            why = r["refused"].split(":", 1)[1].strip().split(" (estimate")[0]
            print(f"{r['model']:<13} {r['board']:<17} refused: {why}")
            continue
        f, ram = r["flash"], r["ram"]
        part = {k: f[k]["text"] + f[k]["rodata"] for k in ("weights", "kernels", "runtime")}
        print(f"{r['model']:<13} {r['board']:<17} {_kib(f['total']):>9} "
              f"{_kib(part['weights']):>8} {_kib(part['kernels']):>8} "
              f"{_kib(part['runtime']):>8} {_kib(ram['total']):>8} {_kib(ram['arena']):>8} "
              f"{_kib(ANCHORS.get(r['model'], 0)):>11} {r['instructions'] or 0:>13,} "
              f"{r['max_rel']:>11.1e}")
    print("\nflash = .text + .rodata + .data init of the board link; RAM = arena + outputs + "
          "stack + .data/.bss; KiB = 1024 B.\ninstructions: QEMU -icount, one inference "
          "(autoencoder: a batch of 8 frames); the anchor is microTVM's int8 workspace.")
    if args.kernels:
        for r in rows:
            if r.get("kernels"):
                print(f"\n{r['model']} on {r['board']}: instructions per kernel")
                for index, name, ticks in r["kernels"]:
                    print(f"  {index:>3} {name:<48} {round(ticks * 1e9 / r['hz']):>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

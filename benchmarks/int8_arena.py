"""int8 arenas of the MLPerf-Tiny-style zoo models next to microTVM's workspaces.

    python benchmarks/int8_arena.py                       # cortex-m4 (nucleo-l4r5zi's target)
    python benchmarks/int8_arena.py --targets cortex-m4,c-generic --peak
    python benchmarks/int8_arena.py --ram-budget 28672       # patch-based inference column

Each model is quantized by Kiln itself (``kiln quantize``'s PTQ, 8 seeded random
calibration samples) the way the MLPerf Tiny int8 reference models are: int8 input and
output tensors (``integer_io=True``: the caller's, not in the arena), batch 1; the
autoencoder returns its reconstruction only (the harness computes the anomaly score), so
every row is comparable with the microTVM + CMSIS-NN workspace of the MLPerf Tiny v0.5
submission. It is compiled for each target and the planned arena read from the bundle's
``metadata.json``:

* ``arena``: what the bundle allocates (64-byte aligned buffers);
* ``no overlap``: the same plan with every overlap output (a kernel's output started
  inside its input, ``toolchain.graph.overlap``) in a buffer of its own, placed again: the
  arena before overlaps; ``saved`` is 1 - arena / no overlap;
* ``tensors``: the model's activations alone (the planner's share), without
  * ``scratch``: the largest kernel workspace (int32 accumulators or packed inputs the
    int8 schedules keep in the arena for one kernel);
* ``--peak`` lists the buffers live at the fullest step;
* ``--ram-budget BYTES`` compiles each model again with that budget (patch-based inference
  of its first convolutions, docs/embedded.md) and prints the patched arena, the stage
  (layers, grid) and its extra multiply-adds, or why the budget cannot be met.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import toolchain  # noqa: E402
from toolchain.zoo.quantized import ANCHORS, anchor_model, arena_report  # noqa: E402


def patched(path: Path, target: str, out: Path, budget: int, arena: int) -> str:
    """One line: the arena with ``budget`` (patch stages), or why it cannot be met."""
    from toolchain.errors import OptionError

    try:
        meta = toolchain.compile(path, target, output=out, ram_budget=budget).metadata
    except OptionError as exc:
        return f"--ram-budget {budget:,}: not met ({str(exc).split('; ')[-1][:120]})"
    stages = meta.get("patch_stages", [])
    if not stages:
        return f"--ram-budget {budget:,}: met without patches (arena {arena:,})"
    st = stages[0]
    return (f"--ram-budget {budget:,}: arena {meta['arena_bytes']:,} B "
            f"({meta['arena_bytes'] / arena:.2f}x of {arena:,}), patch stage "
            f"{st['layers'][0]} .. {st['layers'][-1]} ({len(st['layers'])} layers"
            f"{', ending in ' + st['pool'] if 'pool' in st else ''}), grid "
            f"{st['grid'][0]}x{st['grid'][1]}, +{st['extra_macs']:.1%} MACs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="cortex-m4")
    ap.add_argument("--models", default=",".join(ANCHORS))
    ap.add_argument("--peak", action="store_true", help="list the buffers at the peak step")
    ap.add_argument("--ram-budget", type=int, metavar="BYTES",
                    help="also compile with this RAM budget (patch stages)")
    args = ap.parse_args()
    head = (f"{'model':<13} {'task':<4} {'target':<10} {'no overlap':>10} {'arena':>8} "
            f"{'saved':>6} {'tensors':>8} {'scratch':>8}  {'microTVM':>9} {'arena/anchor':>12}"
            "  largest scratch kernel")
    print(head)
    print("-" * len(head))
    peaks = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            task, anchor = ANCHORS[name]
            path = Path(tmp) / f"{name}_int8.onnx"
            onnx.save(anchor_model(name), path)
            for target in args.targets.split(","):
                out = Path(tmp) / f"{name}-{target}"
                toolchain.compile(path, target, output=out)
                r = arena_report(out)
                kernel, scratch = r["scratch"]
                saved = 1 - r["arena"] / r["no_overlap"] if r["no_overlap"] else 0.0
                print(f"{name:<13} {task:<4} {target:<10} {r['no_overlap']:>10,} "
                      f"{r['arena']:>8,} {saved:>6.1%} {r['tensors']:>8,} {scratch:>8,}  "
                      f"{anchor:>9,} {r['arena'] / anchor:>12.2f}  {kernel}")
                peaks.append((name, target, r["peak"]))
                if args.ram_budget:
                    print("    " + patched(path, target, Path(tmp) / f"{name}-{target}-p",
                                           args.ram_budget, r["arena"]))
    print("\nbytes; int8 I/O tensors belong to the caller (as in microTVM's workspace); "
          "tensors = activations only, scratch = largest kernel workspace")
    if args.peak:
        for name, target, peak in peaks:
            print(f"\n{name} on {target}, live at the peak step:")
            for buf, size in peak:
                print(f"  {size:>8,}  {buf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Print the static memory plan of every zoo model: arena vs lower bound vs naive, and the
arena of the file's node order vs the searched order.

    python benchmarks/memory_plan.py                    # every zoo model, layout nchw
    python benchmarks/memory_plan.py --target c-generic # as kiln compile plans it (scratch)
    python benchmarks/memory_plan.py --layout nchw8c    # AVX2-style blocked layout
    python benchmarks/memory_plan.py resnet8 mlp        # some models
    python benchmarks/memory_plan.py --no-inplace       # without in-place reuse
    python benchmarks/memory_plan.py --random 20        # also 20 random lifetime sets
    python benchmarks/memory_plan.py --target cortex-m4 --patch-ratio 0.5 mobilenet_v2

Each model is imported by the frontend, optimised by the default pass pipeline
(``toolchain.graph.passes.run_pipeline``) and planned by ``toolchain.graph.memory``:

* nodes / kernels — graph nodes before the passes, ``Fused`` kernels after them;
* arena — bytes the plan needs; lower bound — the largest sum of live (aligned) buffer bytes
  at one step; naive — every intermediate in its own place;
* in-place — tensors that reuse a dying input's buffer (overlap outputs included);
* overlap — outputs that start inside their dying input at the lead their kernel
  declared (``toolchain.graph.overlap``; only with ``--target``, whose kernels declare it);
* file order / searched — the arena with the nodes in the file's order and in the order
  the order search chose (``toolchain.graph.order``; equal when the file's is best), and
  the change;
* plan ms — time of ``plan_in_best_order`` (order search, then greedy by size + local
  search, for both orders) on this machine.

The last rows are ``toolchain.zoo.DEMOS`` (``interleaved_branches``: an order the exporter
got wrong).  ``--target NAME`` compiles each model for that target (``build_spec``: the
target's layout and its kernels' scratch, as ``kiln compile`` plans it; slower).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.memory import MemoryPlan, plan_lifetimes  # noqa: E402
from toolchain.graph.order import plan_in_best_order  # noqa: E402
from toolchain.graph.passes import run_pipeline  # noqa: E402
from toolchain.zoo import DEMOS, ZOO  # noqa: E402

MODELS = {**ZOO, **DEMOS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*",
                        help=f"zoo models (default all: {', '.join(MODELS)})")
    parser.add_argument("--layout", default="nchw", help="target layout: nchw, nhwc, nchw8c ...")
    parser.add_argument("--target", default=None,
                        help="plan as kiln compile does for this target (its layout, scratch)")
    parser.add_argument("--alignment", type=int, default=64)
    parser.add_argument("--no-inplace", action="store_true", help="disable in-place reuse")
    parser.add_argument("--patch-ratio", type=float, default=None, metavar="R",
                        help="with --target: compile each model again with a RAM budget of "
                             "R x its file-order lower bound (patch-based inference)")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also plan N random sets of 120 lifetimes: greedy vs local search")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(MODELS)}")

    where = f"target {args.target}" if args.target else f"layout {args.layout}"
    print(f"{where}, alignment {args.alignment} B, "
          f"in-place {'off' if args.no_inplace else 'on'}\n")
    print("| model | nodes | kernels | tensors | in-place | overlap | arena (B) | lower bound (B) "
          "| naive (B) | arena / bound | file order (B) | searched (B) | change | plan ms |")
    print("| --- |" + " ---: |" * 13)
    worst = 0.0
    for name in args.models or list(MODELS):
        nodes, kernels, plan, ms = _plan(name, args)
        plan.check()
        ratio = plan.arena_bytes / plan.lower_bound if plan.lower_bound else 1.0
        worst = max(worst, ratio)
        inplace = sum(1 for t in plan.tensors if t.inplace_of)
        sizes = {t.name: t.size for t in plan.tensors}
        overlap = sum(1 for t in plan.tensors if t.inplace_of
                      and (t.lead or t.size != sizes[t.inplace_of]))
        before = plan.file_arena_bytes or plan.arena_bytes
        change = f"{(plan.arena_bytes - before) / before:+.1%}" if before else "+0.0%"
        print(f"| {name} | {nodes} | {kernels} | {len(plan.tensors)} "
              f"| {inplace} | {overlap} | {plan.arena_bytes:,} | {plan.lower_bound:,} "
              f"| {plan.naive_bytes:,} | {ratio:.3f} | {before:,} | {plan.arena_bytes:,} "
              f"| {change} | {ms:.1f} |")
    print(f"\nworst arena / lower bound: {worst:.3f} (goal <= 1.05)")
    if args.patch_ratio is not None:
        if not args.target:
            parser.error("--patch-ratio needs --target (it compiles the models)")
        _patched(args)
    if args.random:
        _random_sets(args.random, args.alignment)
    return 0


def _plan(name: str, args: argparse.Namespace) -> tuple[int, int, MemoryPlan, float]:
    """(nodes before the passes, kernels, the plan in the best order, plan ms)."""
    spec = MODELS[name]
    if args.target:
        from toolchain.bundle.compiler import build_spec

        start = time.perf_counter()
        built = build_spec(spec.build(), args.target, input_shapes=spec.input_shapes,
                           name=name, progress=False)
        return (len(built.graph.nodes), len(built.fused.nodes), built.plan,
                (time.perf_counter() - start) * 1e3)
    graph = from_onnx(spec.build(), input_shapes=spec.input_shapes)
    fused = run_pipeline(graph, target_layout=args.layout)
    start = time.perf_counter()
    _, plan = plan_in_best_order(fused, alignment=args.alignment,
                                 inplace=not args.no_inplace)
    return len(graph.nodes), len(fused.nodes), plan, (time.perf_counter() - start) * 1e3


def _patched(args: argparse.Namespace) -> None:
    """Per model: the arena with a RAM budget of ``--patch-ratio`` x the file-order lower
    bound (patch stages, docs/embedded.md), against that bound, or why it is not met."""
    from toolchain.bundle.compiler import build_spec
    from toolchain.errors import OptionError

    print(f"\nwith --ram-budget = {args.patch_ratio} x the file-order lower bound "
          f"(target {args.target}):\n")
    print("| model | file-order bound (B) | budget (B) | arena (B) | arena / bound "
          "| patch stage | extra MACs |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for name in args.models or list(MODELS):
        spec = MODELS[name]
        plain = build_spec(spec.build(), args.target, input_shapes=spec.input_shapes,
                           name=name, progress=False).plan
        bound = plain.file_lower_bound or plain.lower_bound
        budget = int(args.patch_ratio * bound)
        try:
            built = build_spec(spec.build(), args.target, input_shapes=spec.input_shapes,
                               name=name, progress=False, ram_budget=budget)
        except OptionError as exc:
            print(f"| {name} | {bound:,} | {budget:,} | not met | | "
                  f"{str(exc).split('; ')[-1][:90]} | |")
            continue
        stages = [k.patch.stage for k in built.kernels
                  if k.patch is not None and k.patch.index == 0]
        what = "; ".join(f"{s.layers[0].node} .. {s.layers[-1].node} ({len(s.layers)}), "
                         f"{s.grid[0]}x{s.grid[1]}" for s in stages) or "none needed"
        extra = f"+{stages[0].overhead():.1%}" if stages else ""
        print(f"| {name} | {bound:,} | {budget:,} | {built.plan.arena_bytes:,} "
              f"| {built.plan.arena_bytes / bound:.3f} | {what} | {extra} |")


def _random_sets(n: int, alignment: int) -> None:
    """Harder instances than the zoo's chains: 120 tensors with random sizes and lifetimes."""
    import random

    greedy, searched = [], []
    for seed in range(n):
        rng = random.Random(seed)
        tensors = []
        for i in range(120):
            first = rng.randrange(100)
            tensors.append((f"t{i}", rng.randrange(1, 1 << 16), first,
                            first + rng.randrange(12)))
        for out, moves in ((greedy, 0), (searched, 400)):
            plan = plan_lifetimes(tensors, alignment=alignment, search_moves=moves)
            plan.check()
            out.append(plan.arena_bytes / plan.lower_bound)
    print(f"\n{n} random sets of 120 lifetimes, arena / lower bound:")
    print(f"  greedy by size only:   mean {sum(greedy) / n:.3f}, worst {max(greedy):.3f}")
    print(f"  + local search (400):  mean {sum(searched) / n:.3f}, worst {max(searched):.3f}")


if __name__ == "__main__":
    raise SystemExit(main())

"""CPU seconds of Kiln's lowering pipeline alone, replayed on the functions some tests lower,
optionally against another source tree.

    python benchmarks/lower_replay.py record /tmp/funcs.pkl tests/schedules/generic/test_conv2d.py
    python benchmarks/lower_replay.py replay /tmp/funcs.pkl --ref /tmp/old-kiln --rounds 3

``record`` runs pytest (``-n 0``, the given arguments) with this file as a plugin: every
PrimFunc handed to ``toolchain.tir.transform.pipeline.lower`` (and the target it is
lowered for) is pickled into the file at the end (those that do not pickle are left out
and counted). ``replay`` lowers them all again in a fresh process per tree (``PYTHONPATH``
= the tree), once untimed, then ``--repeat`` times timed (``time.process_time``, the
simplifier's memo cleared first, the garbage collector paused as the compiler pauses it:
with it running, where the collections fall moves the figure by a fifth); the minimum of
the whole lowering and of its ``simplify`` passes is printed. With ``--ref`` the trees
alternate for ``--rounds`` rounds and the table gives the best of each and the ratio
(below 1: this tree is faster). The pickle holds IR classes by module path: record and
replay with trees whose IR pickles alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_cpu import run_child  # noqa: E402  (benchmarks/compile_cpu.py)

_CHILD = r"""
import gc, importlib, json, pickle, sys, time
from toolchain.tir import memo
from toolchain.tir.transform import pipeline

path, repeat = sys.argv[1], int(sys.argv[2])
data = open(path, "rb").read()
simplify_pass = importlib.import_module("toolchain.tir.transform.simplify").simplify
spent = [0.0]


def timed(func):
    t = time.process_time()
    try:
        return simplify_pass(func)
    finally:
        spent[0] += time.process_time() - t


pipeline.PHASES = {ph: tuple(timed if fn is simplify_pass else fn for fn in fns)
                   for ph, fns in pipeline.PHASES.items()}
best = best_simplify = float("inf")
for r in range(repeat + 1):
    items = pickle.loads(data)
    memo.clear_cache()
    gc.collect()
    spent[0] = 0.0
    gc.disable()
    t = time.process_time()
    for func, target in items:
        pipeline.lower(func, target=target)
    dt = time.process_time() - t
    gc.enable()
    if r:
        best, best_simplify = min(best, dt), min(best_simplify, spent[0])
print(json.dumps({"funcs": len(items), "cpu_s": best, "simplify_s": best_simplify}))
"""

# ------------------------------------------------------------------ the recording plugin

_RECORDED: list = []


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook
    """Wrap the pipeline's first pass: it sees every function ``lower`` is given."""
    if not os.environ.get("KILN_LOWER_REPLAY_OUT"):
        return
    from toolchain.tir.transform import pipeline

    first = pipeline.PHASES[1][0]

    def spy(func, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        _RECORDED.append((func, kwargs.get("target")))
        return first(func, *args, **kwargs)

    spy.__name__ = first.__name__
    pipeline.PHASES[1] = (spy, *pipeline.PHASES[1][1:])


def pytest_unconfigure(config) -> None:  # noqa: ANN001 - pytest's hook
    out = os.environ.get("KILN_LOWER_REPLAY_OUT")
    if not out:
        return
    import pickle

    kept = []
    for func, target in _RECORDED:
        # what an earlier lowering left on the input (where it stopped, "simplified")
        func.__dict__.pop("_lowered_until", None)
        func.__dict__.pop("_simplified", None)
        for item in ((func, target), (func, None)):
            try:
                pickle.dumps(item)
            except Exception:  # noqa: BLE001 - what does not pickle is left out
                continue
            kept.append(item)
            break
    with open(out, "wb") as fh:
        pickle.dump(kept, fh)
    print(f"\nlower_replay: {len(kept)} of {len(_RECORDED)} functions recorded in {out}")


# ------------------------------------------------------------------ the command


def measure(tree: Path, path: Path, repeat: int) -> dict:
    """The replay in a fresh process on ``tree``."""
    return run_child(tree, _CHILD, [str(path), str(repeat)], "replay")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run pytest and keep what it lowers")
    rec.add_argument("file", type=Path)
    rec.add_argument("pytest_args", nargs="+")
    rep = sub.add_parser("replay", help="lower the recorded functions again, timed")
    rep.add_argument("file", type=Path)
    rep.add_argument("--ref", type=Path, default=None, help="another Kiln source tree")
    rep.add_argument("--repeat", type=int, default=3, help="timed replays per process")
    rep.add_argument("--rounds", type=int, default=1, help="processes per tree (alternating)")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        env = dict(os.environ, KILN_LOWER_REPLAY_OUT=str(args.file.resolve()),
                   PYTHONPATH=os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT),
                                               os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "lower_replay", "-n",
                               "0", "-q", *args.pytest_args], cwd=ROOT, env=env).returncode
    trees = [ROOT] + ([args.ref.resolve()] if args.ref else [])
    best: dict[Path, dict] = {}
    for _ in range(args.rounds):
        for tree in trees:
            r = measure(tree, args.file.resolve(), args.repeat)
            b = best.get(tree)
            best[tree] = r if b is None else {k: min(v, r[k]) for k, v in b.items()}
    this = best[ROOT]
    print(f"{this['funcs']} functions   this CPU s (simplify)"
          + ("   ref CPU s (simplify)   this/ref" if args.ref else ""))
    line = f"lower          {this['cpu_s']:8.3f} ({this['simplify_s']:.3f})"
    if args.ref:
        ref = best[trees[1]]
        line += (f"        {ref['cpu_s']:8.3f} ({ref['simplify_s']:.3f})"
                 f"       {this['cpu_s'] / ref['cpu_s']:.2f}")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

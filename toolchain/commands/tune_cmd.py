"""``kiln tune``: search the schedules of a model's kernels, write tuning records.

See docs/tuning.md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolchain.commands._model_args import add_model_arguments, input_shapes

HELP = "auto-tune the kernels of a model and write tuning records (JSON lines)"

EPILOG = """\
examples:
  kiln tune model.onnx --target x86_64-avx2 --trials 256 -o model.records.jsonl
  kiln tune model.onnx --target x86_64-avx2 --trials 512 -o model.records.jsonl  # resumes
  kiln tune model.onnx --target x86_64-avx2 --trials 64 -o r.jsonl --search random
  kiln tune model.onnx --target x86_64-avx2 --trials 64 -o r.jsonl --plot curves/
  kiln tune model.onnx --target x86_64-avx2 --spaces       # the knobs of each kernel
  kiln tune model.onnx --target cortex-m4 --runner qemu --trials 64 -o m4.jsonl
  kiln tune model.onnx --target x86_64-avx2 --trials 256 -o r.jsonl --ray local
  kiln tune model.onnx --target cuda-sm90 --trials 64 -o gpu.jsonl      # on the GPU
  kiln tune model.onnx --target cuda-sm80 --trials 16 -o chk.jsonl --runner emulate
  kiln tune model_int8.onnx --target vta --trials 200 -o vta.jsonl   # accelerator tilings
  kiln tune model_int8.onnx --target vta --runner rtl --trials 64 -o vta_rtl.jsonl
  kiln compile model.onnx --target x86_64-avx2 --records model.records.jsonl -o build/m

--trials is the budget of the whole model, spread over its kernels by expected gain;
the trials of its kernels already in the records file (or in its .partial file, after an
interrupted run: Ctrl-C or SIGTERM) count, so a second run with a larger budget
continues the first. Records are written to OUT.partial as they are measured and renamed
to OUT when the run ends: OUT is never half-written. One run at a time per OUT; trials of
another runner, or measured otherwise (another --repeat, --flush-mb or --cold-mb, another
CPU or GPU: each record's "conditions"), are not resumed (write to another file).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_model_arguments(parser)
    parser.add_argument("--target", default="c-generic", metavar="NAME|FILE.yaml",
                        help="target descriptor: a name from targets/, a YAML file, or "
                             "host (as kiln compile; default: c-generic)")
    parser.add_argument("--trials", type=int, metavar="N",
                        help="trials for the whole model (its kernels' earlier trials in the "
                             "records file included)")
    parser.add_argument("-o", "--output", metavar="RECORDS.jsonl",
                        help="the records file to write (resumed when it exists)")
    parser.add_argument("--spaces", action="store_true",
                        help="print each task's search space (knobs, defaults, rules) and "
                             "exit without tuning")
    parser.add_argument("--generic", action="store_true",
                        help="also tune the kernels of the rule-driven CPU schedule (softmax, "
                             "layer norm, element-wise chains, pooling, transposes: the "
                             "cpu_ops space)")
    parser.add_argument("--search", choices=("xgb", "random"), default="xgb",
                        help="xgb (default): simulated annealing over an xgboost rank model; "
                             "random: uniform random search")
    parser.add_argument("--batch", type=int, default=8, metavar="N",
                        help="trials measured per round (default 8)")
    parser.add_argument("--runner", choices=("local", "qemu", "emulate", "model", "rtl"),
                        default=None,
                        help="local (default): time kernels on this CPU (a CUDA target: on "
                             "this machine's GPU, CUDA events); qemu: count the "
                             "instructions of kernels built for a Cortex-M board under QEMU; "
                             "emulate (CUDA targets): build each point with nvcc and check "
                             "it against the default by the SIMT emulation on the CPU, no "
                             "timing (records of such a run are never applied); for an "
                             "accelerator target (--target vta): model (default: the cycle "
                             "model plus 30 cycles an instruction) or rtl (cycles of the "
                             "Verilog RTL, Verilator)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="build processes (default: the CPUs, at most 4); with --ray: "
                             "the most build tasks on the cluster at once (default: a "
                             "batch's builds all at once)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="timed repeats per trial; the cost is the least (default 3)")
    parser.add_argument("--flush-mb", type=int, default=8, metavar="MB",
                        help="MiB rewritten between timed repeats to flush the caches "
                             "(default 8; 0: measure warm, as kernels run inside a network)")
    parser.add_argument("--cold-mb", type=int, default=0, metavar="MB",
                        help="local runner: the timed calls cycle through copies of each "
                             "kernel's arguments spanning this many MiB, so every call finds "
                             "its weights out of the caches, as in a model whose weights "
                             "exceed them (e.g. 64 for ResNet-18; default 0: warm)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds a kernel may run before the trial fails (default 10)")
    parser.add_argument("--transfer", action="append", default=[], metavar="RECORDS.jsonl",
                        help="earlier records of other models to train the cost model with "
                             "(repeatable)")
    parser.add_argument("--ray", metavar="ADDRESS|local",
                        help="build and measure on a Ray cluster (docs/tuning.md)")
    parser.add_argument("--ray-devices", type=int, default=1, metavar="N",
                        help="with --ray: measurement actors (devices) to start (default 1)")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                        help="tune the model as kiln compile --precision builds it (fp16: "
                             "float16 inside, the CUDA tensor-core kernels; default fp32)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--plot", metavar="DIR",
                        help="write a tuning-curve SVG per task into DIR")
    parser.add_argument("--no-progress", action="store_true",
                        help="never show a progress bar")


def run(args: argparse.Namespace) -> int:
    from toolchain.autotune.records import RecordWriter, load_records
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.errors import InputError, OptionError
    from toolchain.target import resolve_target

    if not Path(args.model).is_file():
        raise InputError(f"model file {args.model} does not exist")
    if args.spaces:
        target = resolve_target(args.target)
        _check_precision(args.precision, target)
        for t in extract_tasks(args.model, target, input_shapes(args), args.precision,
                               generic=args.generic):
            print(f"{t.name} (x{t.weight}, {t.flops:,} FLOPs): {t.space}")
        return 0
    if args.trials is None or args.output is None:
        raise OptionError("kiln tune needs --trials N and -o RECORDS.jsonl (or --spaces)")
    if args.trials < 1:
        raise OptionError(f"--trials {args.trials}: must be at least 1")
    if args.batch < 1:
        raise OptionError(f"--batch {args.batch}: must be at least 1")
    if args.flush_mb < 0:
        raise OptionError(f"--flush-mb {args.flush_mb}: must be 0 or more")
    if args.cold_mb < 0:
        raise OptionError(f"--cold-mb {args.cold_mb}: must be 0 or more")
    target = resolve_target(args.target)
    _check_precision(args.precision, target)
    args.runner = _runner_for(args.runner, target, args.ray)
    if args.cold_mb and (args.runner != "local" or args.ray):
        raise OptionError(f"--cold-mb {args.cold_mb}: cold timings are the local runner's; "
                          + ("--ray measures warm" if args.ray else
                             "--runner qemu counts instructions, which caches do not change"
                             if args.runner == "qemu" else
                             f"--runner {args.runner} times nothing on this CPU"
                             if args.runner == "emulate" else
                             f"--runner {args.runner} counts accelerator cycles")
                          + " (leave --cold-mb out)")
    if args.repeat < 1:
        raise OptionError(f"--repeat {args.repeat}: must be at least 1")
    if not args.timeout > 0:  # 0 failed every trial; below 0 was an internal error
        raise OptionError(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    for flag, n in (("--jobs", args.jobs), ("--ray-devices", args.ray_devices)):
        if n is not None and n < 1:  # taken as the default or 1 before, silently
            raise OptionError(f"{flag} {n}: must be at least 1")
    if target.kind == "cuda":  # no GPU: refused before anything is read or written
        from toolchain.autotune.cuda import refuse_without_gpu

        refuse_without_gpu(args.runner)
    transfer = [r for f in args.transfer for r in load_records(f)]
    writer = RecordWriter(args.output, resume=True)  # locked: one run per file
    try:
        with _terminate_as_interrupt():
            return _tune(args, target, writer, transfer)
    except KeyboardInterrupt:
        kept = (f"{writer.appended} new {_trials(writer.appended)} kept in "
                f"{writer.partial} ({writer.appended + len(writer.existing)} in all); run "
                "the same command to resume" if writer.partial.is_file() else
                f"nothing written; {args.output} is as it was")
        print(f"kiln tune: interrupted: {kept}", file=sys.stderr)
        raise
    finally:
        writer.release()


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a job's time limit) stops the run as Ctrl-C does: the build pool
    and the timing process are shut down and the partial records kept. Without it the
    pool's worker processes outlived the run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _tune(args: argparse.Namespace, target: Any, writer: Any, transfer: list) -> int:
    """Tune ``args.model``'s tasks into ``writer`` and print the summary."""
    from toolchain.autotune.records import UNTIMED_UNITS
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import outcome, tune_tasks

    tasks = extract_tasks(args.model, target, input_shapes(args), args.precision,
                          generic=args.generic)
    if not tasks:
        print(f"{args.model}: no kernel with a tunable schedule on {target.name}; nothing "
              "to tune")
        return 0
    workloads = {t.space.workload for t in tasks}
    mine = [r for r in writer.existing if r.workload in workloads]
    print(f"tuning {len(tasks)} tasks of {args.model} on {target.name} "
          f"({_earlier(len(writer.existing), len(mine), writer.source or args.output)})")
    for t in tasks:
        print(f"  {t.name}: {t.space.kind} x{t.weight}, {len(t.space.knobs)} knobs, "
              f"{t.space.size} points before rules")
    builder, runner = _measurement(args, target)
    try:
        _check_resumed_runner(mine, runner, args.output)
        said = getattr(runner, "conditions", None)
        conditions = said() if said is not None else None
        _check_resumed_conditions(mine, conditions, writer.source or args.output)
        with writer:
            states = tune_tasks(tasks, args.trials, builder=builder, runner=runner,
                                writer=writer, strategy=args.search, batch=args.batch,
                                seed=args.seed, earlier=writer.existing, transfer=transfer,
                                progress=False if args.no_progress else None,
                                conditions=conditions)
    finally:
        builder.close()
        runner.close()
    print(f"wrote {args.output}: {writer.appended} new {_trials(writer.appended)} "
          f"({writer.appended + len(writer.existing)} in all)")
    unit = runner.unit
    for st in states:
        if not st.trials:
            print(f"  {st.task.name}: no trials (raise --trials)")
            continue
        failed = f" ({st.failed} failed)" if st.failed and unit not in UNTIMED_UNITS else ""
        print(f"  {st.task.name}: {st.trials} {_trials(st.trials)}{failed}, "
              f"{outcome(st, unit)}")
    if args.plot:
        _plot(args.plot, states, unit)
    if unit in UNTIMED_UNITS:  # --runner emulate: nothing was timed
        print("  (points checked by the SIMT emulation, not timed: kiln compile never "
              "applies these records)")
        return 0
    print(_use_hint(args, states))
    return 0


def _use_hint(args: argparse.Namespace, states: list[Any]) -> str:
    """The summary's last line: the ``kiln compile --records`` command where some task has
    a successful trial (this run's or an earlier one's), naming the tasks without one;
    else that there is nothing to use, and why (the command was printed even then)."""
    empty = [st.task.name for st in states if not math.isfinite(st.best)]
    if len(empty) == len(states):
        return (f"  nothing to use: no trial of {'its task' if len(states) == 1 else 'any task'}"
                f" succeeded ({args.output} holds the errors, see each task above); kiln "
                "compile --records would build every kernel with the default schedule")
    hint = (f"  use: kiln compile {args.model} --target {args.target} --records {args.output} "
            "-o DIR")
    if empty:
        keep = "it keeps" if len(empty) == 1 else "they keep"
        hint += f" ({', '.join(empty)}: no successful trial, {keep} the default schedule)"
    return hint


def _earlier(found: int, mine: int, output: str | Path) -> str:
    """How many trials the records file already holds — ``output``: the file they were
    read from, ``OUT.partial`` after an interrupted run — and how many of them are of this
    run's kernels (only those count against ``--trials`` and seed the search).

    >>> _earlier(0, 0, "r.jsonl"), _earlier(1, 1, "r.jsonl")
    ('0 earlier trials in r.jsonl', '1 earlier trial in r.jsonl')
    >>> _earlier(64, 0, "r.jsonl")
    "64 earlier trials in r.jsonl, none of this run's kernels: kept, not resumed"
    """
    text = f"{found} earlier {_trials(found)} in {output}"
    if mine == found:
        return text
    return (f"{text}, {mine or 'none'} of this run's kernels: "
            f"{'kept, not resumed' if not mine else 'the rest kept, not resumed'}")


def _check_resumed_runner(mine: list, runner: Any, output: str) -> None:
    """Refuse to resume trials of this run's kernels measured by another runner: costs in
    instructions, cycles, seconds or checks do not compare, and the records' best (what
    ``kiln compile --records`` applies) would mix them. A Ray runner is its device's."""
    from toolchain.autotune.records import device
    from toolchain.errors import OptionError

    other = sorted({(r.runner, r.unit) for r in mine
                    if r.runner != "?" and device(r.runner) != device(runner.name)})
    if not other:
        return
    n = sum(1 for r in mine if (r.runner, r.unit) in other)
    by = ", ".join(f"{name} ({unit})" for name, unit in other)
    raise OptionError(f"{output}: {n} earlier {_trials(n)} of this run's kernels measured by "
                      f"{by}; this run measures by {runner.name} ({runner.unit}), and the "
                      "costs of two runners do not compare: resume with the runner that "
                      "wrote them, or write to another file (-o)")


def _check_resumed_conditions(mine: list, conditions: dict[str, Any] | None,
                              source: str | Path) -> None:
    """Refuse to resume trials of this run's kernels measured otherwise (another
    ``--repeat``, ``--flush-mb``, ``--cold-mb``, CPU or GPU): their costs do not compare
    with this run's, and the search and the file's best would mix them. Trials that do
    not say how they were measured (written by an earlier Kiln) are resumed with a note.
    ``conditions`` None (a runner that does not say): nothing to compare."""
    from toolchain.autotune.conditions import (
        MACHINE,
        OPTIONS,
        describe,
        differences,
        phrase,
        say,
    )
    from toolchain.errors import OptionError

    if conditions is None:
        return
    unknown = sum(1 for r in mine if r.conditions is None)
    first = next((d[0] for r in mine if r.conditions is not None
                  for d in [differences(r.conditions, conditions)] if d), None)
    if first is not None:  # the first condition that differs, and its earlier value
        key, old, new = first
        n = sum(1 for r in mine if r.conditions is not None and r.conditions.get(key) == old)
        hint = (f"run with {say(key, old)} to resume them" if key in OPTIONS else
                "resume them on the machine that measured them" if key in MACHINE else
                "resume them with the Kiln that measured them")
        raise OptionError(f"{source}: {n} earlier {_trials(n)} of this run's kernels "
                          f"measured {phrase(key, old)}; this run measures {phrase(key, new)}, "
                          f"and costs measured differently do not compare: {hint}, or write "
                          "to another file (-o)")
    if unknown:
        do, it, was = ("does", "it", "was") if unknown == 1 else ("do", "they", "were")
        print(f"  note: {unknown} earlier {_trials(unknown)} of this run's kernels in {source} "
              f"{do} not say how {it} {was} measured (written by an earlier Kiln): resumed as "
              f"if measured as this run measures ({describe(conditions)}); if {it} {was} not, "
              "write to another file (-o)")


def _check_precision(precision: str, target: Any) -> None:
    """``--precision fp16`` tunes the CUDA tensor-core kernels: refused elsewhere, where
    no space would see it (before, such a run tuned nothing or fp32 kernels silently)."""
    from toolchain.errors import OptionError

    if precision != "fp32" and target.kind != "cuda":
        raise OptionError(f"--precision {precision} tunes the float16 tensor-core kernels of "
                          f"a CUDA target; target {target.name!r} is not one (leave "
                          "--precision out)")


def _trials(n: int) -> str:
    """``trial`` or ``trials`` for a count.

    >>> _trials(1), _trials(4)
    ('trial', 'trials')
    """
    return "trial" if n == 1 else "trials"


def _runner_for(runner: str | None, target: Any, ray: str | None) -> str:
    """The runner kind: the one asked for where it measures ``target``'s kernels, else
    the target's default (an accelerator's cycle model, the local CPU)."""
    from toolchain.errors import OptionError

    if not target.is_accelerator:
        if runner in ("model", "rtl"):
            raise OptionError(f"--runner {runner} measures accelerator layers; target "
                              f"{target.name!r} is not an accelerator (a CPU: local or qemu; "
                              "a CUDA target: local or emulate)")
        chosen = runner or "local"
        _refuse_local_cross(chosen, target, ray)
        return chosen
    if runner in ("local", "qemu", "emulate"):
        raise OptionError(f"--runner {runner}: target {target.name!r} is an accelerator; its "
                          "layers are measured by the cycle model (--runner model, the "
                          "default) or the Verilog RTL (--runner rtl)")
    if ray:
        raise OptionError(f"--ray: target {target.name!r} is an accelerator, whose trials run "
                          "in this process (the cycle model takes milliseconds); leave --ray "
                          "out")
    return runner or "model"


def _refuse_local_cross(runner: str, target: Any, ray: str | None) -> None:
    """Refuse timing a cross target's kernels on this CPU (each trial would fail to build)."""
    from toolchain.errors import OptionError
    from toolchain.target import HOST_COMPILERS

    if runner != "local" or ray or target.kind != "c" or target.compiler in HOST_COMPILERS:
        return
    hint = ("use --runner qemu (instruction counts under QEMU, docs/tuning.md)"
            if str(target.compiler).startswith("arm-none-eabi") else
            "run kiln tune on a machine that runs it")
    raise OptionError(f"--runner local times kernels on this CPU, but target {target.name!r} "
                      f"is built with {target.compiler}, whose code does not run here; {hint}")


def _measurement(args: argparse.Namespace, target: Any) -> tuple[Any, Any]:
    from toolchain.autotune.measure import LocalBuilder, make_runner

    if target.is_accelerator:
        from toolchain.autotune.vta import vta_measurement

        return vta_measurement(args.runner)
    jobs = args.jobs or min(4, os.cpu_count() or 1)
    if getattr(target, "kind", None) == "cuda" or args.runner == "emulate":
        return _cuda_measurement(args, target, jobs)
    if args.ray:
        from toolchain.autotune.ray_backend import ray_measurement

        return ray_measurement(args.ray, args.runner, target, repeat=args.repeat,
                               timeout=args.timeout, devices=args.ray_devices,
                               jobs=args.jobs, flush_bytes=args.flush_mb << 20)
    if args.runner == "qemu":
        from toolchain.autotune.qemu import QemuBuilder

        return QemuBuilder(target), make_runner("qemu", target=target, timeout=args.timeout)
    return LocalBuilder(jobs), make_runner("local", repeat=args.repeat, timeout=args.timeout,
                                           flush_bytes=args.flush_mb << 20,
                                           rotate_bytes=args.cold_mb << 20)


def _cuda_measurement(args: argparse.Namespace, target: object, jobs: int
                      ) -> tuple[object, object]:
    """The CUDA builder and the GPU runner (or the emulation's check): docs/tuning.md."""
    from toolchain.autotune.cuda import cuda_measurement
    from toolchain.errors import OptionError

    if getattr(target, "kind", None) != "cuda":
        raise OptionError(f"--runner emulate checks CUDA kernels; target "
                          f"{target.name!r} is not a CUDA target (use --target cuda-sm80)")
    if args.ray or args.runner == "qemu" or args.cold_mb:
        bad = "--ray" if args.ray else "--runner qemu" if args.runner == "qemu" else \
            "--cold-mb"
        raise OptionError(f"{bad} is not offered for a CUDA target: it is tuned on this "
                          "machine's GPU (--runner local) or checked without one "
                          "(--runner emulate)")
    return cuda_measurement(target, args.runner, jobs, repeat=args.repeat,
                            timeout=args.timeout)


def _plot(folder: str, states: list, unit: str) -> None:
    from toolchain.autotune.plot import curve_svg, throughput_curve

    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    for st in states:
        values, label = throughput_curve(st.curve, st.task.flops, unit)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", st.task.name)
        (d / f"{name}.svg").write_text(curve_svg(st.task.name, {"best so far": values},
                                                 label))
    print(f"  tuning curves: {d}/*.svg")

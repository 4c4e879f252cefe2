"""Auto-tuning the x86 int8 kernels of whole int8 models: tuned vs default vs onnxruntime.

    python benchmarks/tune_int8.py                          # DS-CNN 16, MobileNetV1 8 trials/task
    python benchmarks/tune_int8.py --models ds_cnn:32 --target x86_64-avx2

Each model is the int8 anchor model of the MLPerf Tiny set (``anchor_model``: Kiln's
post-training quantization, int8 input and output). Its tunable kernels (``int8_conv``,
``int8_depthwise``, ``int8_dense``) are tuned with ``kiln tune``'s loop (N trials a task,
the local runner, caches warm), then the bundle compiled with and without the records and
onnxruntime are timed alternately in this run (one thread, min of 3 x ``--runs``). It
prints each task's tuner best/default and the three speeds. The machine is shared: read
the ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402


def tune_model(name: str, per_task: int, target: str, jobs: int, runs: int) -> None:
    """Tune int8 ``name``'s kernels and time its bundles, default and tuned, and
    onnxruntime."""
    import models  # benchmarks/models.py

    from toolchain.autotune.measure import LocalBuilder, LocalRunner
    from toolchain.autotune.records import RecordWriter
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.autotune.tuner import tune_tasks
    from toolchain.zoo.quantized import anchor_model

    model = anchor_model(name)
    tasks = extract_tasks(model, target)
    work = Path(tempfile.mkdtemp(prefix=f"kiln-tune-int8-{name}-"))
    out = work / f"{name}.jsonl"
    t0 = time.perf_counter()
    builder = LocalBuilder(jobs)
    try:
        with RecordWriter(out) as w, LocalRunner(repeat=3, flush_bytes=0) as r:
            states = tune_tasks(tasks, per_task * len(tasks), builder=builder, runner=r,
                                writer=w, seed=0, progress=False)
    finally:
        builder.close()
    print(f"\n{name} int8 on {target}: {len(tasks)} tasks, {per_task * len(tasks)} trials "
          f"in {time.perf_counter() - t0:.0f} s (records: {out})")
    for t, st in zip(tasks, states, strict=True):
        best = min(st.confirmed.values()) if st.confirmed else st.best
        print(f"  {t.space.kind} {t.name} x{t.weight}: tuner best/default "
              f"{st.default_cost / best:.2f} ({t.space.trace(st.best_point)})")
    inp = model.graph.input[0]
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    feeds = {inp.name: np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)}
    applied, td, tt, to = models.with_records(model, target, work, name, out, feeds, runs, 3)
    print(f"  {applied} kernel schedules from records; {td * 1e6:.1f} us default, "
          f"{tt * 1e6:.1f} us tuned; speed vs onnxruntime: default {to / td:.2f}, tuned "
          f"{to / tt:.2f}; tuned/default {td / tt:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="ds_cnn:16,mobilenet_v1:8",
                   help="NAME:TRIALS_PER_TASK, comma-separated (int8 anchor models)")
    p.add_argument("--target", default="x86_64-avx512")
    p.add_argument("--jobs", type=int, default=2, help="build processes")
    p.add_argument("--runs", type=int, default=50)
    args = p.parse_args(argv)
    print(f"target {args.target}; single thread; load {os.getloadavg()[0]:.1f}")
    for spec in args.models.split(","):
        name, _, n = spec.partition(":")
        tune_model(name, int(n or 8), args.target, args.jobs, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Regenerate ``conv_records.jsonl``: random-search trials (features and measured time) of
four small direct convolutions on x86_64-avx2, the fixed data set of the cost-model test.

    PYTHONPATH=. python tests/autotune/data/make_conv_records.py

The times are this machine's on the day it ran; the test only uses them as they are.
"""

from __future__ import annotations

from pathlib import Path

from toolchain.autotune.measure import LocalBuilder, LocalRunner
from toolchain.autotune.records import RecordWriter
from toolchain.autotune.tasks import conv_task
from toolchain.autotune.tuner import tune_tasks

CONVS = [((1, 16, 28, 28), 32, 3, 1), ((1, 32, 28, 28), 32, 3, 2),
         ((1, 24, 14, 14), 48, 3, 1), ((1, 16, 14, 14), 16, 5, 1)]

if __name__ == "__main__":
    out = Path(__file__).with_name("conv_records.jsonl")
    tasks = [conv_task(x, o, k, s, "x86_64-avx2", name=f"conv{i}")
             for i, (x, o, k, s) in enumerate(CONVS)]
    with RecordWriter(out) as w, LocalRunner(repeat=5) as r:
        tune_tasks(tasks, 48 * len(tasks), builder=LocalBuilder(1), runner=r, writer=w,
                   strategy="random", batch=48, seed=7, progress=False)

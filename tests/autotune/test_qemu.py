"""The instruction-counting runner: Cortex-M kernels under QEMU."""

from __future__ import annotations

import pytest

from tests.tools import needs
from toolchain.autotune.measure import BuildInput
from toolchain.autotune.tasks import conv_task

pytestmark = needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")


@pytest.fixture(scope="module")
def task():
    return conv_task((1, 8, 10, 10), 16, 3, 1, "cortex-m4")


def test_counts_are_deterministic_and_tell_points_apart(task, tmp_path):
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner

    s = task.space
    other = {**s.default(), "pixels": 4, "lanes": 4}
    inputs = [BuildInput(task.node, task.target, s.workload, s.trace(p))
              for p in (s.default(), other, s.default())]
    builds = QemuBuilder("cortex-m4", tmp_path).build(inputs)
    assert [b.error for b in builds] == [None] * 3
    costs = [r.costs for r in QemuRunner("cortex-m4").run(builds)]
    assert costs[0] == costs[2]  # the same kernel counts the same
    assert costs[0] != costs[1] and all(c[0] > 1000 for c in costs)


def test_qemu_tuning_never_ends_worse_than_the_default(task, tmp_path):
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.tuner import tune_tasks

    st, = tune_tasks([task], 8, builder=QemuBuilder("cortex-m4", tmp_path),
                     runner=QemuRunner("cortex-m4"), strategy="random", batch=4,
                     progress=False)
    assert st.trials == 8 and st.best <= st.default_cost < float("inf")
    assert len(st.curve) == 8 and st.curve == sorted(st.curve, reverse=True)


def test_a_target_without_an_emulator_board_is_refused():
    from toolchain.autotune.qemu import board_for
    from toolchain.errors import OptionError

    with pytest.raises(OptionError, match="no emulator board in boards/ runs target"):
        board_for("x86_64-avx2")


def test_kiln_tune_with_the_qemu_runner_records_instruction_counts(tmp_path):
    from pathlib import Path

    from toolchain.autotune.records import load_records
    from toolchain.cli import main

    model = str(Path(__file__).resolve().parents[2] / "examples" / "lenet5.onnx")
    out = tmp_path / "m4.jsonl"
    assert main(["tune", model, "--target", "cortex-m4", "--runner", "qemu", "--trials", "3",
                 "--batch", "1", "-o", str(out), "--no-progress"]) == 0
    recs = load_records(out)
    assert len(recs) == 3 and {r.unit for r in recs} == {"instructions"}
    assert all(r.ok and r.cost == int(r.cost) for r in recs)

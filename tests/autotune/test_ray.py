"""The Ray backend on a local two-CPU cluster gives the same records as the local pool
(compared with the deterministic QEMU instruction-count runner: same traces, same costs).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.tools import needs
from toolchain.autotune.tasks import conv_task

# ray is imported by the test only (0.3-0.6 CPU s): every worker collects this file, one
# runs it
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="ray is not installed (pip install ray)"),
              needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm"),
              pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def cluster():
    import ray

    from toolchain.autotune.ray_backend import connect

    connect("local", num_cpus=2)
    yield
    ray.shutdown()


TRIALS = 9


def _tune(builder, runner, tmp_path, name):
    from toolchain.autotune.records import RecordWriter, load_records
    from toolchain.autotune.tuner import tune_tasks

    tasks = [conv_task((1, 8, 10, 10), 16, 3, 1, "cortex-m4", name="a"),
             conv_task((1, 4, 12, 12), 8, 3, 2, "cortex-m4", name="b")]
    out = tmp_path / f"{name}.jsonl"
    # 9 trials in batches of 3: each task's first batch (its default first), then one
    # batch the xgb model picks from the costs that came back through the backend
    with RecordWriter(out) as w:
        tune_tasks(tasks, TRIALS, builder=builder, runner=runner, writer=w, strategy="xgb",
                   batch=3, seed=3, progress=False)
    return load_records(out)


def test_ray_gives_the_same_records_as_the_local_pool(cluster, tmp_path):
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.ray_backend import RayBuilder, RayRunner

    local = _tune(QemuBuilder("cortex-m4", tmp_path / "fw"), QemuRunner("cortex-m4"),
                  tmp_path, "local")
    runner = RayRunner("qemu", {"target": "cortex-m4", "timeout": 60.0}, devices=2)
    try:
        remote = _tune(RayBuilder("qemu"), runner, tmp_path, "ray")
    finally:
        runner.close()
    assert len(local) == len(remote) == TRIALS
    key = [(r.workload, r.trace, r.costs, r.error) for r in local]
    assert key == [(r.workload, r.trace, r.costs, r.error) for r in remote]
    assert {r.runner for r in remote} == {"ray-qemu-icount"}
    # instruction counts: no condition of the machine's, from the devices as from here
    assert all(r.conditions == {} for r in local + remote)
    assert all(r.ok for r in local)

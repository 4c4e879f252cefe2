"""The GPU GEMM search counts each tile candidate's shared memory from a lowering that stops
after ``storage_rewrite`` (``gemm.lowered_shared_bytes``): the count, and whether lowering
refuses the candidate, must be those of the whole lowering, for every candidate the search
tries -- GEMMs, batch matmuls, padded and strided convolutions, split-K, the tensor-core
kernel, and descriptors whose limits make the search shrink its tiles or give up."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bundle.test_cuda_fp16 import gemm_model
from tests.schedules.gpu.test_gemm import MODELS as SIMT_MODELS
from tests.schedules.gpu.test_tensorcore import MODELS as WMMA_MODELS
from toolchain.bundle import build_spec
from toolchain.driver import lower
from toolchain.errors import KilnError
from toolchain.schedules.gpu import gemm
from toolchain.target import load_target, parse_target

TARGETS = (
    load_target("cuda-sm90"),
    # 1 KiB of shared memory a block: the search halves the step and the register tile
    parse_target("name: smem-1k\nkind: cuda\nextends: cuda-sm90\n"
                 "max_shared_memory_per_block: 1024\n"),
)

#: model builders and precisions; float32 GEMMs of the tensor-core tests compiled as fp16
CASES: dict[str, tuple[Any, str]] = {
    **{name: (build, "fp32") for name, build in SIMT_MODELS.items()},
    **{f"{name}_fp16": (lambda b=WMMA_MODELS[name][0]: b()[0], "fp16")
       for name in ("matmul_128x96x64", "batch_matmul_tanh", "gemm_trans_b")},
    "matmul_64x96x2048": (lambda: gemm_model(64, 2048, 96)[0], "fp32"),
}


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except KilnError as e:
        return "refused", type(e).__name__


def test_the_search_counts_what_the_whole_lowering_allocates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every candidate of every case on both targets (26 in 22 compiles): the same count
    (or the same refusal) as the whole lowering; among them candidates that fit, ones that
    do not (the search goes on to smaller tiles), tensor-core and split-K kernels. About
    5 s: one test, not one a case, since each compile is ~0.1 s and a worker's test set-up
    and model building would double it."""
    cheap = gemm.lowered_shared_bytes
    kinds: set[str] = set()
    counted: list[str] = []
    where = ""

    def both(sch: Any, target: Any) -> dict[str, int]:
        got = _outcome(cheap, sch, target)
        counted.append(where)
        want = _outcome(lambda: gemm.shared_bytes_of(lower(sch, target=target)))
        assert got == want, f"{where}: {got} != whole lowering {want}"
        if got[0] == "refused":
            kinds.add("refused")
            return cheap(sch, target)  # raises, as the search expects
        limit = target.max_shared_memory_per_block or 48 * 1024
        kinds.add("fits" if max(got[1].values(), default=0) <= limit else "too big")
        text = str(sch.mod)
        kinds.update(k for k, mark in (("tensor cores", "'tensorized':"), ("split-K", "_rf["))
                     if mark in text)
        return got[1]

    monkeypatch.setattr(gemm, "lowered_shared_bytes", both)
    for name, (build, precision) in CASES.items():
        model = build()
        for target in TARGETS:
            where = f"{name} on {target.name}"
            try:
                build_spec(model, target, progress=False, precision=precision)
            except KilnError:
                pass  # a refused compile is an outcome too; its candidates were compared
    assert len(counted) >= len(CASES) * len(TARGETS), counted
    assert kinds >= {"fits", "too big", "tensor cores", "split-K"}, kinds


def test_an_equal_function_is_counted_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``lowered_shared_bytes`` lowers a function equal to one it counted before (names
    included) for an equal target no more: scheduling the same MatMul again lowers
    nothing and gives the same kernel; another target, or other tiles (another
    function), are lowered anew; a refused lowering is not kept; each answer is the
    whole lowering's count."""
    from toolchain import driver
    from toolchain.graph.ir import Node, Value
    from toolchain.inprocess import ByTarget
    from toolchain.schedules.registry import schedule_for

    monkeypatch.setattr(gemm, "SHARED_BYTES_IN_PROCESS", ByTarget(limit=512))
    lowered: list[int] = []
    real = driver.lower

    def counting(*args: Any, **kwargs: Any) -> Any:
        lowered.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "lower", counting)

    def matmul(m: int) -> Node:
        x, w = Value("x", (m, 96), "float32"), Value("w", (96, 80), "float32")
        return Node("MatMul", "mm", [x, w], [Value("y", (m, 80), "float32")])

    sm90, small = TARGETS
    first = schedule_for(matmul(128), sm90)
    assert lowered and first.info["schedule"] == "gpu tiled gemm"
    lowered.clear()
    again = schedule_for(matmul(128), sm90)
    assert lowered == [] and str(again.schedule.mod) == str(first.schedule.mod)
    schedule_for(matmul(128), small)  # another target: its own counts
    assert lowered
    lowered.clear()
    schedule_for(matmul(64), sm90)  # another shape: other functions
    assert lowered
    for s, target in ((first, sm90), (again, sm90)):
        assert gemm.lowered_shared_bytes(s.schedule, target) == \
            gemm.shared_bytes_of(real(s.schedule, target=target))

    other = schedule_for(matmul(32), sm90).schedule

    def refuse(*args: Any, **kwargs: Any) -> Any:
        lowered.append(1)
        raise KilnError("refused")

    monkeypatch.setattr(driver, "lower", refuse)
    monkeypatch.setattr(gemm, "SHARED_BYTES_IN_PROCESS", ByTarget(limit=512))
    lowered.clear()
    for _ in range(2):
        with pytest.raises(KilnError):
            gemm.lowered_shared_bytes(other, sm90)
    assert lowered == [1, 1]

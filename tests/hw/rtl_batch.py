"""The passing programs of a test module's selected tests in one RTL simulator process.

A test's programs come from a *job*, a module-level function of the test's parameters that
returns ``(context, runs, timings)``: what the test checks against (expected values, the
programs), the ``(program, dram)`` runs and each run's ``(latency, bandwidth)`` (None: the
target's). :class:`RtlBatch` builds the jobs of the selected tests, runs all their programs
in one :func:`~toolchain.vta.rtl.run_batch` (each program from its own reset, with its own
timing) and hands each test its context and results. If the batch fails (a run deadlocks,
times out, writes past its image), each test runs its own programs alone, so a failure is
reported by the test whose program fails, with the message it gave before.

A simulator start costs about 0.26 CPU s (docs/testing.md, session 16): one for the file
instead of one per test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from toolchain.errors import SimulationError
from toolchain.vta.config import VTAConfig
from toolchain.vta.rtl import run_batch

Job = Callable[..., tuple[Any, list[tuple[Any, Any]], list[tuple[Any, Any]] | None]]
Key = tuple[Callable[..., Any], tuple[tuple[str, Any], ...]]


def _key(job: Job, params: dict[str, Any]) -> Key:
    return job, tuple(sorted(params.items()))


class RtlBatch:
    """The results of the selected tests' jobs, run together (see the module docstring)."""

    def __init__(self, config: VTAConfig, jobs: list[tuple[Job, dict[str, Any]]]) -> None:
        self.config = config
        self.done: dict[Key, tuple[Any, list[Any]]] = {}
        built, runs, timings, spans = {}, [], [], {}
        for job, params in jobs:
            key = _key(job, params)
            if key in built:
                continue
            ctx, job_runs, job_timings = built[key] = job(**params)
            spans[key] = (len(runs), len(runs) + len(job_runs))
            runs += job_runs
            timings += job_timings or [(None, None)] * len(job_runs)
        try:
            results = run_batch(runs, config, timings=timings)
        except SimulationError:
            return  # each test runs its own programs (results())
        for key, (a, b) in spans.items():
            self.done[key] = (built[key][0], results[a:b])

    def results(self, job: Job, **params: Any) -> tuple[Any, list[Any]]:
        """``job``'s context and the ``(dram, counters)`` of its runs, from the batch or,
        where the batch did not run it or failed, from a simulator run of its own."""
        key = _key(job, params)
        if key in self.done:
            return self.done[key]
        ctx, runs, timings = job(**params)
        return ctx, run_batch(runs, self.config, timings=timings)


def selected_jobs(request: pytest.FixtureRequest,
                  jobs: dict[str, Job]) -> list[tuple[Job, dict[str, Any]]]:
    """The jobs of the tests of ``request``'s module that this session selected, with each
    item's parameters (``jobs``: test function name -> job)."""
    out = []
    for item in request.session.items:
        name = getattr(item, "originalname", item.name)
        if item.module is request.module and name in jobs:
            params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
            out.append((jobs[name], {k: v for k, v in params.items() if k != "core_model"}))
    return out

"""Shared pytest setup."""

from __future__ import annotations

import gc
import itertools
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Keep numeric libraries single-threaded in tests: the CI machine has two cores and the
# suites run generated code that uses them.
os.environ.setdefault("OMP_NUM_THREADS", "1")

#: the cyclic garbage collector's thresholds for the test processes (Python's default is
#: ``(700, 10, 10)``). A Kiln compile makes and drops millions of short-lived TIR nodes, so
#: at the default a worker ran a full collection every few hundred thousand allocations,
#: each walking everything the session keeps (collected items, fixtures, the arithmetic
#: memo): 20-25 % of the tests' Python CPU on the schedule tests (docs/testing.md,
#: "Where the suite's time goes"). Garbage is still collected, in larger batches.
GC_THRESHOLDS = (10_000, 20, 20)
gc.set_threshold(*GC_THRESHOLDS)


#: session- or module-scoped fixtures that build something costly (quantized models, host
#: builds, QEMU runs) for several tests, and the xdist group their users share: a fixture
#: is built once in each worker that runs one of its users, so they stay on one worker
SHARED_BUILDS = {"qdq_compiled": "boards", "zoo_compiled": "boards",
                 "int8_builds": "boards", "cuda_sm90_zoo": "cuda-nvcc",
                 "kernels_nvcc": "cuda-kernels-nvcc",
                 "zoo_c_bundle": "bundle-zoo", "lenet_llvm": "codegen-aarch64-lenet",
                 "pool_stage": "bundle-patch-pool"}


@pytest.fixture(scope="session")
def int8_builds(tmp_path_factory):
    """:class:`tests.boards.qdq_models.Int8Builds`: the Kiln-quantized zoo models and their
    host bundles, made once a session for the board tests (their host builds) and
    ``tests/quantize/test_bundle.py`` (the same bundles, x86 and LLVM ones too)."""
    from tests.boards.qdq_models import Int8Builds

    return Int8Builds(tmp_path_factory.mktemp("int8_builds"))


@pytest.fixture(scope="session")
def qdq_compiled(tmp_path_factory, int8_builds):
    """``qdq_compiled(name, quantizer)`` -> :class:`tests.boards.qdq_models.QdqModel`
    (quantized, host-built and run under onnxruntime once per session; its board bundles
    and QEMU runs made once too). Here, not in ``tests/boards/conftest.py``, so that the
    Cortex-M schedule tests read the same builds and runs as the board tests (one session
    fixture is one instance only where it has one definition)."""
    from tests.boards.qdq_models import QdqModel

    cache: dict[tuple[str, str], QdqModel] = {}

    def get(name: str, quantizer: str = "kiln") -> QdqModel:
        if (name, quantizer) not in cache:
            root = tmp_path_factory.mktemp(f"int8_{name}_{quantizer}")
            cache[name, quantizer] = QdqModel(root, name, quantizer, int8_builds)
        return cache[name, quantizer]

    return get


@pytest.fixture(scope="session")
def kernels_nvcc(request: pytest.FixtureRequest, tmp_path_factory) -> Any:
    """:class:`tests.bundle.helpers.KernelChecks` of the device-only nvcc checks
    (``NVCC_KERNEL_CHECKS``) defined by the modules of this session's tests that use it
    (the GPU schedule files, ``tests/bundle/test_cuda_fp16.py``): their bundles, and one
    nvcc run over all their kernels (a run a check paid nvcc's fixed cost each time). The
    users share an xdist group (:data:`SHARED_BUILDS`), so one worker builds it."""
    from tests.bundle.helpers import NVCC_KERNEL_CHECKS, KernelChecks

    modules = {getattr(getattr(item, "module", None), "__name__", None)
               for item in request.session.items
               if "kernels_nvcc" in getattr(item, "fixturenames", ())}
    names = [n for n, (module, _) in NVCC_KERNEL_CHECKS.items() if module in modules]
    return KernelChecks.build(names, tmp_path_factory.mktemp("kernels_nvcc"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list) -> None:
    """The suite runs in parallel (pytest-xdist, ``--dist loadgroup``): the Verilator
    models are built once into ``sim_build/`` per configuration, so every test that may
    build or run one stays on one worker (group ``rtl``); so do the users of each
    fixture in :data:`SHARED_BUILDS` (its group). ``tryfirst``: xdist's worker reads the
    ``xdist_group`` marks in its own ``pytest_collection_modifyitems``, which ran before
    this one and saw none of these (every test of the group was scheduled on its own)."""
    for item in items:
        path = str(item.fspath).replace(os.sep, "/")
        if "/tests/hw/" in path or "/tests/vta/" in path:
            item.add_marker(pytest.mark.xdist_group("rtl"))
            continue
        shared = sorted({SHARED_BUILDS[f] for f in getattr(item, "fixturenames", ())
                         if f in SHARED_BUILDS})
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(shared[0]))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` (the suite's default) through :class:`tests.xdist_scheduling.
    GroupScheduling`: xdist's own scheduler with its per-test bookkeeping made constant
    instead of growing with the tests already run; the same tests go to the same
    workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_scheduling import GroupScheduling

    return GroupScheduling(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (some 10,000 items, the ONNX node cases with their models and
    data) lives as long as the session: moved out of the cyclic garbage collector's reach
    (``gc.freeze``), so the full collections the tests' compiles trigger do not walk it
    again each time (7 % of the CPU time of a node-conformance run)."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """One collection of what the tests left, then everything alive frozen: pytest's
    unraisable-exception check collects five times over at the end of every process (after
    the last test, so no test's time shows it), each walking the million or so objects a
    worker's caches and fixtures keep: about 1 CPU s per 300,000 objects. The one
    collection here still finalizes the garbage cycles (and reports what their ``__del__``
    raises); pytest's five then skip the frozen survivors."""
    gc.collect()
    gc.freeze()


_TMP_NUMBER = itertools.count()


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> Path:
    """A new empty folder per test, as pytest's own ``tmp_path`` (the test's name, cut
    to 30 characters, and a number), made in ``<basetemp>/tmp_path/`` in O(1): pytest's
    lists every entry of the worker's base folder to find the next number and replaces a
    ``<name>current`` link, for each of the ~2,500 tests that take one, so a worker's
    cost grew with the square of its tests (about 1 ms a test; docs/testing.md, "Where
    the suite's time goes"). Nothing is deleted after the test (pytest's default
    ``tmp_path_retention_policy``, ``all``)."""
    root = tmp_path_factory.getbasetemp() / "tmp_path"
    root.mkdir(exist_ok=True)
    name = re.sub(r"\W", "_", request.node.name)[:30]
    path = root / f"{name}{next(_TMP_NUMBER)}"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _per_test_rng(request: pytest.FixtureRequest) -> None:
    """A test module's shared ``RNG`` (a numpy Generator) reseeded from each test's id, so a
    test's data never depends on which tests ran before it in the same worker (the suite
    runs in parallel, in an order that varies: a vacuity check once failed that way)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    for module in (getattr(request.node, "module", None), *(
            sys.modules.get(name) for name in SHARED_RNG_MODULES)):
        if isinstance(getattr(module, "RNG", None), np.random.Generator):
            module.RNG = np.random.default_rng(seed)
    np.random.seed(seed)  # tests that draw from numpy's global generator


#: helper modules whose ``RNG`` several test modules draw from (reseeded per test too: an
#: LRN test once failed only when another test had drawn from it first)
SHARED_RNG_MODULES = ("tests.graph.ops.util",)

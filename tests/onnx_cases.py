"""The node test cases shipped in the installed ``onnx`` wheel, made once per machine.

``onnx`` makes its node cases by running their generators (the 3-D pooling references
alone take seconds), the same models and data on every run; every pytest process (each
xdist worker) needs them to collect ``tests/test_node_conformance.py`` and the node-case
files of ``tests/graph/ops`` and ``tests/graph/ops_nn``. :func:`node_cases` keeps them in
the build cache (a pickle keyed by the ``onnx``, numpy and Python versions; the first
process makes it under a lock, the others wait and read it, ~0.03 s instead of ~4 s), and
each process loads them once.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pickle
import sys
import warnings
from typing import Any

import numpy as np
import onnx

from toolchain.runtime.cache import cache_dir, touch


def load_cases() -> dict[str, Any]:
    """Every node case, made by ``onnx``'s generators, by name."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {case.name: case for case in load_model_tests(kind="node")}


@functools.lru_cache(maxsize=1)
def node_cases() -> dict[str, Any]:
    """Every node test case of the installed ``onnx``, by name (from the build cache when
    another process made them already)."""
    tag = f"{onnx.__version__}-np{np.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    path = cache_dir() / f"onnx-node-cases-{tag}.pickle"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cases = pickle.loads(path.read_bytes())
            touch(path)
            return cases
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            pass  # not there yet (or written by another onnx): make and keep them
        cases = load_cases()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_bytes(pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)
        except OSError:  # a full disk: the cases are made again next time
            tmp.unlink(missing_ok=True)
        return cases


def single_node_cases(ops: set[str] | frozenset[str]) -> list[Any]:
    """The cases of one node of the default domain whose op is in ``ops``, by name."""
    return [c for name, c in sorted(node_cases().items())
            if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in ops
            and c.model.graph.node[0].domain in ("", "ai.onnx")]

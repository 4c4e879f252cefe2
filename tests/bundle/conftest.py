"""Fixtures shared by the bundle tests' files."""

from __future__ import annotations

import pytest

from tests.bundle.helpers import ZooBundle, cores


@pytest.fixture(scope="session")
def zoo_c_bundle(tmp_path_factory):
    """``get(name, n=1, split=False)`` -> :class:`ZooBundle`: zoo model ``name`` compiled
    by Kiln for c-generic with ``cores: n`` (named ``name``, the spec's input shapes), with
    every kernel split across the threads where ``split`` (the pool's size thresholds at
    0, as ``test_threads.py``'s ``split_every_kernel``), once per session.

    Several files compile the same models the same way: ``test_zoo.py`` (one core), the
    one-core comparison of ``test_threads.py``'s thread counts, ``test_safety.py``'s
    no-malloc and sanitizer builds, and the thread tests' split bundles (thread counts,
    thread libraries, sanitizers). Kiln's compile is deterministic (``test_safety.py``'s
    ``test_recompile_is_byte_identical``), so each reads one compile; the users of this
    fixture are one xdist group (``bundle-zoo``, ``tests/conftest.py``)."""
    from tests.bundle.helpers import run_ort
    from toolchain.bundle import compile_model, render
    from toolchain.zoo import ZOO

    done: dict[tuple[str, int, bool], ZooBundle] = {}

    def get(name: str, n: int = 1, split: bool = False) -> ZooBundle:
        key = name, n, split
        if key not in done:
            spec = ZOO[name]
            model = spec.build()
            inputs = spec.inputs(model)
            out = tmp_path_factory.mktemp(f"{name}-{n}{'-split' if split else ''}") / name
            with pytest.MonkeyPatch.context() as mp:
                if split:
                    mp.setattr(render, "MIN_PARALLEL_FLOPS", 0)
                    mp.setattr(render, "MIN_PARALLEL_BYTES", 0)
                path = compile_model(model, cores(n), out, input_shapes=spec.input_shapes,
                                     name=name)
            done[key] = ZooBundle(path, model, inputs, run_ort(model, inputs))
        return done[key]

    return get

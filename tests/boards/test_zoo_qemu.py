"""The MLPerf-Tiny-style zoo models in fp32, compiled for a QEMU board and a real board
(linked with the real board's flash/RAM sizes), run under QEMU and match Kiln's reference
executor on the same inputs within 1e-4 (max abs error relative to the output's scale), as
the host build of each model does in ``tests/bundle/test_zoo.py``."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.boards.conftest import needs_qemu
from toolchain.bundle.check import compare

MODELS = ["ds_cnn", "resnet8", "mobilenet_v1", "autoencoder"]
BOARDS = ["qemu-mps2-an386", "nucleo-l4r5zi"]

pytestmark = [needs_qemu, pytest.mark.slow]

_REF: dict[str, dict[str, np.ndarray]] = {}


def _reference(c) -> dict[str, np.ndarray]:
    """The reference executor's outputs on the zoo model's sample inputs (once per model):
    the oracle ``tests/bundle/test_zoo.py`` checks the host build of the model against
    (with onnxruntime), at the same tolerance, on the same inputs."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    if c.name not in _REF:
        _REF[c.name] = run_graph(from_onnx(c.model), c.inputs)
    return _REF[c.name]


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_on_qemu_matches_the_reference(name, board, zoo_compiled):
    from toolchain.boards import load_board

    c = zoo_compiled(name)
    path, report = c.for_board(board)
    run = c.run_on(board)
    ref = _reference(c)
    assert set(run.outputs) == set(ref)
    rows = compare(run.outputs, ref, 1e-4)
    assert all(r["ok"] for r in rows), rows
    for k in ref:
        assert not np.array_equal(run.outputs[k], np.zeros_like(ref[k]))
    # QEMU counts instructions (-icount), not cycles
    assert run.cycles == 0 and run.instructions and run.instructions > 100_000
    used, size = run.stack_bytes
    assert 0 < used < size
    # the size report agrees with the ELF and with the bundle
    b = load_board(board)
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["board"]["name"] == board and meta["board"]["size"] == report
    assert report["ram"]["arena"] == meta["arena_bytes"]
    assert report["ram"]["stack"] == b.stack_bytes
    assert meta["weight_bytes"] <= report["flash"]["weights"]["rodata"] \
        <= meta["weight_bytes"] + 64 * len(meta["weights"])
    assert report["flash"]["kernels"]["text"] > 0 and report["flash"]["runtime"]["text"] > 0
    assert report["flash"]["total"] <= b.flash.size and report["ram"]["total"] <= b.ram.size
    # the estimate before linking is a little low (never refuses what fits), and close
    est = meta["board"]["estimate"]
    assert 0.9 * report["flash"]["total"] <= est["flash"] <= report["flash"]["total"]
    assert 0.97 * report["ram"]["total"] <= est["ram"] <= report["ram"]["total"]
    elf = path / "firmware" / "build" / "board" / "firmware.elf"
    sizes = dict(line.split()[:2] for line in subprocess.run(
        ["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True,
        check=True).stdout.splitlines()[2:] if line.strip() and not line.startswith("Total"))
    sec = {k: int(v) for k, v in sizes.items()}
    assert report["flash"]["total"] == sec[".init"] + sec[".text"] + sec[".data"] \
        + sec.get(".tdata", 0)
    assert report["ram"]["total"] == sum(sec.get(s, 0) for s in (
        ".data", ".tdata", ".tbss_space", ".bss", ".stack"))

"""Fallbacks only where declared: a kernel falls back to the unscheduled compute only when
its schedule says there is none for it (NoScheduleError); any other exception from a
schedule is a bug and fails the compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.bundle import build_spec, compile_model
from toolchain.errors import NoScheduleError
from toolchain.schedules.generic import fused
from toolchain.zoo import ZOO


def _model():
    return ZOO["lenet5"].build()


def test_a_declared_refusal_falls_back_and_is_listed(monkeypatch, tmp_path: Path,
                                                     capsys) -> None:
    real = fused.schedule_fused

    def refuse_softmax(node, target, **kw):
        if "Softmax" in [n.op for n in node.attrs["graph"].nodes]:
            raise NoScheduleError(f"{node.describe()}: no schedule here (test)")
        return real(node, target, **kw)

    monkeypatch.setattr(fused, "schedule_fused", refuse_softmax)
    spec = build_spec(_model(), "c-generic", progress=False)
    how = [k.schedule for k in spec.kernels]
    assert sum(h.startswith("fallback: ") for h in how) == 1, how
    assert any("no schedule here (test)" in h for h in how)

    from toolchain.cli import main

    src = tmp_path / "m.onnx"
    src.write_bytes(_model().SerializeToString())
    assert main(["compile", str(src), "--target", "c-generic", "-o",
                 str(tmp_path / "b"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 without a default schedule" in out and "no schedule here (test)" in out


def test_a_bug_in_a_schedule_fails_the_compile(monkeypatch, tmp_path: Path) -> None:
    def broken(node, target, **kw):
        raise ZeroDivisionError("a bug in a schedule")

    monkeypatch.setattr(fused, "schedule_fused", broken)
    with pytest.raises(ZeroDivisionError, match="a bug in a schedule"):
        compile_model(_model(), "c-generic", tmp_path / "b", progress=False)
    assert not (tmp_path / "b").exists()  # nothing half-written


def test_a_schedule_primitive_error_in_kilns_own_schedule_is_a_kiln_bug(
        monkeypatch, tmp_path: Path, capsys) -> None:
    """A ScheduleError (or OptionError …) from Kiln's schedules is not the user's fault:
    an InternalError naming the node and the target, exit status 1 (never 2)."""
    from toolchain.cli import main
    from toolchain.errors import InternalError, ScheduleError

    def broken(node, target, **kw):
        raise ScheduleError("split: factor 0")

    monkeypatch.setattr(fused, "schedule_fused", broken)
    with pytest.raises(InternalError, match=r"node '.*' \(Fused\) on target 'c-generic': "
                                            r"ScheduleError: split: factor 0"):
        compile_model(_model(), "c-generic", tmp_path / "b", progress=False)
    src = tmp_path / "m.onnx"
    src.write_bytes(_model().SerializeToString())
    assert main(["compile", str(src), "--target", "c-generic", "-o",
                 str(tmp_path / "b"), "--no-progress"]) == 1
    assert "This is a Kiln bug" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()

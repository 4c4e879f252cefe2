"""How a run measured its trials: the ``conditions`` each tuning record carries.

Costs compare only when measured the same way. The record's ``runner`` says which runner
(``local-cpu``, ``qemu-icount``, ``cuda-gpu``, ``vta-rtl`` ...); its ``conditions`` say
how, as ``kiln tune`` ran it:

========== =========================================================================
``repeat``   timed repeats per trial, the cost their least (``--repeat``)
``flush_mb`` MiB rewritten between repeats to flush the caches (``--flush-mb``)
``cold_mb``  MiB of argument copies the calls cycle through (``--cold-mb``)
``machine``  the CPU that timed the kernels (:func:`cpu_model`; with ``--ray``: its
             devices' CPUs)
``cores``    cores the kernels ran on (the local runner pins its timing process to one)
``gpu``      the GPU that timed CUDA kernels (:func:`gpu_name`)
``per_insn`` cycles the accelerator's cycle model charges an instruction
========== =========================================================================

Each runner says its own (``conditions()``), only what changes its costs: the CPU runner
(local or on Ray, where each device reports its node's CPU) all but ``gpu``
(:func:`cpu_conditions`); the GPU runner ``repeat`` and ``gpu`` (it flushes the GPU's L2
itself, :func:`gpu_conditions`); the cycle model its ``per_insn`` cycles an instruction;
runners whose costs do not depend on the machine — QEMU's instruction counts, the RTL's
cycles, the CUDA emulation's checks — none (``{}``). A record without ``conditions``
(written by an earlier Kiln, or by a runner without ``conditions()``) was measured in
unknown conditions.

>>> c = cpu_conditions(3, 8 << 20, 0, machine="Imaginary 9")
>>> describe(c)
"--repeat 3, --flush-mb 8, --cold-mb 0, CPU 'Imaginary 9', 1 core"
>>> differences(c, dict(c, repeat=5))
[('repeat', 3, 5)]
>>> describe(None)
'conditions not recorded (written by an earlier Kiln)'
>>> describe({})
'no timing conditions (the costs do not depend on the machine)'
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: condition -> how ``kiln tune`` says it (:func:`say`), in the order they are compared
SAYS: dict[str, str] = {"repeat": "--repeat {}", "flush_mb": "--flush-mb {}",
                        "cold_mb": "--cold-mb {}", "machine": "CPU {!r}", "cores": "{} core",
                        "gpu": "GPU {!r}", "per_insn": "{} cycles an instruction"}
#: the conditions that are ``kiln tune`` options
OPTIONS = ("repeat", "flush_mb", "cold_mb")
#: the conditions that are the machine's
MACHINE = ("machine", "cores", "gpu")


def cpu_model() -> str:
    """This machine's CPU: ``/proc/cpuinfo``'s model name with its family and model
    numbers (a virtual machine often shows only a generic name, "AMD EPYC"), an Arm CPU's
    implementer and part, else the platform's processor string."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if not line.strip() and fields:
            break  # the first processor's block
        key, _, val = line.partition(":")
        fields.setdefault(key.strip(), val.strip())
    if "model name" in fields:
        extra = (f" (family {fields['cpu family']}, model {fields['model']})"
                 if "cpu family" in fields and "model" in fields else "")
        return fields["model name"] + extra
    if "CPU part" in fields:
        return (f"{platform.machine()} (implementer {fields.get('CPU implementer', '?')}, "
                f"part {fields['CPU part']})")
    return platform.processor() or platform.machine() or "unknown"


def gpu_name() -> str:
    """The GPU CUDA kernels are timed on: the first of ``CUDA_VISIBLE_DEVICES`` (else
    device 0) as ``nvidia-smi`` names it; ``unknown`` where it does not answer."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    try:
        res = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", first],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = res.stdout.strip().splitlines()
    return lines[0].strip() if res.returncode == 0 and lines else "unknown"


def cpu_conditions(repeat: int, flush_bytes: int, rotate_bytes: int,
                   machine: str | None = None) -> dict[str, Any]:
    """The conditions of the CPU runner (:class:`~toolchain.autotune.measure.LocalRunner`)
    on ``machine`` (default: this one's :func:`cpu_model`); MiB as ``--flush-mb`` and
    ``--cold-mb`` say them (a fraction where the bytes are not whole MiB)."""
    return {"repeat": repeat, "flush_mb": _mib(flush_bytes), "cold_mb": _mib(rotate_bytes),
            "machine": machine if machine is not None else cpu_model(), "cores": 1}


def gpu_conditions(repeat: int, gpu: str | None = None) -> dict[str, Any]:
    """The conditions of the GPU runner (:class:`~toolchain.autotune.cuda.GpuRunner`) on
    ``gpu`` (default: :func:`gpu_name`)."""
    return {"repeat": repeat, "gpu": gpu if gpu is not None else gpu_name()}


def _mib(nbytes: int) -> int | float:
    """
    >>> _mib(8 << 20), _mib(1 << 19)
    (8, 0.5)
    """
    return nbytes >> 20 if nbytes % (1 << 20) == 0 else nbytes / (1 << 20)


def say(key: str, value: Any) -> str:
    """One condition as ``kiln tune`` says it.

    >>> say("flush_mb", 0), say("machine", "X"), say("cores", 2), say("odd", 1)
    ('--flush-mb 0', "CPU 'X'", '2 cores', 'odd 1')
    """
    if value is None:
        return f"no {key}"
    text = SAYS.get(key, key + " {}").format(value)
    return text + "s" if key == "cores" and value != 1 else text


def phrase(key: str, value: Any) -> str:
    """``say`` after "measured": ``with --repeat 3``, ``on CPU 'X'``."""
    return f"{'on' if key in MACHINE else 'with'} {say(key, value)}"


def describe(conditions: Mapping[str, Any] | None) -> str:
    """All of a record's conditions in words."""
    if conditions is None:
        return "conditions not recorded (written by an earlier Kiln)"
    if not conditions:
        return "no timing conditions (the costs do not depend on the machine)"
    keys = [k for k in SAYS if k in conditions] + sorted(set(conditions) - set(SAYS))
    return ", ".join(say(k, conditions[k]) for k in keys)


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(condition, a's value, b's value)`` where two known conditions differ, in the
    order of :data:`SAYS` (a condition one lacks is None there)."""
    keys = [k for k in SAYS if k in a or k in b] + sorted((set(a) | set(b)) - set(SAYS))
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def key_of(conditions: Mapping[str, Any] | None) -> tuple | None:
    """A hashable form of ``conditions`` (None stays None)."""
    return None if conditions is None else tuple(sorted(conditions.items()))


def mixed_workloads(records: Iterable[Any]) -> dict[str, list[tuple[str, Any, Any]]]:
    """Workloads whose successful records were measured under two known conditions (files
    concatenated), with how the first two differ; ``kiln compile --records`` warns of
    them: the least cost among them is taken, though the costs do not compare."""
    seen: dict[str, dict[tuple, Mapping[str, Any]]] = {}
    for r in records:
        if r.ok and r.conditions is not None:
            seen.setdefault(r.workload, {})[key_of(r.conditions) or ()] = r.conditions
    return {w: differences(*list(by.values())[:2]) for w, by in seen.items() if len(by) > 1}


def warn_mixed(records: Iterable[Any], applied: Iterable[str], source: str) -> None:
    """Warn (:class:`~toolchain.errors.KilnWarning`) of each workload in ``applied`` whose
    records were measured under two known conditions (:func:`mixed_workloads`; files of
    two runs or machines concatenated): the least cost among them was applied, though
    those costs do not compare. Not refused: the bundle computes the same either way."""
    from toolchain.errors import KilnWarning

    used = set(applied)
    for workload, diff in mixed_workloads(records).items():
        if workload in used:
            key, a, b = diff[0]
            warnings.warn(f"{source}: workload {workload} has records measured with "
                          f"{say(key, a)} and with {say(key, b)}, whose costs do not "
                          "compare; the least of them was applied (keep one run's records "
                          "for it, its \"conditions\" field)", KilnWarning, stacklevel=2)


__all__ = ["MACHINE", "OPTIONS", "SAYS", "cpu_conditions", "cpu_model", "describe", "differences",
           "gpu_conditions", "gpu_name", "key_of", "mixed_workloads", "phrase", "say",
           "warn_mixed"]

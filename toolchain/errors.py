"""User-facing errors.

Every error a person can cause (a bad model, a bad option, a schedule that breaks a rule)
is raised as a :class:`KilnError` subclass.  The CLI prints its message and exits with
status 2; anything else escaping the CLI — an :class:`InternalError`, an unexpected
exception, generated code the C compiler rejects (:class:`GeneratedCodeError`) — is a bug
in Kiln: the CLI says so, prints the facts to report, and exits with status 1.

A message says what was found, where (file, node, op, loop, key), and what to do::

    raise ModelError("node 'conv1' (Conv): attribute 'auto_pad' = 'VALID_X' is not one of "
                     "NOTSET, SAME_UPPER, SAME_LOWER, VALID")
"""

from __future__ import annotations


class KilnError(Exception):
    """Base class for errors caused by the user's input; the CLI exits with status 2."""

    exit_code = 2


class ModelError(KilnError):
    """The model file or graph is malformed, unsupported or inconsistent."""


class UnsupportedError(ModelError):
    """The model uses ops or attributes that Kiln does not support (all listed at once)."""


class NoScheduleError(UnsupportedError):
    """No default schedule exists for this op (or this configuration of it) on this target:
    the one case where a bundle kernel may fall back to the unscheduled compute (listed in
    the compile summary and ``metadata.json``). Any other exception from a schedule is a bug
    and fails the compile."""


class InputError(KilnError):
    """Run-time inputs (an npz file, an array) do not match what the model expects."""


class OptionError(KilnError):
    """A command-line option or API argument is invalid."""


class ScheduleError(KilnError):
    """A schedule primitive's precondition does not hold."""


class TargetError(KilnError):
    """A target or board descriptor is invalid."""


class BuildError(KilnError):
    """Generated code failed to compile or link."""


class GeneratedCodeError(BuildError):
    """Code that Kiln generated failed to compile: a bug in Kiln, not in the user's input,
    so the CLI exits with status 1 and asks for a report (it stays a :class:`BuildError`
    for callers that catch build failures)."""

    exit_code = 1


class SimulationError(KilnError):
    """An accelerator program is invalid or deadlocks in simulation."""


class InternalError(AssertionError):
    """A Kiln bug: two parts of Kiln disagree (e.g. an op's ``infer`` and ``reference``).

    It is not a :class:`~toolchain.errors.KilnError`, so the CLI reports it as an internal
    error (exit status 1) with its traceback.
    """


class KilnWarning(UserWarning):
    """Something the user should know that does not stop the compile (e.g. Kiln trusts the
    ONNX specification over a known bug in ONNX shape inference); the CLI prints it as one
    ``kiln: warning:`` line."""

"""Kiln: an ahead-of-time deployment toolchain for machine-learning models.

The package is organised one layer a folder (see ``docs/architecture.md``):
``frontend`` (ONNX import), ``graph`` (graph IR, op registry, reference executor,
passes), ``te``/``tir`` (tensor expressions, loop IR, schedules), ``topi`` (op computes),
``schedules`` (default schedules per target), ``codegen`` (C and CUDA), ``bundle``,
``runtime``, ``boards``, ``quantize``, ``intrinsics``, ``vta`` (the accelerator), ``zoo``
(whole test models) and ``cli`` with ``commands``.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "build", "compile", "compile_op", "load", "lower", "run"]


def __getattr__(name: str):
    # Lazy so that `import toolchain` (and `kiln --help`) stays fast.
    if name in ("build", "lower"):
        from toolchain import driver

        return getattr(driver, name)
    if name == "compile_op":
        from toolchain.schedules import compile_op

        return compile_op
    if name in ("load", "compile", "run"):
        from toolchain import api

        return getattr(api, name)
    raise AttributeError(f"module 'toolchain' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names above, so that dir(toolchain) and tab completion show the API.
    return sorted({*globals(), *__all__})

"""GPU schedules (targets with key ``gpu``: ``cuda-sm80``, ``cuda-sm90``). Registered in
:data:`toolchain.schedules.strategy.STRATEGIES`; the CUDA bundle is described in
``docs/cuda.md``."""

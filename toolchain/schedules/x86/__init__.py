"""x86 schedules (targets with key ``x86``, and the portable int8 kernels every CPU target
runs): register-tiled int8 convolutions and dense layers, int16-pair kernels on the
``dot_i16_*x2`` intrinsics, channel-vectorized depthwise. Registered in
:data:`toolchain.schedules.strategy.STRATEGIES`."""

"""Cortex-M schedules (targets with key ``cortex_m``): CMSIS-NN-style int8 kernels on the
DSP extension's intrinsics (:mod:`.int8`) and float32 convolutions without whole-tensor
scratch (:mod:`.fp32`). Registered in :data:`toolchain.schedules.strategy.STRATEGIES`."""

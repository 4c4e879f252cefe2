"""Default schedules for every CPU target (key ``cpu``): portable C that any C compiler
vectorizes, register tiles and cache blocks sized from the descriptor's vector width,
registers and caches. Registered in :data:`toolchain.schedules.strategy.STRATEGIES`."""

/* The Verilator-built RTL model as a kiln_vta_device (runtime_c/kiln_vta.h).
 *
 * kiln_vta_rtl.cpp drives vta_sim_top (hw/rtl/sim/vta_sim_top.sv) cycle by cycle from C++:
 * the DRAM timing model's DPI functions read and write the driver's DRAM window directly, so
 * no image is copied.  Built by toolchain/vta/rtl_device.py (verilator --cc, no cocotb). */
#ifndef KILN_VTA_RTL_H
#define KILN_VTA_RTL_H

#include "kiln_vta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hardware counters of the last run, in the order of toolchain/vta/rtl.py COUNTERS. */
enum { KILN_VTA_RTL_CYCLES, KILN_VTA_RTL_GEMM, KILN_VTA_RTL_ALU, KILN_VTA_RTL_LOAD_BUSY,
       KILN_VTA_RTL_COMPUTE_BUSY, KILN_VTA_RTL_STORE_BUSY, KILN_VTA_RTL_LOAD_WAIT,
       KILN_VTA_RTL_COMPUTE_WAIT, KILN_VTA_RTL_STORE_WAIT, KILN_VTA_RTL_RD_BEATS,
       KILN_VTA_RTL_WR_BEATS, KILN_VTA_RTL_NCOUNTERS };

typedef struct kiln_vta_rtl {
  uint32_t latency;        /* DRAM read latency in cycles (>= 1) */
  uint32_t bw16;           /* DRAM bandwidth in sixteenths of a byte per cycle */
  uint64_t timeout_cycles; /* KILN_VTA_ERR_TIMEOUT after this many cycles */
  uint64_t hw[KILN_VTA_RTL_NCOUNTERS]; /* counters of the last run */
  kiln_vta_error error;
} kiln_vta_rtl;

/* Fill dev with the RTL model's device functions (dev->self = rtl). */
void kiln_vta_rtl_device(kiln_vta_rtl *rtl, kiln_vta_device *dev);

#ifdef __cplusplus
}
#endif

#endif /* KILN_VTA_RTL_H */

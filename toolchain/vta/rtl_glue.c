/* Glue for toolchain/vta/rtl_device.py: run a program on the Verilator RTL model through the
 * C driver (runtime_c/kiln_vta.h) and the RTL device (hw/rtl/sim/kiln_vta_rtl.h). */
#include <string.h>

#include "kiln_vta.h"
#include "kiln_vta_rtl.h"

/* The program is already at byte insn_addr of dram; hw receives the hardware counters. */
int kiln_vta_rtl_py_run(uint32_t latency, uint32_t bw16, uint64_t timeout_cycles,
                        uint8_t *dram, size_t dram_bytes, size_t insn_addr,
                        uint32_t insn_count, uint64_t *hw, kiln_vta_error *err) {
  kiln_vta_rtl rtl;
  kiln_vta_device dev;
  kiln_vta vta;
  int rc;
  memset(&rtl, 0, sizeof rtl);
  rtl.latency = latency;
  rtl.bw16 = bw16;
  rtl.timeout_cycles = timeout_cycles;
  kiln_vta_rtl_device(&rtl, &dev);
  rc = kiln_vta_init(&vta, &dev, dram, dram_bytes);
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_load_program(&vta, dram + insn_addr, insn_count, insn_addr);
  }
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_run(&vta);
  }
  *err = vta.error;
  memcpy(hw, rtl.hw, sizeof rtl.hw);
  return rc;
}

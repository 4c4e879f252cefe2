/* Glue for toolchain/vta/cfsim.py: one call that runs a program on the C functional
 * simulator through the driver (kiln_vta.h) and its device interface, so the Python tests
 * exercise the same path a bundle will.  Built together with runtime_c/kiln_vta*.c. */
#include <string.h>

#include "kiln_vta.h"
#include "kiln_vta_fsim.h"

/* sizeof of the structs ctypes mirrors (checked by cfsim.py when it loads the library). */
void kiln_vta_py_sizes(uint32_t *out) {
  out[0] = (uint32_t)sizeof(kiln_vta_config);
  out[1] = (uint32_t)sizeof(kiln_vta_error);
  out[2] = (uint32_t)sizeof(kiln_vta_counters);
}

/* Run the insn_count instructions already at byte insn_addr of dram.  DMA is checked against
 * the first data_bytes of the window (the program's data image).  order may be NULL. */
int kiln_vta_py_run(const kiln_vta_config *cfg, void *mem, size_t mem_bytes, uint8_t *dram,
                    size_t dram_bytes, size_t data_bytes, size_t insn_addr, uint32_t insn_count,
                    int in_order, uint32_t seed, uint32_t *order, uint32_t order_cap,
                    kiln_vta_counters *counters, kiln_vta_error *err) {
  kiln_vta_fsim sim;
  kiln_vta_device dev;
  kiln_vta vta;
  int rc = kiln_vta_fsim_init(&sim, cfg, mem, mem_bytes);
  memset(err, 0, sizeof *err);
  memset(counters, 0, sizeof *counters);
  if (rc != KILN_VTA_OK) {
    *err = sim.error;
    return rc;
  }
  sim.in_order = in_order;
  sim.seed = seed;
  sim.dma_limit = data_bytes;
  sim.order = order;
  sim.order_cap = order_cap;
  kiln_vta_fsim_device(&sim, &dev);
  rc = kiln_vta_init(&vta, &dev, dram, dram_bytes);
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_load_program(&vta, dram + insn_addr, insn_count, insn_addr);
  }
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_run(&vta);
  }
  *err = vta.error;
  kiln_vta_read_counters(&vta, counters);
  return rc;
}

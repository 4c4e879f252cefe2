/* A standalone user of the accelerator driver with the C simulator, all memory static (the
 * way a bundle will hold it).  tests/vta/test_cfsim_build.py builds and runs it:
 *
 *   fsim_main IMAGE INSNS OUT      IMAGE: the DRAM data image, INSNS: encoded instructions
 *
 * It places the image at address 0 and the instructions at the next 16-byte boundary, runs
 * to FINISH, writes the data image after the run to OUT and prints "name value" per
 * counter; on an error it prints "error CODE insn INDEX: message" and exits 2. */
#include <stdio.h>

#include "kiln_vta.h"
#include "kiln_vta_fsim.h"

#define DRAM_BYTES (1u << 22)

static uint8_t dram[DRAM_BYTES] __attribute__((aligned(64)));
static uint32_t sim_mem[KILN_VTA_FSIM_DEFAULT_MEM_BYTES / 4u];
static uint8_t insns[1u << 20];

static long read_file(const char *path, uint8_t *dst, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n;
  if (f == NULL) {
    return -1;
  }
  n = fread(dst, 1, cap, f);
  fclose(f);
  return (long)n;
}

int main(int argc, char **argv) {
  kiln_vta_config cfg;
  kiln_vta_fsim sim;
  kiln_vta_device dev;
  kiln_vta vta;
  kiln_vta_counters counters;
  long image, code;
  size_t insn_addr;
  int rc, i;
  FILE *out;
  if (argc != 4) {
    fprintf(stderr, "usage: %s IMAGE INSNS OUT\n", argv[0]);
    return 2;
  }
  image = read_file(argv[1], dram, DRAM_BYTES / 2u);
  code = read_file(argv[2], insns, sizeof insns);
  if (image < 0 || code < 0) {
    fprintf(stderr, "cannot read the inputs\n");
    return 2;
  }
  insn_addr = ((size_t)image + 15u) & ~(size_t)15u;
  kiln_vta_config_default(&cfg);
  rc = kiln_vta_fsim_init(&sim, &cfg, sim_mem, sizeof sim_mem);
  if (rc == KILN_VTA_OK) {
    sim.dma_limit = (size_t)image;
    kiln_vta_fsim_device(&sim, &dev);
    rc = kiln_vta_init(&vta, &dev, dram, DRAM_BYTES);
  }
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_load_program(&vta, insns, (uint32_t)((size_t)code / KILN_VTA_INSN_BYTES),
                               insn_addr);
  }
  if (rc == KILN_VTA_OK) {
    rc = kiln_vta_run(&vta);
  }
  if (rc != KILN_VTA_OK) {
    printf("error %d insn %ld: %s\n", rc,
           vta.error.insn == KILN_VTA_NO_INSN ? -1L : (long)vta.error.insn,
           kiln_vta_strerror(rc));
    return 2;
  }
  kiln_vta_read_counters(&vta, &counters);
  for (i = 0; i < KILN_VTA_NCOUNTERS; ++i) {
    printf("%s %llu\n", kiln_vta_counter_name(i), (unsigned long long)counters.v[i]);
  }
  out = fopen(argv[3], "wb");
  if (out == NULL || fwrite(dram, 1, (size_t)image, out) != (size_t)image) {
    fprintf(stderr, "cannot write %s\n", argv[3]);
    return 2;
  }
  fclose(out);
  return 0;
}

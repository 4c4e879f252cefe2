// DRAM contents for the simulation-only DRAM timing model (kiln_dram_model.sv).
//
// The bytes live here, in C++, so that a test or `run_rtl` can load a multi-megabyte image in
// one file read instead of one VPI call per word. The timing (latency, bandwidth) is modelled
// in SystemVerilog; these DPI functions only move bytes.
//   KILN_DRAM_IN  : raw little-endian image read by kiln_dram_load()
//   KILN_DRAM_OUT : file written by kiln_dram_dump() (the whole image, at least its input size)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "svdpi.h"

namespace {
std::vector<uint8_t> g_mem;
}  // namespace

extern "C" void kiln_dram_load() {
  g_mem.clear();
  const char* path = std::getenv("KILN_DRAM_IN");
  if (!path || !*path) return;
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "kiln_dram: cannot open KILN_DRAM_IN=%s\n", path);
    return;
  }
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) g_mem.insert(g_mem.end(), buf, buf + n);
  std::fclose(f);
}

extern "C" void kiln_dram_dump() {
  const char* path = std::getenv("KILN_DRAM_OUT");
  if (!path || !*path) return;
  FILE* f = std::fopen(path, "wb");
  if (!f) {
    std::fprintf(stderr, "kiln_dram: cannot write KILN_DRAM_OUT=%s\n", path);
    return;
  }
  if (!g_mem.empty()) std::fwrite(g_mem.data(), 1, g_mem.size(), f);
  std::fclose(f);
}

extern "C" long long kiln_dram_size() { return static_cast<long long>(g_mem.size()); }

// Reads `nbytes` bytes at byte address `addr` into `data` (bytes beyond the image read as 0).
extern "C" void kiln_dram_read(long long addr, int nbytes, svBitVecVal* data) {
  const int words = (nbytes + 3) / 4;
  for (int w = 0; w < words; ++w) data[w] = 0;
  for (int i = 0; i < nbytes; ++i) {
    const uint64_t a = static_cast<uint64_t>(addr) + i;
    const uint32_t b = a < g_mem.size() ? g_mem[a] : 0;
    data[i / 4] |= b << (8 * (i % 4));
  }
}

// Writes the bytes of `data` whose strobe bit is set; the image grows if a write lands past it.
extern "C" void kiln_dram_write(long long addr, int nbytes, const svBitVecVal* data,
                                const svBitVecVal* strb) {
  for (int i = 0; i < nbytes; ++i) {
    if (!((strb[i / 32] >> (i % 32)) & 1u)) continue;
    const uint64_t a = static_cast<uint64_t>(addr) + i;
    if (a >= g_mem.size()) g_mem.resize(a + 1, 0);
    g_mem[a] = static_cast<uint8_t>(data[i / 4] >> (8 * (i % 4)));
  }
}

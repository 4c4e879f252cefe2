/* Kiln bundle runtime (C99, no malloc): see kiln_runtime.h. */
#include "kiln_runtime.h"

const char *kiln_strerror(int code) {
  switch (code) {
    case KILN_OK:
      return "ok";
    case KILN_ERR_NULL_ARGUMENT:
      return "a NULL argument (inputs, outputs, a tensor pointer or the arena)";
    case KILN_ERR_ARENA_ALIGNMENT:
      return "the arena is not aligned to the bundle's ARENA_ALIGN bytes";
    case KILN_ERR_KERNEL:
      return "a kernel failed";
    case KILN_ERR_THREADS:
      return "the thread pool could not start its threads";
    default:
      return "unknown error code";
  }
}

/* Kiln bundle runtime: error codes, alignment and timing hooks (C99, no malloc).
 *
 * Every bundle carries a copy of this folder in runtime/.  Nothing here allocates: the
 * caller owns the inputs, the outputs and the arena.  Define KILN_ENABLE_TIMING and
 * provide kiln_timing_hook() to time each kernel on a board (see docs/bundle.md). */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes of <model>_run(). */
#define KILN_OK 0
#define KILN_ERR_NULL_ARGUMENT 1 /* inputs, outputs, one of their pointers, or the arena is NULL */
#define KILN_ERR_ARENA_ALIGNMENT 2 /* the arena is not aligned to <MODEL>_ARENA_ALIGN bytes */
#define KILN_ERR_KERNEL 3 /* a kernel reported a failure */
/* Bundles with external weights (kiln compile --weights external): */
#define KILN_ERR_WEIGHTS_MISSING 4 /* <model>_run() before <model>_set_weights() succeeded */
#define KILN_ERR_WEIGHTS_SIZE 5 /* the weights are not <MODEL>_WEIGHTS_BYTES bytes long */
#define KILN_ERR_WEIGHTS_ALIGNMENT 6 /* the weights are not aligned to <MODEL>_WEIGHTS_ALIGN */
#define KILN_ERR_WEIGHTS_CHECKSUM 7 /* the weights' CRC-32 is not <MODEL>_WEIGHTS_CRC32 */
#define KILN_ERR_THREADS 8 /* the thread pool could not start its threads */
/* Accelerator bundles (kiln compile --target vta): */
#define KILN_ERR_ACCELERATOR 9 /* the accelerator's driver failed (kiln_vta_bundle_error) */

/* KILN_ALIGNED(n): align a variable (weights, a static arena) to n bytes. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_ALIGNED(n) __attribute__((aligned(n)))
#elif defined(_MSC_VER)
#define KILN_ALIGNED(n) __declspec(align(n))
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define KILN_ALIGNED(n) _Alignas(n)
#else
#define KILN_ALIGNED(n)
#endif

/* Placement in named linker sections, for an embedded link script (GCC and Clang; ELF
 * section names, or "segment,section" on Mach-O).  Define them on the compiler's command
 * line as bare names, e.g.
 *   -DKILN_WEIGHTS_SECTION=.rodata.kiln_weights   the weight blob: read by
 *       src/weights_blob.S (--weights incbin: `.section KILN_WEIGHTS_SECTION,"a"`) and by
 *       the c-array src/weights.c (through KILN_WEIGHTS_PLACE)
 *   -DKILN_ARENA_SECTION=.bss.kiln_arena          the static arena of main.c and of the
 *       firmware main (through KILN_ARENA_PLACE; a name starting .bss stays NOBITS)
 *   -DKILN_WEIGHTS_ALIGN=N / -DKILN_ARENA_ALIGN=N   raise the alignment of the blob /
 *       the static arena (a power of two, at least the bundle's 64; default 64 and
 *       <MODEL>_ARENA_ALIGN), e.g. to a DMA burst or an MPU region.
 * Without them the weights are ordinary read-only data (.rodata: flash on a board) and the
 * arena ordinary zeroed data (.bss). */
#define KILN_STR_(...) #__VA_ARGS__
#define KILN_STR(...) KILN_STR_(__VA_ARGS__)
#if defined(KILN_WEIGHTS_SECTION) && (defined(__GNUC__) || defined(__clang__))
#define KILN_WEIGHTS_PLACE __attribute__((section(KILN_STR(KILN_WEIGHTS_SECTION))))
#else
#define KILN_WEIGHTS_PLACE
#endif
#if defined(KILN_ARENA_SECTION) && (defined(__GNUC__) || defined(__clang__))
#define KILN_ARENA_PLACE __attribute__((section(KILN_STR(KILN_ARENA_SECTION))))
#else
#define KILN_ARENA_PLACE
#endif

/* Whether pointer p is a multiple of n bytes (n a power of two). */
#define KILN_IS_ALIGNED(p, n) ((((uintptr_t)(const void *)(p)) & ((uintptr_t)(n) - 1u)) == 0u)

/* Optional per-kernel timing: compile with -DKILN_ENABLE_TIMING and define
 *   void kiln_timing_hook(const char *kernel, int index, int phase);
 * phase 0 is called before kernel number `index` runs, phase 1 after it. */
#ifdef KILN_ENABLE_TIMING
void kiln_timing_hook(const char *kernel, int index, int phase);
#define KILN_TIMING_BEGIN(name, index) kiln_timing_hook((name), (index), 0)
#define KILN_TIMING_END(name, index) kiln_timing_hook((name), (index), 1)
#else
#define KILN_TIMING_BEGIN(name, index) ((void)0)
#define KILN_TIMING_END(name, index) ((void)0)
#endif

/* With runtime/kiln_profile.c (hosted builds, `make profile`): per-kernel time in ns,
 * printed as "kiln-profile INDEX KERNEL MIN_NS MEAN_NS CALLS" lines. */
#ifdef KILN_PROFILE
void kiln_profile_reset(void);
void kiln_profile_report(void);
/* The profiler's clock in ns (for a driver that times its device inside a kernel). */
double kiln_profile_clock_ns(void);
/* Entry i of the table (what a report line prints); 0 if it exists, -1 otherwise. */
int kiln_profile_entry(int i, const char **kernel, double *min_ns, double *mean_ns, long *calls);
#endif

/* kiln_f16: a float16 tensor element as it crosses the API, IEEE 754 binary16 bits in a
 * uint16_t (bit 15 sign, bits 14..10 exponent biased by 15, bits 9..0 fraction; the same
 * bits as numpy.float16, _Float16 and ARM's __fp16).  Kernels compute in float32: they
 * widen with kiln_f16_to_f32 (exact) and round results with kiln_f32_to_f16 (to nearest,
 * ties to even; overflow gives +-Inf; subnormals exact; a NaN stays a NaN with its sign
 * and the top 10 bits of its payload, as numpy converts).  Plain C99 bit manipulation,
 * identical on every compiler and CPU (no dependence on _Float16 or the FPU's modes;
 * F16C's and __fp16's hardware conversions quiet a signalling NaN: not identical). */
typedef uint16_t kiln_f16;

static inline float kiln_f16_to_f32(kiln_f16 h) {
  union { uint32_t u; float f; } v;
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t man = (uint32_t)h & 0x3ffu;
  if (exp == 0x1fu) {
    v.u = sign | 0x7f800000u | (man << 13); /* Inf, NaN (payload kept) */
  } else if (exp != 0u) {
    v.u = sign | ((exp + 112u) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
  } else {
    v.f = (float)man * 5.9604644775390625e-8f; /* +-0, subnormals: man * 2^-24, exact */
    v.u |= sign;
  }
  return v.f;
}

static inline kiln_f16 kiln_f32_to_f16(float f) {
  union { uint32_t u; float f; } v;
  uint32_t sign, ax, m, shift, q, rest, half;
  v.f = f;
  sign = (v.u >> 16) & 0x8000u;
  ax = v.u & 0x7fffffffu;
  if (ax > 0x7f800000u) { /* NaN: the payload's top bits, never turned into Inf */
    q = (ax >> 13) & 0x3ffu;
    return (kiln_f16)(sign | 0x7c00u | (q != 0u ? q : 1u));
  }
  if (ax >= 0x477ff000u) return (kiln_f16)(sign | 0x7c00u); /* >= 65520: Inf */
  if (ax >= 0x38800000u) { /* normal float16 (>= 2^-14): rebias, round the 13 low bits */
    m = ax - 0x38000000u;
    return (kiln_f16)(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  if (ax <= 0x33000000u) return (kiln_f16)sign; /* <= 2^-25: rounds to +-0 */
  /* subnormal float16: q * 2^-24 with q = the 24-bit significand >> shift, rounded */
  m = (ax & 0x7fffffu) | 0x800000u;
  shift = 126u - (ax >> 23);
  q = m >> shift;
  rest = m & ((1u << shift) - 1u);
  half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u) != 0u)) ++q;
  return (kiln_f16)(sign | q);
}

/* A double rounded to float16 once (to nearest, ties to even, as numpy): rounded to float
 * first by "round to odd" (an inexact result keeps an odd last bit, so the second rounding
 * cannot meet a false tie), then kiln_f32_to_f16. */
static inline kiln_f16 kiln_f64_to_f16(double d) {
  union { uint32_t u; float f; } v;
  v.f = (float)d;
  if ((double)v.f != d && d == d && (v.u & 1u) == 0u) {
    if (d > 0.0 ? (double)v.f < d : (double)v.f > d) ++v.u; /* toward d: one float ulp */
    else --v.u;
  }
  return kiln_f32_to_f16(v.f);
}

/* Threads (runtime/kiln_threads.c; docs/bundle.md "Threads").  A bundle compiled for a
 * target with `cores: N > 1` splits the parallel loops of its kernels across up to N threads:
 * <model>_set_threads(n) picks how many at run time.  The build chooses the library:
 * -DKILN_THREADS_PTHREAD (-pthread: a persistent pool, the Makefile's default on hosted
 * targets), -DKILN_THREADS_OPENMP (-fopenmp), or neither (serial, no thread library: bare
 * metal).  Nothing is allocated at run time.
 *
 * kiln_parallel(fn, ctx, n) runs fn(ctx, t, n) on up to n threads: the caller's (t = 0)
 * and the pool's workers that join before the task closes (its first barrier or its end;
 * t = 1, 2, ... in the order they join), and returns when all have returned; one task runs
 * at a time (callers on several threads take turns).  Inside a task, kiln_claim(g) hands
 * out the iterations of the current step g at a time (the first iteration of the chunk;
 * past the end: nothing left), and kiln_barrier(n) waits until every thread in the task
 * reaches it and starts the next step's iterations at 0.  kiln_threads_start(n) starts the pool's threads ahead of the first
 * task; kiln_threads_stop() joins them (before unloading the library, say).  A build without
 * a thread library runs every task on the caller's thread with n = 1. */
#ifndef KILN_MAX_THREADS
#define KILN_MAX_THREADS 64
#endif
typedef void (*kiln_task_fn)(void *ctx, int thread, int nthreads);
int kiln_parallel(kiln_task_fn fn, void *ctx, int nthreads);
int64_t kiln_claim(int64_t grain);
void kiln_barrier(int nthreads);
int kiln_threads_start(int nthreads);
void kiln_threads_stop(void);
/* The most threads this build can run: KILN_MAX_THREADS with a thread library, else 1. */
int kiln_threads_available(void);

/* A short English description of a return code of <model>_run(). */
const char *kiln_strerror(int code);

/* CRC-32 of `bytes` bytes at `data`, continuing from `crc` (0 to start): the IEEE 802.3
 * polynomial, reflected, as zlib's crc32() and Python's zlib.crc32() compute it.  Checks
 * external weights (<model>_set_weights); about 1 byte a cycle. */
uint32_t kiln_crc32(uint32_t crc, const void *data, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H */

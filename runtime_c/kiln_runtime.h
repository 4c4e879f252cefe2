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
#endif

/* A short English description of a return code of <model>_run(). */
const char *kiln_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H */

/* Kiln bundle profiler (optional, hosted): a kiln_timing_hook() that adds up the time of
 * each kernel.  Build a bundle with -DKILN_ENABLE_TIMING -DKILN_PROFILE and this file
 * (`make profile` does), run it, then call kiln_profile_report(): per kernel the
 * minimum and the mean time of a call.  Static tables only. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L
#endif
#include <stdio.h>
#include <time.h>

#include "kiln_runtime.h"

#define KILN_PROFILE_MAX 4096

static double kiln_prof_ns[KILN_PROFILE_MAX];
static double kiln_prof_min[KILN_PROFILE_MAX];
static long kiln_prof_calls[KILN_PROFILE_MAX];
static const char *kiln_prof_name[KILN_PROFILE_MAX];
static double kiln_prof_start;
static int kiln_prof_count;

static double kiln_prof_now(void) {
#if defined(CLOCK_MONOTONIC)
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
#else
  return (double)clock() * (1e9 / (double)CLOCKS_PER_SEC);
#endif
}

void kiln_timing_hook(const char *kernel, int index, int phase) {
  if (index < 0 || index >= KILN_PROFILE_MAX) return;
  if (phase == 0) {
    kiln_prof_start = kiln_prof_now();
    return;
  }
  {
    double dt = kiln_prof_now() - kiln_prof_start;
    kiln_prof_ns[index] += dt;
    if (kiln_prof_calls[index] == 0 || dt < kiln_prof_min[index]) kiln_prof_min[index] = dt;
  }
  kiln_prof_calls[index] += 1;
  kiln_prof_name[index] = kernel;
  if (index + 1 > kiln_prof_count) kiln_prof_count = index + 1;
}

void kiln_profile_reset(void) {
  int i;
  for (i = 0; i < kiln_prof_count; ++i) {
    kiln_prof_ns[i] = 0.0;
    kiln_prof_calls[i] = 0;
  }
}

void kiln_profile_report(void) {
  int i;
  for (i = 0; i < kiln_prof_count; ++i) {
    if (kiln_prof_calls[i] == 0) continue;
    printf("kiln-profile %d %s %.0f %.0f %ld\n", i, kiln_prof_name[i], kiln_prof_min[i],
           kiln_prof_ns[i] / (double)kiln_prof_calls[i], kiln_prof_calls[i]);
  }
}

double kiln_profile_clock_ns(void) { return kiln_prof_now(); }

int kiln_profile_entry(int i, const char **kernel, double *min_ns, double *mean_ns,
                       long *calls) {
  if (i < 0 || i >= kiln_prof_count || kiln_prof_calls[i] == 0) return -1;
  *kernel = kiln_prof_name[i];
  *min_ns = kiln_prof_min[i];
  *mean_ns = kiln_prof_ns[i] / (double)kiln_prof_calls[i];
  *calls = kiln_prof_calls[i];
  return 0;
}

/* Kiln bundle runtime: the parallel-for of multi-threaded bundles (see kiln_runtime.h).
 *
 * Chosen at build time:
 *   -DKILN_THREADS_PTHREAD (with -pthread)  a persistent pool of POSIX threads, started at
 *                                            the first parallel call (or kiln_threads_start);
 *   -DKILN_THREADS_OPENMP (with -fopenmp)   an OpenMP parallel region per call;
 *   neither                                  serial: every task runs on the caller's thread
 *                                            (bare-metal builds: no thread library at all).
 *
 * The pool allocates nothing: its state is static, and a worker's stack is the only memory
 * the C library gives it (once, when the thread starts).  Workers spin for a short while
 * after a task (kernels follow each other within microseconds) and then sleep on a
 * condition variable until the next one, so an idle bundle costs no CPU. */
#include "kiln_runtime.h"

#if defined(KILN_THREADS_PTHREAD) && defined(KILN_THREADS_OPENMP)
#error "define one of KILN_THREADS_PTHREAD and KILN_THREADS_OPENMP, not both"
#endif

#if defined(KILN_THREADS_PTHREAD)
#include <pthread.h>
#include <sched.h>

/* spin iterations before a waiting thread yields, and before an idle worker sleeps */
#define KILN_SPIN 4000
#define KILN_IDLE_SPIN 50000

static pthread_mutex_t kiln_lock = PTHREAD_MUTEX_INITIALIZER;     /* sleep/wake */
static pthread_cond_t kiln_wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t kiln_submit = PTHREAD_MUTEX_INITIALIZER;   /* one task at a time */
static pthread_t kiln_workers[KILN_MAX_THREADS];
static unsigned kiln_first_seen[KILN_MAX_THREADS]; /* the generation a worker starts after */
static int kiln_started = 1;   /* threads running, the caller's included (kiln_submit) */
static int kiln_stopping;      /* atomic: workers exit */
static int kiln_sleepers;      /* guarded by kiln_lock */
static unsigned kiln_generation; /* atomic: bumped once per task */
static int kiln_pending;       /* atomic: workers that have not finished the current task */
static kiln_task_fn kiln_task;
static void *kiln_task_ctx;
static int kiln_task_threads;
/* barrier: arrivals in this round, and the round number (sense) */
static int kiln_arrived;
static unsigned kiln_round;

static void kiln_pause(long spins) {
  if (spins > KILN_SPIN) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *kiln_worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  unsigned seen = kiln_first_seen[tid];
  for (;;) {
    long spins = 0;
    unsigned gen;
    while ((gen = __atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE)) == seen &&
           !__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE)) {
      if (++spins < KILN_IDLE_SPIN) {
        kiln_pause(spins);
        continue;
      }
      pthread_mutex_lock(&kiln_lock);
      ++kiln_sleepers;
      while (__atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE) == seen &&
             !__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&kiln_wake, &kiln_lock);
      --kiln_sleepers;
      pthread_mutex_unlock(&kiln_lock);
    }
    if (__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE)) return NULL;
    seen = gen;
    /* every started worker acknowledges every task (those beyond its thread count run
     * nothing), so the task's fields are never rewritten while a worker reads them */
    if (tid < kiln_task_threads) kiln_task(kiln_task_ctx, tid, kiln_task_threads);
    __atomic_sub_fetch(&kiln_pending, 1, __ATOMIC_ACQ_REL);
  }
}

/* Start workers until `nthreads` threads run (the caller's included); under kiln_submit. */
static void kiln_grow(int nthreads) {
  if (nthreads > KILN_MAX_THREADS) nthreads = KILN_MAX_THREADS;
  if (kiln_started == 1) __atomic_store_n(&kiln_stopping, 0, __ATOMIC_RELEASE);
  while (kiln_started < nthreads &&
         (kiln_first_seen[kiln_started] = __atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE),
          1) &&
         pthread_create(&kiln_workers[kiln_started], NULL, kiln_worker,
                        (void *)(intptr_t)kiln_started) == 0)
    ++kiln_started;
}

int kiln_threads_start(int nthreads) {
  int ok;
  pthread_mutex_lock(&kiln_submit);
  kiln_grow(nthreads);
  ok = kiln_started >= (nthreads < KILN_MAX_THREADS ? nthreads : KILN_MAX_THREADS);
  pthread_mutex_unlock(&kiln_submit);
  return ok ? KILN_OK : KILN_ERR_THREADS;
}

void kiln_threads_stop(void) {
  int i;
  pthread_mutex_lock(&kiln_submit);
  if (kiln_started > 1) {
    pthread_mutex_lock(&kiln_lock);
    __atomic_store_n(&kiln_stopping, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&kiln_wake);
    pthread_mutex_unlock(&kiln_lock);
    for (i = 1; i < kiln_started; ++i) pthread_join(kiln_workers[i], NULL);
    kiln_started = 1;
  }
  pthread_mutex_unlock(&kiln_submit);
}

int kiln_parallel(kiln_task_fn fn, void *ctx, int nthreads) {
  long spins = 0;
  if (nthreads > KILN_MAX_THREADS) nthreads = KILN_MAX_THREADS;
  if (nthreads <= 1) {
    fn(ctx, 0, 1);
    return KILN_OK;
  }
  pthread_mutex_lock(&kiln_submit);
  kiln_grow(nthreads);
  if (nthreads > kiln_started) nthreads = kiln_started; /* fewer threads could start */
  kiln_task = fn;
  kiln_task_ctx = ctx;
  kiln_task_threads = nthreads;
  __atomic_store_n(&kiln_arrived, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&kiln_pending, kiln_started - 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&kiln_generation, 1u, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&kiln_lock);
  if (kiln_sleepers > 0) pthread_cond_broadcast(&kiln_wake);
  pthread_mutex_unlock(&kiln_lock);
  fn(ctx, 0, nthreads);
  while (__atomic_load_n(&kiln_pending, __ATOMIC_ACQUIRE) != 0) kiln_pause(++spins);
  pthread_mutex_unlock(&kiln_submit);
  return KILN_OK;
}

void kiln_barrier(int nthreads) {
  long spins = 0;
  unsigned round;
  if (nthreads <= 1) return;
  round = __atomic_load_n(&kiln_round, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&kiln_arrived, 1, __ATOMIC_ACQ_REL) == nthreads) {
    __atomic_store_n(&kiln_arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&kiln_round, 1u, __ATOMIC_ACQ_REL);
    return;
  }
  while (__atomic_load_n(&kiln_round, __ATOMIC_ACQUIRE) == round) kiln_pause(++spins);
}

#elif defined(KILN_THREADS_OPENMP)
#include <omp.h>

int kiln_threads_start(int nthreads) {
  (void)nthreads;
  return KILN_OK;
}

void kiln_threads_stop(void) {}

int kiln_parallel(kiln_task_fn fn, void *ctx, int nthreads) {
  if (nthreads > KILN_MAX_THREADS) nthreads = KILN_MAX_THREADS;
  if (nthreads <= 1) {
    fn(ctx, 0, 1);
    return KILN_OK;
  }
#pragma omp parallel num_threads(nthreads)
  fn(ctx, omp_get_thread_num(), omp_get_num_threads());
  return KILN_OK;
}

void kiln_barrier(int nthreads) {
  if (nthreads > 1) {
#pragma omp barrier
  }
}

#else /* serial */

int kiln_threads_start(int nthreads) {
  (void)nthreads;
  return KILN_OK;
}

void kiln_threads_stop(void) {}

int kiln_parallel(kiln_task_fn fn, void *ctx, int nthreads) {
  (void)nthreads;
  fn(ctx, 0, 1);
  return KILN_OK;
}

void kiln_barrier(int nthreads) { (void)nthreads; }

#endif

int kiln_threads_available(void) {
#if defined(KILN_THREADS_PTHREAD) || defined(KILN_THREADS_OPENMP)
  return KILN_MAX_THREADS;
#else
  return 1;
#endif
}

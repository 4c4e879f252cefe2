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
 * the C library gives it (once, when the thread starts).  A waiting thread (at a barrier,
 * for the next task, for the task's end) spins for a short while (kernels follow each other
 * within microseconds) and then blocks on a condition variable, so an idle bundle costs no
 * CPU and a machine with more threads than cores does not spin its time away. */
#include "kiln_runtime.h"

#if defined(KILN_THREADS_PTHREAD) && defined(KILN_THREADS_OPENMP)
#error "define one of KILN_THREADS_PTHREAD and KILN_THREADS_OPENMP, not both"
#endif

#if defined(KILN_THREADS_PTHREAD)
#include <pthread.h>
#include <sched.h>

/* How long a waiting thread spins before it blocks, in pause-loop iterations: within a
 * run (barriers, the end of a task) and between runs (an idle worker); after the first
 * KILN_SPIN_PAUSE iterations each one also yields the core (another thread may need it). */
#define KILN_SPIN_PAUSE 2000L
#define KILN_SPIN 2100L
#define KILN_IDLE_SPIN 20000L

static pthread_mutex_t kiln_submit = PTHREAD_MUTEX_INITIALIZER; /* one task at a time */
static pthread_mutex_t kiln_lock = PTHREAD_MUTEX_INITIALIZER;   /* blocking waits */
static pthread_cond_t kiln_cond = PTHREAD_COND_INITIALIZER;
static int kiln_blocked; /* threads blocked on kiln_cond (guarded by kiln_lock) */
static pthread_t kiln_workers[KILN_MAX_THREADS];
static unsigned kiln_first_seen[KILN_MAX_THREADS]; /* the generation a worker starts after */
static int kiln_started = 1;     /* threads running, the caller's included (kiln_submit) */
static unsigned kiln_stopping;   /* atomic: workers exit */
static unsigned kiln_generation; /* atomic: bumped once per task */
static unsigned kiln_done;       /* atomic: bumped when the last worker finishes a task */
static int kiln_pending;         /* atomic: workers that have not finished the task */
static kiln_task_fn kiln_task;
static void *kiln_task_ctx;
static int kiln_task_threads;
static int kiln_arrived;         /* atomic: threads at the barrier this round */
static unsigned kiln_round;      /* atomic: barrier rounds completed */

static void kiln_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Wait until *word differs from `old` (or the pool stops): spin, then block. */
static void kiln_wait_change(const unsigned *word, unsigned old, long spin) {
  long i;
  for (i = 0; i < spin; ++i) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) return;
    if (i < KILN_SPIN_PAUSE) kiln_relax();
    else sched_yield();
  }
  pthread_mutex_lock(&kiln_lock);
  ++kiln_blocked;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == old &&
         !__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE))
    pthread_cond_wait(&kiln_cond, &kiln_lock);
  --kiln_blocked;
  pthread_mutex_unlock(&kiln_lock);
}

/* Bump *word and wake the threads blocked waiting for it to change. */
static void kiln_bump(unsigned *word) {
  __atomic_add_fetch(word, 1u, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&kiln_lock);
  if (kiln_blocked > 0) pthread_cond_broadcast(&kiln_cond);
  pthread_mutex_unlock(&kiln_lock);
}

static void *kiln_worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  unsigned seen = kiln_first_seen[tid];
  for (;;) {
    kiln_wait_change(&kiln_generation, seen, KILN_IDLE_SPIN);
    if (__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE)) return NULL;
    seen = __atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE);
    /* every started worker acknowledges every task (those beyond its thread count run
     * nothing), so the task's fields are never rewritten while a worker reads them */
    if (tid < kiln_task_threads) kiln_task(kiln_task_ctx, tid, kiln_task_threads);
    if (__atomic_sub_fetch(&kiln_pending, 1, __ATOMIC_ACQ_REL) == 0) kiln_bump(&kiln_done);
  }
}

/* Start workers until `nthreads` threads run (the caller's included); under kiln_submit. */
static void kiln_grow(int nthreads) {
  if (nthreads > KILN_MAX_THREADS) nthreads = KILN_MAX_THREADS;
  if (kiln_started == 1) __atomic_store_n(&kiln_stopping, 0u, __ATOMIC_RELEASE);
  while (kiln_started < nthreads) {
    kiln_first_seen[kiln_started] = __atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE);
    if (pthread_create(&kiln_workers[kiln_started], NULL, kiln_worker,
                       (void *)(intptr_t)kiln_started) != 0)
      break;
    ++kiln_started;
  }
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
    __atomic_store_n(&kiln_stopping, 1u, __ATOMIC_RELEASE);
    kiln_bump(&kiln_generation);
    for (i = 1; i < kiln_started; ++i) pthread_join(kiln_workers[i], NULL);
    kiln_started = 1;
  }
  pthread_mutex_unlock(&kiln_submit);
}

int kiln_parallel(kiln_task_fn fn, void *ctx, int nthreads) {
  unsigned done;
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
  done = __atomic_load_n(&kiln_done, __ATOMIC_ACQUIRE);
  kiln_bump(&kiln_generation);
  fn(ctx, 0, nthreads);
  kiln_wait_change(&kiln_done, done, KILN_SPIN);
  pthread_mutex_unlock(&kiln_submit);
  return KILN_OK;
}

void kiln_barrier(int nthreads) {
  unsigned round;
  if (nthreads <= 1) return;
  round = __atomic_load_n(&kiln_round, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&kiln_arrived, 1, __ATOMIC_ACQ_REL) == nthreads) {
    __atomic_store_n(&kiln_arrived, 0, __ATOMIC_RELAXED);
    kiln_bump(&kiln_round);
    return;
  }
  kiln_wait_change(&kiln_round, round, KILN_SPIN);
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

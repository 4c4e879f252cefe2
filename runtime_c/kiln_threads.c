/* Kiln bundle runtime: the parallel-for of multi-threaded bundles (see kiln_runtime.h).
 *
 * Chosen at build time:
 *   -DKILN_THREADS_PTHREAD (with -pthread)  a persistent pool of POSIX threads, started at
 *                                            the first parallel call (or kiln_threads_start);
 *   -DKILN_THREADS_OPENMP (with -fopenmp)   an OpenMP parallel region per call;
 *   neither                                  serial: every task runs on the caller's thread
 *                                            (bare-metal builds: no thread library at all).
 *
 * Work is claimed, not assigned: a parallel loop's iterations go in chunks to whichever
 * thread asks next (kiln_claim), and a worker that wakes after the task closed (its first
 * barrier, or its end) stays out of it.  So a thread the system does not run (a loaded
 * machine, more threads than cores) delays nobody: the others take its share.
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

/* How long a waiting thread spins before it blocks, in pause-loop iterations (tens of
 * nanoseconds each): within a run (barriers, the end of a task) and between tasks (an
 * idle worker).  No sched_yield: on a loaded machine it hands the core to another process
 * for a whole time slice (milliseconds), while a blocked thread woken by the condition
 * variable preempts a lower-priority one at once. */
#define KILN_SPIN 3000L
#define KILN_IDLE_SPIN 10000L

static pthread_mutex_t kiln_submit = PTHREAD_MUTEX_INITIALIZER; /* one task at a time */
static pthread_mutex_t kiln_lock = PTHREAD_MUTEX_INITIALIZER;   /* blocking waits */
static pthread_cond_t kiln_cond = PTHREAD_COND_INITIALIZER;
static int kiln_blocked; /* threads blocked on kiln_cond (guarded by kiln_lock) */
static pthread_t kiln_workers[KILN_MAX_THREADS];
static unsigned kiln_first_seen[KILN_MAX_THREADS]; /* the generation a worker starts after */
static int kiln_started = 1;     /* threads running, the caller's included (kiln_submit) */
static unsigned kiln_stopping;   /* atomic: workers exit */
static unsigned kiln_generation; /* atomic: bumped once per task */
/* atomic: who runs the current task: generation (bits 63..32), closed (bit 31: no thread
 * may join any more), the most threads it takes (bits 23..16), threads joined so far, the
 * caller's included (bits 15..0) */
static uint64_t kiln_join;
static unsigned kiln_exited;     /* atomic: joined workers that have left the task */
static kiln_task_fn kiln_task;
static void *kiln_task_ctx;
static int kiln_task_threads;
static int64_t kiln_next;        /* atomic: the next unclaimed iteration of this step */
static int kiln_arrived;         /* atomic: threads at the barrier this round */
static unsigned kiln_round;      /* atomic: barrier rounds completed */

#define KILN_CLOSED ((uint64_t)1 << 31)
#define KILN_COUNT(w) ((int)((w) & 0xffffu))
#define KILN_LIMIT(w) ((int)(((w) >> 16) & 0xffu))

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
    kiln_relax();
  }
  pthread_mutex_lock(&kiln_lock);
  ++kiln_blocked;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == old &&
         !__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE))
    pthread_cond_wait(&kiln_cond, &kiln_lock);
  --kiln_blocked;
  pthread_mutex_unlock(&kiln_lock);
}

/* Add 1 to *word and wake the threads blocked waiting for it to change. */
static void kiln_bump(unsigned *word) {
  __atomic_add_fetch(word, 1u, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&kiln_lock);
  if (kiln_blocked > 0) pthread_cond_broadcast(&kiln_cond);
  pthread_mutex_unlock(&kiln_lock);
}

/* Close the current task to newcomers; the number of threads that joined it. */
static int kiln_close(void) {
  uint64_t w = __atomic_load_n(&kiln_join, __ATOMIC_ACQUIRE);
  while (!(w & KILN_CLOSED) &&
         !__atomic_compare_exchange_n(&kiln_join, &w, w | KILN_CLOSED, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
  }
  return KILN_COUNT(w);
}

/* A worker joins the current task while it is open and short of threads: its thread
 * number, or -1. */
static int kiln_try_join(void) {
  uint64_t w = __atomic_load_n(&kiln_join, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((w & KILN_CLOSED) || KILN_COUNT(w) >= KILN_LIMIT(w)) return -1;
    if (__atomic_compare_exchange_n(&kiln_join, &w, w + 1u, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return KILN_COUNT(w);
  }
}

static void *kiln_worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  unsigned seen = kiln_first_seen[tid];
  for (;;) {
    int me;
    kiln_wait_change(&kiln_generation, seen, KILN_IDLE_SPIN);
    if (__atomic_load_n(&kiln_stopping, __ATOMIC_ACQUIRE)) return NULL;
    seen = __atomic_load_n(&kiln_generation, __ATOMIC_ACQUIRE);
    /* a worker that wakes late finds the task closed (its work taken by the others) and
     * waits for the next one: nobody waits for a thread the system did not run */
    me = kiln_try_join();
    if (me < 0) continue;
    kiln_task(kiln_task_ctx, me, kiln_task_threads);
    kiln_bump(&kiln_exited);
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
  unsigned gen;
  int joined;
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
  __atomic_store_n(&kiln_next, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&kiln_arrived, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&kiln_exited, 0u, __ATOMIC_RELAXED);
  gen = __atomic_load_n(&kiln_generation, __ATOMIC_RELAXED) + 1u;
  __atomic_store_n(&kiln_join, ((uint64_t)gen << 32) | ((uint64_t)nthreads << 16) | 1u,
                   __ATOMIC_RELEASE); /* the caller has joined */
  kiln_bump(&kiln_generation);
  fn(ctx, 0, nthreads);
  joined = kiln_close();
  for (;;) { /* the workers that joined finish their part */
    unsigned out = __atomic_load_n(&kiln_exited, __ATOMIC_ACQUIRE);
    if ((int)out >= joined - 1) break;
    kiln_wait_change(&kiln_exited, out, KILN_SPIN);
  }
  pthread_mutex_unlock(&kiln_submit);
  return KILN_OK;
}

int64_t kiln_claim(int64_t grain) {
  return __atomic_fetch_add(&kiln_next, grain, __ATOMIC_ACQ_REL);
}

void kiln_barrier(int nthreads) {
  unsigned round;
  int joined;
  if (nthreads <= 1) return;
  joined = kiln_close(); /* the threads in the task from here on are final */
  round = __atomic_load_n(&kiln_round, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&kiln_arrived, 1, __ATOMIC_ACQ_REL) == joined) {
    __atomic_store_n(&kiln_arrived, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&kiln_next, 0, __ATOMIC_RELAXED); /* the next step's iterations */
    kiln_bump(&kiln_round);
    return;
  }
  kiln_wait_change(&kiln_round, round, KILN_SPIN);
}

#elif defined(KILN_THREADS_OPENMP)
#include <omp.h>

static int64_t kiln_next; /* atomic: the next unclaimed iteration of this step */

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
  __atomic_store_n(&kiln_next, 0, __ATOMIC_RELAXED);
#pragma omp parallel num_threads(nthreads)
  fn(ctx, omp_get_thread_num(), omp_get_num_threads());
  return KILN_OK;
}

int64_t kiln_claim(int64_t grain) {
  return __atomic_fetch_add(&kiln_next, grain, __ATOMIC_ACQ_REL);
}

void kiln_barrier(int nthreads) {
  if (nthreads > 1) {
#pragma omp barrier
    if (omp_get_thread_num() == 0) __atomic_store_n(&kiln_next, 0, __ATOMIC_RELAXED);
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

static int64_t kiln_next; /* a task on one thread never claims (kernels count locally) */

int64_t kiln_claim(int64_t grain) {
  int64_t b = kiln_next;
  kiln_next += grain;
  return b;
}

void kiln_barrier(int nthreads) {
  (void)nthreads;
  kiln_next = 0;
}

#endif

int kiln_threads_available(void) {
#if defined(KILN_THREADS_PTHREAD) || defined(KILN_THREADS_OPENMP)
  return KILN_MAX_THREADS;
#else
  return 1;
#endif
}

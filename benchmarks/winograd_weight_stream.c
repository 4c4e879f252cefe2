/* The F(2x2, 3x3) Winograd GEMMs of ResNet-18's C12 (512 -> 512 channels, 7x7: 16 tiles),
 * timed cold (the weights rotate through NROT copies, more than the L3 holds), three ways:
 *
 *   rows   the bundle's planes layout: U[e][k][c] (16.8 MB), MR rows of k read as MR
 *          streams, the 16 tiles one vector
 *   panels U[e][k/MR][c][MR]: the same bytes as one stream per GEMM
 *   otf    the transform on the fly: only the 3x3 weights W[k][c/16][9][16] (9.4 MB) are
 *          read; per block of MR output channels U = G g G^T is computed into a block of
 *          16 x MR x C floats (L2), then the 16 GEMMs read it; the next block's weights
 *          are prefetched during the GEMMs (without that the transform waits on memory)
 *
 * and the transform alone (otf_transform, warm). Each variant cycles through its own
 * NROT copies of its weights (rows and panels 2 x NROT x 33.5 MB, otf NROT x 18.9 MB). Driven by winograd_weight_stream.py,
 * which builds it with -O3 -march=x86-64-v4 and prints each against rows. AVX-512 only.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define K 512
#define C 512
#define E 16
#ifndef MR
#define MR 16
#endif
#define CS (C + 16) /* the transformed block's row stride: rows 2 KiB apart alias in L1 */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* pf: prefetch 9 * MR / E floats further each step (the next block's weights spread over
 * the 16 GEMMs), or NULL */
static void gemm_block(const float *u, size_t ustride, int ucol, const float *v, float *m,
                       const float *pf) {
  __m512 acc[MR];
  for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
  for (int c = 0; c < C; c++) {
    __m512 vv = _mm512_loadu_ps(v + c * 16);
    if (pf) __builtin_prefetch(pf + (size_t)c * 9 * MR / E);
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(u[r * ustride + (size_t)c * ucol]), vv, acc[r]);
  }
  for (int r = 0; r < MR; r++) _mm512_storeu_ps(m + r * 16, acc[r]);
}

__attribute__((noinline)) static void rows(const float *U, const float *V, float *M) {
  for (int e = 0; e < E; e++)
    for (int k0 = 0; k0 < K; k0 += MR)
      gemm_block(U + ((size_t)e * K + k0) * C, C, 1, V + (size_t)e * C * 16,
                 M + ((size_t)e * K + k0) * 16, NULL);
}

__attribute__((noinline)) static void panels(const float *U, const float *V, float *M) {
  for (int e = 0; e < E; e++)
    for (int k0 = 0; k0 < K; k0 += MR)
      gemm_block(U + ((size_t)e * K + k0) * C, 1, MR, V + (size_t)e * C * 16,
                 M + ((size_t)e * K + k0) * 16, NULL);
}

/* G g G^T of MR output channels, 16 input channels a step, into Ub[e][r][CS] (the halves
 * of G left out: a per-(e) scale the input transform could carry; the bytes and the adds
 * are what is measured) */
static void transform(const float *W, int k0, float *Ub) {
  for (int r = 0; r < MR; r++) {
    const float *w = W + (size_t)(k0 + r) * 9 * C;
    for (int c = 0; c < C; c += 16) {
      __m512 g[9], t[4][3];
      for (int i = 0; i < 9; i++) g[i] = _mm512_loadu_ps(w + c * 9 + i * 16);
      for (int j = 0; j < 3; j++) {
        __m512 s = _mm512_add_ps(g[j], g[6 + j]);
        t[0][j] = g[j];
        t[1][j] = _mm512_add_ps(s, g[3 + j]);
        t[2][j] = _mm512_sub_ps(s, g[3 + j]);
        t[3][j] = g[6 + j];
      }
      for (int a = 0; a < 4; a++) {
        __m512 s = _mm512_add_ps(t[a][0], t[a][2]);
        float *o = Ub + ((size_t)(a * 4) * MR + r) * CS + c;
        _mm512_storeu_ps(o, t[a][0]);
        _mm512_storeu_ps(o + (size_t)MR * CS, _mm512_add_ps(s, t[a][1]));
        _mm512_storeu_ps(o + (size_t)2 * MR * CS, _mm512_sub_ps(s, t[a][1]));
        _mm512_storeu_ps(o + (size_t)3 * MR * CS, t[a][2]);
      }
    }
  }
}

__attribute__((noinline)) static void otf(const float *W, const float *V, float *M, float *Ub,
                                          int gemms) {
  for (int k0 = 0; k0 < K; k0 += MR) {
    transform(W, k0, Ub);
    if (!gemms) continue;
    const float *next = W + (size_t)(k0 + MR) * 9 * C;
    for (int e = 0; e < E; e++)
      gemm_block(Ub + (size_t)e * MR * CS, CS, 1, V + (size_t)e * C * 16,
                 M + ((size_t)e * K + k0) * 16,
                 k0 + MR < K ? next + (size_t)e * 9 * MR * C / E : NULL);
  }
}

int main(int argc, char **argv) {
  int nrot = argc > 1 ? atoi(argv[1]) : 4, reps = argc > 2 ? atoi(argv[2]) : 20;
  size_t usz = (size_t)E * K * C, wsz = (size_t)9 * K * C;
  float *U = aligned_alloc(64, usz * 4 * 2 * nrot), *W = aligned_alloc(64, wsz * 4 * nrot);
  float *V = aligned_alloc(64, E * C * 16 * 4), *M = aligned_alloc(64, E * K * 16 * 4);
  float *Ub = aligned_alloc(64, (size_t)E * MR * CS * 4);
  for (size_t i = 0; i < usz * 2 * nrot; i++) U[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < wsz * nrot; i++) W[i] = (float)(i % 5) * 0.1f;
  for (int i = 0; i < E * C * 16; i++) V[i] = (float)(i % 3) * 0.1f;
  const char *names[] = {"rows", "panels", "otf", "otf_transform"};
  double best[4] = {1e9, 1e9, 1e9, 1e9};
  for (int rep = 0; rep < reps; rep++)
    for (int mode = 0; mode < 4; mode++) {
      int k = rep % nrot;
      double t = now();
      if (mode == 0) rows(U + k * usz, V, M);
      else if (mode == 1) panels(U + (nrot + k) * usz, V, M); /* its own copies */
      else otf(W + (mode == 3 ? 0 : k * wsz), V, M, Ub, mode == 2);
      t = now() - t;
      if (t < best[mode]) best[mode] = t;
    }
  for (int mode = 0; mode < 4; mode++)
    printf("MR=%d %s %.1f\n", MR, names[mode], best[mode] * 1e6);
  return 0;
}

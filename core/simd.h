/* core/simd.h - hot elementwise loops compiled three times: the portable baseline, AVX2, AVX-512F.
 *
 * nf builds for the x86-64 baseline (SSE2) so one binary runs on every x86-64 machine.  The loops
 * that dominate a training step outside the matrix products (activations, the optimizer step, bias
 * and weight-gradient sums, the spline and affine kernels) are marked NF_SIMD_CLONES: GCC and clang
 * then compile the function for the baseline, AVX2 and AVX-512F and pick one when the program
 * loads (an ifunc resolver that asks cpuid and, for AVX-512, whether the OS saves its registers), so
 * a machine with AVX2 runs 8-float vectors as a -march=native build did.  Measured on the benchmark
 * VM (bench/RESULTS.md, "Portable build"): without the clones the baseline build trained up to 7%
 * slower.  The AVX-512F clone (2026-12-04, a CPU with AVX-512): point-process training 1.10x faster
 * at one thread, the flows 0.99-1.07x.
 *
 * No FMA: nf compiles with -ffp-contract=off (GCC's default under -std=c11; clang would otherwise
 * fuse a * b + c wherever the target has FMA, as the AVX-512F clone does), so elementwise loops
 * compute the same bits in every clone and in the OpenMP regions clang runs at the baseline.  Loops
 * with an `omp simd` reduction (the mixture's sums in distributions/gmm.c, in double; attention's
 * dot products and softmax sums) add 16 floats or 8 doubles at a time in the AVX-512F clone against
 * 8 or 4 in AVX2, so their sums can differ in the last bits between the two; every model of
 * bench/compare_revisions.sh and a 12-step point-process fit still came out bit-identical
 * (2026-12-04), the double sums rounding to the same floats.
 * GCC also clones the OpenMP regions inside a marked function; clang 14 runs those at the baseline.
 * A marked function is never inlined into its callers: mark functions that loop over whole arrays,
 * not the small helpers they call (those are inlined into each clone).  Mark only static functions
 * defined before their first call (clang's rule for multiversioned functions); an exported function
 * is a plain wrapper that calls its static `_simd` twin, so its symbol and header stay ordinary.
 * Off (plain functions) where ifuncs are unavailable (not x86-64, not ELF, older compilers), under
 * ThreadSanitizer, and with -DNF_NO_CLONES.
 */
#ifndef NF_SIMD_H
#define NF_SIMD_H

/* ThreadSanitizer instruments the ifunc resolver, which the dynamic loader runs before the
 * sanitizer's runtime is up: the program dies before main (AddressSanitizer does not mind). */
#if defined(__SANITIZE_THREAD__)
#define NF_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NF_NO_CLONES 1
#endif
#endif

#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(NF_NO_CLONES) &&                     \
    (defined(__clang__) ? __clang_major__ >= 14 : __GNUC__ >= 6)
#define NF_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NF_SIMD_CLONES
#endif

#endif

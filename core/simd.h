/* core/simd.h - hot elementwise loops compiled twice: for the portable baseline and for AVX2.
 *
 * nf builds for the x86-64 baseline (SSE2) so one binary runs on every x86-64 machine.  The loops
 * that dominate a training step outside the matrix products (activations, the optimizer step, bias
 * and weight-gradient sums, the spline and affine kernels) are marked NF_SIMD_CLONES: GCC and clang
 * then compile the function for the baseline and for AVX2 and pick one when the program loads
 * (an ifunc resolver that asks cpuid), so a machine with AVX2 runs 8-float vectors as a
 * -march=native build did.  Measured on the benchmark VM (bench/RESULTS.md, "Portable build"):
 * without the clones the baseline build trained up to 7% slower.
 *
 * Only AVX2, not FMA: nf compiles with -std=c11, where GCC does not contract a * b + c, so the AVX2
 * clone computes the same bits as the -march=native builds did (bench/compare_revisions.sh).
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
#define NF_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define NF_SIMD_CLONES
#endif

#endif

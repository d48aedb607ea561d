/* rng.h: deterministic random numbers (splitmix64 seeding an xoshiro256** stream; both by Blackman and
 * Vigna, https://prng.di.unimi.it/). Same seed, same numbers on every machine: weights and inputs are
 * reproducible from --seed alone. */
#ifndef TP_RNG_H
#define TP_RNG_H
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} tp_rng;

void tp_rng_seed(tp_rng *r, uint64_t seed);
/* Seeds from a seed and a string (e.g. a parameter name), so each tensor's stream does not depend on the
 * order in which tensors are generated. */
void tp_rng_seed_named(tp_rng *r, uint64_t seed, const char *name);
uint64_t tp_rng_u64(tp_rng *r);
double tp_rng_uniform(tp_rng *r); /* [0, 1) with 53 random bits */
double tp_rng_normal(tp_rng *r);  /* standard normal, Box-Muller */
/* Normal(mean, std) truncated to [a, b] by rejection, as torch.nn.init.trunc_normal_ defines the
 * distribution (timm's ViT init uses std 0.02, a = -2, b = 2, i.e. effectively untruncated). */
double tp_rng_trunc_normal(tp_rng *r, double mean, double std, double a, double b);

/* Counter-based draws (issue 43: weights synthesized in parallel, and the same values on the GPU): draw i of the
 * stream keyed by tp_ctr_key(seed, name) is a function of (key, i) alone, so a tensor fills in any order, on any
 * number of threads. Integer arithmetic only up to an exact float, so a GPU kernel computing the same expressions
 * gets the same bits (keep its double arithmetic unfused: __dmul_rn, __dadd_rn).
 *   tp_ctr_u64:     splitmix64's finalizer (Steele, Lea and Flood 2014) of key + (i + 1) * 0x9E3779B97F4A7C15.
 *   tp_ctr_uniform: the top 24 bits of draw i over 2^24: [0, 1), exact in float.
 *   tp_ctr_normal:  Irwin-Hall: twelve 16-bit uniforms (draws 3i .. 3i + 2, four each) summed as integers, centred,
 *                   over 65536: mean 0, variance 1 - 2^-32, support +-6, exact in float. Its density is within
 *                   0.006 of the standard normal's everywhere, its CDF within 0.003 (computed from the Irwin-Hall
 *                   density), enough for synthetic weights; and it needs no log or cos, whose last bits differ
 *                   between libm and the GPU. */
uint64_t tp_ctr_key(uint64_t seed, const char *name);
/* dst[j] = (float)(offset + scale * tp_ctr_normal(key, j)) for 0 <= j < n: a synthesized tensor, on all threads
 * (OpenMP) when n is large. The double arithmetic is one product and one sum, never fused (rng.c is compiled with
 * -ffp-contract=off), so every machine gets the same bits, the vector clone as the scalar one: on x86-64 the loop
 * has a clone for CPUs with AVX-512 (64-bit vector multiplies: about 4x the scalar loop's rate, where page faults
 * then take much of a first fill), picked at run time. */
void tp_ctr_fill_normal(float *dst, int64_t n, uint64_t key, double scale, double offset);
static inline uint64_t tp_ctr_u64(uint64_t key, uint64_t i) {
    uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float tp_ctr_uniform(uint64_t key, uint64_t i) {
    return (float)(tp_ctr_u64(key, i) >> 40) * 0x1.0p-24f;
}
static inline float tp_ctr_normal(uint64_t key, uint64_t i) {
    int32_t s = 0;
    for (uint64_t k = 0; k < 3; k++) {
        const uint64_t u = tp_ctr_u64(key, 3 * i + k);
        s += (int32_t)(u & 0xffff) + (int32_t)((u >> 16) & 0xffff) + (int32_t)((u >> 32) & 0xffff) +
             (int32_t)(u >> 48);
    }
    return (float)(s - 393210) * 0x1.0p-16f; /* sum of (u + 1/2) / 65536 over 12, minus 6 */
}

#endif

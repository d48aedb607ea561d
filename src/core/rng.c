#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tp_rng_seed(tp_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

void tp_rng_seed_named(tp_rng *r, uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    tp_rng_seed(r, seed ^ h);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tp_rng_u64(tp_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tp_rng_uniform(tp_rng *r) { return (double)(tp_rng_u64(r) >> 11) * 0x1.0p-53; }

double tp_rng_normal(tp_rng *r) {
    double u1 = tp_rng_uniform(r), u2 = tp_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double tp_rng_trunc_normal(tp_rng *r, double mean, double std, double a, double b) {
    for (;;) {
        double v = mean + std * tp_rng_normal(r);
        if (v >= a && v <= b) return v;
    }
}

uint64_t tp_ctr_key(uint64_t seed, const char *name) {
    tp_rng r;
    tp_rng_seed_named(&r, seed, name);
    return tp_rng_u64(&r);
}

/* GCC's function multiversioning: the AVX-512 clone where the CPU has it (x86-64-v4), else the baseline; the
 * arithmetic is integer up to an exact float, then unfused double (this file's -ffp-contract=off), so both give the
 * same bits (tests/test_core.c's determinism test holds them to a scalar reference) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define TP_FILL_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define TP_FILL_CLONES
#endif

TP_FILL_CLONES void tp_ctr_fill_normal(float *dst, int64_t n, uint64_t key, double scale, double offset) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t j = 0; j < n; j++) dst[j] = (float)(offset + scale * (double)tp_ctr_normal(key, (uint64_t)j));
}

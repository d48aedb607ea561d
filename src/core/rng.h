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

#endif

#include "exec/cpu/cpu_ops.h"
#include "ir/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tp_cpu_layernorm(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * C;
        double mean = 0, var = 0;
        for (int64_t c = 0; c < C; c++) mean += xr[c];
        mean /= (double)C;
        for (int64_t c = 0; c < C; c++) var += ((double)xr[c] - mean) * ((double)xr[c] - mean);
        var /= (double)C;
        double rstd = 1.0 / sqrt(var + (double)eps);
        for (int64_t c = 0; c < C; c++) y[m * C + c] = (float)(((double)xr[c] - mean) * rstd * w[c] + b[c]);
    }
}

/* Four output columns at a time share each load of x's row; accumulation in double. */
void tp_cpu_linear(const float *x, const float *W, const float *bias, float *y, int64_t M, int64_t N, int64_t K) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        int64_t n = 0;
        for (; n + 4 <= N; n += 4) {
            const float *w0 = W + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
            double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            for (int64_t k = 0; k < K; k++) {
                double xv = xr[k];
                a0 += xv * w0[k];
                a1 += xv * w1[k];
                a2 += xv * w2[k];
                a3 += xv * w3[k];
            }
            y[m * N + n] = (float)(a0 + (bias ? bias[n] : 0));
            y[m * N + n + 1] = (float)(a1 + (bias ? bias[n + 1] : 0));
            y[m * N + n + 2] = (float)(a2 + (bias ? bias[n + 2] : 0));
            y[m * N + n + 3] = (float)(a3 + (bias ? bias[n + 3] : 0));
        }
        for (; n < N; n++) {
            const float *wr = W + n * K;
            double a = 0;
            for (int64_t k = 0; k < K; k++) a += (double)xr[k] * wr[k];
            y[m * N + n] = (float)(a + (bias ? bias[n] : 0));
        }
    }
}

void tp_cpu_gelu(const float *x, float *y, int64_t n, int tanh_form) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = tanh_form ? (float)(0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))))
                         : (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)));
    }
}

void tp_cpu_add(const float *a, const float *b, float *y, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void tp_cpu_attention(const float *qkv, float *out, int64_t B, int64_t T, int64_t H, int64_t D, float scale) {
    const int64_t C = H * D, row = 3 * C;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double *s = malloc(sizeof(double) * (size_t)T);
            double *acc = malloc(sizeof(double) * (size_t)D);
            if (!s || !acc) abort();
            const float *base = qkv + b * T * row;
            for (int64_t i = 0; i < T; i++) {
                const float *q = base + i * row + 0 * C + h * D;
                double mx = -INFINITY;
                for (int64_t j = 0; j < T; j++) {
                    const float *k = base + j * row + 1 * C + h * D;
                    double d = 0;
                    for (int64_t e = 0; e < D; e++) d += (double)q[e] * k[e];
                    s[j] = d * scale;
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    s[j] = exp(s[j] - mx);
                    sum += s[j];
                }
                memset(acc, 0, sizeof(double) * (size_t)D);
                for (int64_t j = 0; j < T; j++) {
                    const float *v = base + j * row + 2 * C + h * D;
                    double p = s[j] / sum;
                    for (int64_t e = 0; e < D; e++) acc[e] += p * v[e];
                }
                float *o = out + (b * T + i) * C + h * D;
                for (int64_t e = 0; e < D; e++) o[e] = (float)acc[e];
            }
            free(s);
            free(acc);
        }
}

void tp_cpu_attention_ex(const tp_cpu_attn_args *a) {
    const int64_t B = a->B, H = a->H, Tq = a->Tq, Tkv = a->Tkv, D = a->D, G = a->H / a->Hkv;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double *s = malloc(sizeof(double) * (size_t)(Tkv > 0 ? Tkv : 1));
            double *acc = malloc(sizeof(double) * (size_t)D);
            if (!s || !acc) abort();
            const float *kb = a->k + b * a->k_bs + (h / G) * D, *vb = a->v + b * a->v_bs + (h / G) * D;
            for (int64_t t = 0; t < Tq; t++) {
                const float *q = a->q + b * a->q_bs + t * a->q_rs + h * D;
                /* keys j < n are visible: every key, or j <= t + Tkv - Tq (bottom-right causal) */
                int64_t n = a->causal ? t + Tkv - Tq + 1 : Tkv;
                if (n > Tkv) n = Tkv;
                if (n < 0) n = 0;
                double mx = -INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    const float *k = kb + j * a->k_rs;
                    double d = 0;
                    for (int64_t e = 0; e < D; e++)
                        d += (double)q[e] * k[e];
                    s[j] = d * a->scale;
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0;
                for (int64_t j = 0; j < n; j++) {
                    s[j] = exp(s[j] - mx);
                    sum += s[j];
                }
                memset(acc, 0, sizeof(double) * (size_t)D);
                for (int64_t j = 0; j < n; j++) {
                    const float *v = vb + j * a->v_rs;
                    const double p = s[j] / sum;
                    for (int64_t e = 0; e < D; e++)
                        acc[e] += p * v[e];
                }
                float *o = a->o + b * a->o_bs + t * a->o_rs + h * D; /* n = 0: the empty sum, zeros */
                for (int64_t e = 0; e < D; e++)
                    o[e] = (float)acc[e];
            }
            free(s);
            free(acc);
        }
}

void tp_cpu_im2col(const float *img, float *cols, int64_t B, int64_t H, int64_t W, int64_t P) {
    const int64_t gh = H / P, gw = W / P, Np = gh * gw, K = 3 * P * P;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < Np; p++) {
            int64_t py = p / gw, px = p % gw;
            float *dst = cols + (b * Np + p) * K;
            for (int64_t c = 0; c < 3; c++)
                for (int64_t ky = 0; ky < P; ky++)
                    for (int64_t kx = 0; kx < P; kx++)
                        dst[c * P * P + ky * P + kx] = img[((b * 3 + c) * H + py * P + ky) * W + px * P + kx];
        }
}

void tp_cpu_embed_tokens(const float *pe, const float *cls, const float *pos, float *x, int64_t B, int64_t Np,
                         int64_t C, int has_cls) {
    const int64_t T = Np + (has_cls ? 1 : 0);
    for (int64_t b = 0; b < B; b++) {
        if (has_cls)
            for (int64_t c = 0; c < C; c++) x[b * T * C + c] = cls[c] + pos[c];
        for (int64_t p = 0; p < Np; p++) {
            int64_t t = p + (has_cls ? 1 : 0);
            for (int64_t c = 0; c < C; c++) x[(b * T + t) * C + c] = pe[(b * Np + p) * C + c] + pos[t * C + c];
        }
    }
}

void tp_cpu_pool(const float *x, float *y, int64_t B, int64_t T, int64_t C, int mode, int64_t prefix) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            if (mode == 0 || mode == 2) {
                y[b * C + c] = x[(b * T + (mode == 2 ? T - 1 : 0)) * C + c];
            } else {
                double s = 0;
                for (int64_t t = prefix; t < T; t++) s += x[(b * T + t) * C + c];
                y[b * C + c] = (float)(s / (double)(T - prefix));
            }
        }
}

/* ---- decoder ops ------------------------------------------------------------------------------------------ */

void tp_cpu_token_embed(const int32_t *ids, const float *table, float *y, int64_t n, int64_t C, float scale) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < C; c++) y[i * C + c] = table[(int64_t)ids[i] * C + c] * scale;
}

void tp_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t M, int64_t C, float eps, float offset) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * C;
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        double r = 1.0 / sqrt(ss / (double)C + (double)eps);
        for (int64_t c = 0; c < C; c++) y[m * C + c] = (float)((double)xr[c] * r * ((double)offset + w[c]));
    }
}

void tp_cpu_rope(const float *x, float *y, int64_t B, int64_t T, int64_t H, int64_t D, const float *inv_freq,
                 int64_t pos0) {
    tp_cpu_rope_at(x, y, B, T, H, D, inv_freq, pos0, NULL);
}

void tp_cpu_rope_at(const float *x, float *y, int64_t B, int64_t T, int64_t H, int64_t D, const float *inv_freq,
                    int64_t pos0, const int64_t *start) {
    const int64_t h2 = D / 2;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float pos = (float)(pos0 + bt % T + (start ? start[bt / T] : 0));
        for (int64_t i = 0; i < h2; i++) {
            /* the angle as the reference forms it (fp32 product), its cosine and sine rounded to fp32 */
            const float ang = pos * inv_freq[i];
            const double c = (float)cos((double)ang), s = (float)sin((double)ang);
            for (int64_t h = 0; h < H; h++) {
                const float *xr = x + (bt * H + h) * D;
                float *yr = y + (bt * H + h) * D;
                const double a = xr[i], b = xr[i + h2];
                yr[i] = (float)(a * c - b * s);
                yr[i + h2] = (float)(b * c + a * s);
            }
        }
    }
}

void tp_cpu_glu(const float *gate, const float *up, float *y, int64_t n, int act) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const double g = gate[i];
        double a;
        if (act == 0) a = g / (1.0 + exp(-g));
        else a = 0.5 * g * (1.0 + tanh(0.79788456080286535588 * (g + 0.044715 * g * g * g)));
        y[i] = (float)(a * up[i]);
    }
}

void tp_cpu_kv_append(const float *k, const float *v, float *kv, int64_t B, int64_t T, int64_t L, int64_t W,
                      int64_t past) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            memcpy(kv + (b * L + past + t) * W, k + (b * T + t) * W, sizeof(float) * (size_t)W);
            memcpy(kv + ((B + b) * L + past + t) * W, v + (b * T + t) * W, sizeof(float) * (size_t)W);
        }
}

void tp_cpu_argmax(const float *x, int32_t *idx, int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        int64_t best = 0;
        for (int64_t n = 1; n < N; n++)
            if (x[m * N + n] > x[m * N + best]) best = n;
        idx[m] = (int32_t)best;
    }
}

/* ---- pipelines (issue 21) ---- */

void tp_cpu_concat_tokens(const float *a, const float *b, float *y, int64_t B, int64_t Ta, int64_t Tb, int64_t C) {
    for (int64_t i = 0; i < B; i++) {
        memcpy(y + i * (Ta + Tb) * C, a + i * Ta * C, sizeof(float) * (size_t)(Ta * C));
        memcpy(y + (i * (Ta + Tb) + Ta) * C, b + i * Tb * C, sizeof(float) * (size_t)(Tb * C));
    }
}

void tp_cpu_slice_tokens(const float *x, float *y, int64_t B, int64_t T, int64_t start, int64_t n, int64_t C) {
    for (int64_t i = 0; i < B; i++) memcpy(y + i * n * C, x + (i * T + start) * C, sizeof(float) * (size_t)(n * C));
}

void tp_cpu_silu(const float *x, float *y, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] / (1.0 + exp(-(double)x[i])));
}

void tp_cpu_time_concat(const float *x, float *y, int64_t B, int64_t T, int64_t C, int64_t D, double t) {
    float *e = malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));
    if (!e) abort();
    tp_time_embedding(t, D, e); /* openpi's, in float64 then cast to float32 */
    for (int64_t r = 0; r < B * T; r++) {
        memcpy(y + r * (C + D), x + r * C, sizeof(float) * (size_t)C);
        memcpy(y + r * (C + D) + C, e, sizeof(float) * (size_t)D);
    }
    free(e);
}

void tp_cpu_euler(const float *x, const float *v, float *y, int64_t n, float dt) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] + dt * v[i];
}

void tp_cpu_masked_attention(const tp_cpu_masked_attn *a) {
    const int64_t B = a->B, H = a->H, G = a->H / a->Hkv, D = a->D, W = a->Hkv * a->D, Tk = a->Tk, Tp = a->Tp;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double *s = malloc(sizeof(double) * (size_t)(Tp + Tk > 0 ? Tp + Tk : 1));
            double *acc = malloc(sizeof(double) * (size_t)D);
            if (!s || !acc) abort();
            /* the padded source: kp if given, else k; its keys at or beyond prefix + valid[b] masked */
            const int64_t nvalid = a->prefix + (int64_t)a->valid[b];
            for (int64_t t = 0; t < a->Tq; t++) {
                const float *q = a->q + ((b * a->Tq + t) * H + h) * D;
                double mx = -INFINITY;
                for (int64_t j = 0; j < Tp + Tk; j++) {
                    const int own = j >= Tp;
                    const int64_t jj = own ? j - Tp : j;
                    const int padded = a->kp ? !own : 1;
                    int vis = !(padded && jj >= nvalid);
                    if (own && a->first_block && t == 0 && jj > 0) vis = 0;
                    if (!vis) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const float *k = (own ? a->k + (b * Tk + jj) * W : a->kp + (b * Tp + jj) * W) + (h / G) * D;
                    double d = 0;
                    for (int64_t e = 0; e < D; e++) d += (double)q[e] * k[e];
                    s[j] = d * a->scale;
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0;
                for (int64_t j = 0; j < Tp + Tk; j++) {
                    s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                    sum += s[j];
                }
                memset(acc, 0, sizeof(double) * (size_t)D);
                for (int64_t j = 0; j < Tp + Tk && sum > 0; j++) {
                    if (s[j] == 0.0) continue;
                    const int own = j >= Tp;
                    const int64_t jj = own ? j - Tp : j;
                    const float *v = (own ? a->v + (b * Tk + jj) * W : a->vp + (b * Tp + jj) * W) + (h / G) * D;
                    const double p = s[j] / sum;
                    for (int64_t e = 0; e < D; e++) acc[e] += p * v[e];
                }
                float *o = a->o + ((b * a->Tq + t) * H + h) * D; /* nothing visible: zeros */
                for (int64_t e = 0; e < D; e++) o[e] = (float)acc[e];
            }
            free(s);
            free(acc);
        }
}

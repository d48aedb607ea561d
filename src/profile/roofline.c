#include "profile/roofline.h"

#include <math.h>

void tp_roofline_op(const tp_roofline_rates *r, tp_precision prec, double matmul_flop, double bytes,
                    tp_roofline_floor *f) {
    const double peak = (unsigned)prec < TP_PREC_COUNT ? r->peak_tflops[prec] : 0.0;
    double c = 0, m = 0;
    f->known = 1;
    if (matmul_flop > 0) {
        if (peak > 0) c = matmul_flop / (peak * 1e12) * 1e9;
        else f->known = 0;
    }
    if (bytes > 0) {
        if (r->copy_gbps > 0) m = bytes / (r->copy_gbps * 1e9) * 1e9;
        else f->known = 0;
    }
    f->ns = c > m ? c : m;
    f->compute_ns = c > m ? c : 0;
    f->memory_ns = c > m ? 0 : m;
}

void tp_roofline_add(tp_roofline_floor *acc, const tp_roofline_floor *f) {
    acc->ns += f->ns;
    acc->compute_ns += f->compute_ns;
    acc->memory_ns += f->memory_ns;
    acc->known = acc->known && f->known;
}

json_t *tp_roofline_peaks_json(const tp_roofline_rates *r) {
    json_t *o = json_object();
    for (int p = 0; o && p < TP_PREC_COUNT; p++)
        if (r->peak_tflops[p] > 0 && isfinite(r->peak_tflops[p]))
            json_object_set_new(o, tp_precision_name((tp_precision)p), json_real(r->peak_tflops[p]));
    return o;
}

/* compare_svg.c: the two charts of the compare report, written by hand as SVG 1.1 (no library): they are a
 * few dozen rectangles and labels, and must be embeddable verbatim in the HTML page, so they carry no XML
 * declaration, no external references and no script. All text goes through svg_text, which escapes the five
 * XML special characters (kernel and layer names contain <, > and &).
 *
 * Geometry is in user units (pixels at 100 %); labels assume about 7 px per character at 12 px, which only
 * decides whether a label fits inside its bar segment. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/compare.h"

#define FONT "font-family=\"Helvetica, Arial, sans-serif\""
#define CHAR_W 7.0

/* Fixed colors per category (Tableau 10), so a category looks the same in every report; the second color is
 * the label color that stays readable on it. */
static const char *CAT_FILL[TP_CAT_COUNT] = {
    [TP_CAT_GEMM] = "#4e79a7",       [TP_CAT_ATTENTION] = "#f28e2b",   [TP_CAT_NORM] = "#76b7b2",
    [TP_CAT_ACTIVATION] = "#e15759", [TP_CAT_ELEMENTWISE] = "#59a14f", [TP_CAT_QUANT] = "#edc948",
    [TP_CAT_CONVERT] = "#b07aa1",    [TP_CAT_MEMORY] = "#ff9da7",      [TP_CAT_OTHER] = "#9c755f",
    [TP_CAT_COMM] = "#bab0ac",
};
static const char *CAT_INK[TP_CAT_COUNT] = {
    [TP_CAT_GEMM] = "#fff",       [TP_CAT_ATTENTION] = "#222",   [TP_CAT_NORM] = "#222",
    [TP_CAT_ACTIVATION] = "#fff", [TP_CAT_ELEMENTWISE] = "#fff", [TP_CAT_QUANT] = "#222",
    [TP_CAT_CONVERT] = "#fff",    [TP_CAT_MEMORY] = "#222",      [TP_CAT_OTHER] = "#fff",
    [TP_CAT_COMM] = "#222",
};

const char *tp_compare_category_color(tp_category c) { return (unsigned)c < TP_CAT_COUNT ? CAT_FILL[c] : "#999"; }

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* A tick step of 1, 2 or 5 times a power of ten giving 4 to 8 ticks, so the axis ends close above max. */
static double nice_step(double max) {
    if (!(max > 0)) return 1;
    double raw = max / 8, mag = pow(10, floor(log10(raw)));
    static const double M[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (M[i] * mag >= raw) return M[i] * mag;
    return 10 * mag;
}

static void svg_open(FILE *f, double w, double h, const char *title) {
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" role=\"img\" " FONT " font-size=\"12\">\n<title>",
            w, h, w, h);
    svg_text(f, title);
    fputs("</title>\n<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n", f);
    fprintf(f, "<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">");
    svg_text(f, title);
    fputs("</text>\n", f);
}

/* Vertical grid lines with value labels under y_bottom; returns the axis maximum. */
static double svg_axis(FILE *f, double x0, double width, double y_top, double y_bottom, double max, const char *unit) {
    double step = nice_step(max), axis = step * ceil(max / step - 1e-9);
    if (axis <= 0) axis = step;
    for (int i = 0; i * step <= axis + step * 1e-9; i++) {
        double x = x0 + width * (i * step) / axis;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, y_top, x, y_bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%g%s</text>\n", x, y_bottom + 15,
                i * step, i == 0 ? "" : unit);
    }
    return axis;
}

int tp_compare_svg_breakdown(FILE *f, const tp_compare_entry *entries, int n) {
    const double W = 960, L = 110, R = 96, PW = W - L - R, BAR = 30, GAP = 16, Y0 = 50;
    double max = 0;
    int present[TP_CAT_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        double t = entries[i].prof->kernel_ns_per_iter * 1e-6;
        if (t > max) max = t;
        for (int c = 0; c < TP_CAT_COUNT; c++) present[c] |= entries[i].prof->cat_ns[c] > 0;
    }
    /* Legend: one row of swatches, wrapped at the chart's width. */
    int rows = 1;
    double lx = L;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        if (!present[c]) continue;
        double w = 22 + CHAR_W * (double)strlen(tp_category_name((tp_category)c)) + 18;
        if (lx + w > W - 12) rows++, lx = L;
        lx += w;
    }
    double y_axis = Y0 + n * (BAR + GAP) - GAP + 8, y_leg = y_axis + 44, H = y_leg + rows * 22 + 10;
    svg_open(f, W, H, "GPU kernel time per forward pass, by category (ms)");
    double axis = svg_axis(f, L, PW, Y0 - 8, y_axis, max, " ms");
    for (int i = 0; i < n; i++) {
        const tp_profile_summary *s = entries[i].prof;
        double y = Y0 + i * (BAR + GAP), x = L;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-weight=\"bold\">", L - 10, y + BAR / 2 + 4);
        svg_text(f, tp_precision_name(entries[i].prec));
        fputs("</text>\n", f);
        for (int c = 0; c < TP_CAT_COUNT; c++) {
            if (!s->cat_ns[c]) continue;
            double ms = s->cat_ns_per_iter[c] * 1e-6, w = PW * ms / axis;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"><title>", x, y, w, BAR,
                    CAT_FILL[c]);
            char tip[160];
            snprintf(tip, sizeof tip, "%s, %s: %.3f ms per pass (%.1f %%)", tp_precision_name(entries[i].prec),
                     tp_category_name((tp_category)c), ms, s->cat_pct[c]);
            svg_text(f, tip);
            fputs("</title></rect>\n", f);
            char lab[32];
            snprintf(lab, sizeof lab, "%.2f", ms);
            if (w >= CHAR_W * (double)strlen(lab) + 8)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>\n", x + w / 2,
                        y + BAR / 2 + 4, CAT_INK[c], lab);
            x += w;
        }
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\">%.2f ms</text>\n", x + 6, y + BAR / 2 + 4,
                s->kernel_ns_per_iter * 1e-6);
    }
    lx = L;
    double ly = y_leg;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        if (!present[c]) continue;
        const char *name = tp_category_name((tp_category)c);
        double w = 22 + CHAR_W * (double)strlen(name) + 18;
        if (lx + w > W - 12) ly += 22, lx = L;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", lx, ly - 11, CAT_FILL[c]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", lx + 20, ly);
        svg_text(f, name);
        fputs("</text>\n", f);
        lx += w;
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int tp_compare_svg_speedup(FILE *f, const tp_compare_entry *entries, const tp_amdahl *am, int n, int baseline) {
    const double W = 960, L = 170, R = 250, PW = W - L - R, BAR = 22, GAP = 4, GROUP = 18, Y0 = 50;
    const tp_compare_entry *b = &entries[baseline];
    int k = 0;
    double max = 1;
    for (int i = 0; i < n; i++) {
        if (i == baseline) continue;
        k++;
        double m = b->median_ms > 0 && entries[i].median_ms > 0 ? b->median_ms / entries[i].median_ms : 0;
        if (m > max) max = m;
        if (am[i].r > 0 && am[i].bound > max) max = am[i].bound;
    }
    char title[128];
    snprintf(title, sizeof title, "Speedup against %s: measured vs. Amdahl bound", tp_precision_name(b->prec));
    double y_axis = Y0 + (k ? k * (2 * BAR + GAP + GROUP) - GROUP : 30) + 8, H = y_axis + 62;
    svg_open(f, W, H, title);
    if (k == 0) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">No precision besides the baseline.</text>\n</svg>\n", L,
                Y0 + 16);
        return ferror(f) ? -1 : 0;
    }
    double axis = svg_axis(f, L, PW, Y0 - 8, y_axis, max * 1.05, "×");
    double y = Y0;
    for (int i = 0; i < n; i++) {
        if (i == baseline) continue;
        const tp_compare_entry *e = &entries[i];
        const char *p = tp_precision_name(e->prec);
        double m = b->median_ms > 0 && e->median_ms > 0 ? b->median_ms / e->median_ms : 0;
        for (int row = 0; row < 2; row++, y += BAR + GAP) {
            int bound = row == 1;
            double v = bound ? (am[i].r > 0 ? am[i].bound : 0) : m;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", L - 10, y + BAR / 2 + 4);
            svg_text(f, p);
            fputs(bound ? " Amdahl bound</text>\n" : " measured</text>\n", f);
            char lab[160];
            if (v > 0) {
                double w = PW * v / axis;
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"/>\n", L, y, w, BAR,
                        bound ? "#f28e2b" : "#4e79a7");
                if (bound)
                    snprintf(lab, sizeof lab, "%.3f× (f = %.1f %%, r = %.2f)", v, 100 * am[i].f, am[i].r);
                else
                    snprintf(lab, sizeof lab, "%.3f× (%.3f → %.3f ms)", v, b->median_ms, e->median_ms);
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", L + w + 6, y + BAR / 2 + 4);
            } else {
                snprintf(lab, sizeof lab, bound ? "n/a: peak GEMM rate not measured" : "n/a: no latency");
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">", L + 6, y + BAR / 2 + 4);
            }
            svg_text(f, lab);
            fputs("</text>\n", f);
        }
        y += GROUP - GAP;
    }
    double x1 = L + PW / axis;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" stroke-dasharray=\"4 3\"/>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">",
            x1, Y0 - 12, x1, y_axis, x1, Y0 - 14);
    svg_text(f, tp_precision_name(b->prec));
    fputs(" = 1</text>\n", f);
    double ly = y_axis + 40;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#4e79a7\"/>\n", L, ly - 11);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">measured: event-timed median latency ratio</text>\n", L + 20, ly);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#f28e2b\"/>\n", L + 330, ly - 11);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">Amdahl bound: changed ops sped up by the peak-rate ratio r</text>\n",
            L + 350, ly);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int tp_svg_percent_lines(FILE *f, const char *title, const char *xlabel, int n_x, const char *const *xticks,
                         int n_series, const char *const *names, const double *y) {
    static const char *const INK[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#9c755f",
                                      "#76b7b2", "#edc948"};
    const double W = 720, L = 60, R = 150, T0 = 44, H = 280, PW = W - L - R;
    svg_open(f, W, T0 + H + 56, title);
    for (int k = 0; k <= 100; k += 20) { /* horizontal grid, percent */
        const double yy = T0 + H * (1 - k / 100.0);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, yy, L + PW, yy);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%d%%</text>\n", L - 6, yy + 4, k);
    }
    for (int x = 0; x < n_x; x++) {
        const double xx = L + PW * (n_x > 1 ? (double)x / (n_x - 1) : 0.5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">", xx, T0 + H + 16);
        svg_text(f, xticks[x]);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", L + PW / 2, T0 + H + 40);
    svg_text(f, xlabel);
    fputs("</text>\n", f);
    for (int s = 0; s < n_series; s++) {
        const char *ink = INK[s % 8];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", ink);
        for (int x = 0; x < n_x; x++) {
            const double v = y[(size_t)s * n_x + x];
            if (!isfinite(v)) continue;
            const double c = v < 0 ? 0 : v > 100 ? 100 : v;
            fprintf(f, "%.1f,%.1f ", L + PW * (n_x > 1 ? (double)x / (n_x - 1) : 0.5), T0 + H * (1 - c / 100));
        }
        fputs("\"/>\n", f);
        for (int x = 0; x < n_x; x++) {
            const double v = y[(size_t)s * n_x + x];
            if (!isfinite(v)) continue;
            const double c = v < 0 ? 0 : v > 100 ? 100 : v;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%.1f%%</title></circle>\n",
                    L + PW * (n_x > 1 ? (double)x / (n_x - 1) : 0.5), T0 + H * (1 - c / 100), ink, v);
        }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", L + PW + 16,
                T0 + 18.0 * s, ink);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", L + PW + 34, T0 + 18.0 * s + 10);
        svg_text(f, names[s]);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

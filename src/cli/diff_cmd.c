/* diff_cmd.c: `tprof diff A.json B.json [C.json ...]` (issue 44; report/diff.h does the work): the command line,
 * its inputs and outputs, and the regression gate's exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/diff_cmd.h"
#include "core/files.h"
#include "report/diff.h"

#define MAX_RUNS 26 /* labelled A to Z */

static int usage_error(const char *fmt, const char *a) {
    fputs("tprof: diff: ", stderr);
    fprintf(stderr, fmt, a);
    fputs(" (tprof diff --help)\n", stderr);
    return 2;
}

/* Writes the diff in fmt to path through a temporary file renamed into place (the old file stays on failure). */
static tp_status write_to(const tp_diff *d, tp_diff_format fmt, const char *path, const char *what, tp_error *err) {
    tp_outfile o = {0};
    tp_status st = tp_outfile_open(&o, path, what, err);
    if (!st) st = tp_diff_write(d, fmt, o.f, err);
    if (!st) return tp_outfile_commit(&o, err);
    tp_outfile_abort(&o);
    return st;
}

int tp_cli_diff(int argc, char **argv, int (*exit_code)(tp_status)) {
    const char *files[MAX_RUNS], *out = NULL, *html = NULL;
    int n = 0, top = 10;
    double fail_above = -1;
    tp_diff_format fmt = TP_DIFF_MD;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const int has_val = i + 1 < argc;
        if (strcmp(a, "--format") == 0) {
            if (!has_val) return usage_error("%s needs a value (md, csv or json)", a);
            const char *v = argv[++i];
            if (strcmp(v, "md") == 0) fmt = TP_DIFF_MD;
            else if (strcmp(v, "csv") == 0) fmt = TP_DIFF_CSV;
            else if (strcmp(v, "json") == 0) fmt = TP_DIFF_JSON;
            else return usage_error("--format '%s': expected md, csv or json", v);
        } else if (strcmp(a, "--out") == 0 || strcmp(a, "--html") == 0) {
            if (!has_val) return usage_error("%s needs a file", a);
            *(strcmp(a, "--out") == 0 ? &out : &html) = argv[++i];
        } else if (strcmp(a, "--top") == 0 || strcmp(a, "--fail-above") == 0) {
            if (!has_val) return usage_error("%s needs a number", a);
            char *end = NULL;
            const double v = strtod(argv[++i], &end);
            if (end == argv[i] || *end || !(v >= 0) || v > 1e6)
                return usage_error(strcmp(a, "--top") == 0 ? "--top '%s': expected a count from 1"
                                                           : "--fail-above '%s': expected a percentage >= 0",
                                   argv[i]);
            if (strcmp(a, "--top") == 0) {
                if (v < 1 || v != (int)v) return usage_error("--top '%s': expected a count from 1", argv[i]);
                top = (int)v;
            } else {
                fail_above = v;
            }
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else {
            if (n == MAX_RUNS) return usage_error("at most 26 runs (%s is one more)", a);
            files[n++] = a;
        }
    }
    if (n < 2) return usage_error("%s", "two JSON files or more: the baseline first, then the runs to compare");
    tp_error err = {0};
    for (int i = 0; i < n; i++) /* a FIFO or folder is refused before anything reads it */
        if (tp_input_check(files[i], "the run's JSON", TP_WANT_FILE, NULL, &err)) {
            fprintf(stderr, "tprof: diff: %s\n", err.msg);
            return exit_code(TP_ERR_IO);
        }
    const char *outs[2] = {out, html};
    for (int k = 0; k < 2; k++) {
        if (!outs[k]) continue;
        for (int i = 0; i < n; i++)
            if (tp_same_file(outs[k], files[i])) {
                fprintf(stderr, "tprof: diff: %s %s is also an input; it would be overwritten\n",
                        k ? "--html" : "--out", outs[k]);
                return 2;
            }
        if (tp_output_check(outs[k], k ? "--html" : "--out", NULL, &err)) {
            fprintf(stderr, "tprof: diff: %s\n", err.msg);
            return 2;
        }
    }
    tp_diff_run *runs = calloc((size_t)n, sizeof *runs);
    if (!runs) return exit_code(TP_ERR_OOM);
    tp_diff d = {0};
    tp_status st = TP_OK;
    int loaded = 0;
    for (; loaded < n && !st; loaded++) st = tp_diff_load(files[loaded], &runs[loaded], &err);
    if (!st) st = tp_diff_compute(runs, n, top, &d, &err);
    if (!st) st = out ? write_to(&d, fmt, out, "--out", &err) : tp_diff_write(&d, fmt, stdout, &err);
    if (!st && html) st = write_to(&d, TP_DIFF_HTML, html, "--html", &err);
    int rc = st ? exit_code(st) : 0;
    if (st) {
        fprintf(stderr, "tprof: diff: %s\n", err.msg);
    } else {
        if (out) fprintf(stderr, "tprof diff: %s written\n", out);
        if (html) fprintf(stderr, "tprof diff: %s written\n", html);
        if (fail_above >= 0) {
            const int r = tp_diff_regressions(&d, fail_above);
            if (r) {
                fprintf(stderr, "tprof diff: regression gate: %d result%s slower than A by more than %g %% beyond "
                                "the noise:\n", r, r > 1 ? "s" : "", fail_above);
                for (int i = 0; i < d.n_m; i++) {
                    const tp_diff_match *m = &d.m[i];
                    const tp_diff_result *b = &runs[m->run].res[m->ib];
                    if (strcmp(m->verdict, "slower") == 0 && m->ci_lo > 1.0 + fail_above / 100.0)
                        fprintf(stderr, "  %s %s batch %d %s: %.4f -> %.4f ms (x%.4f, interval %.4f-%.4f, p %.2g)\n",
                                b->model, b->precision, b->batch, b->test, runs[0].res[m->ia].median_ms, b->median_ms,
                                m->ratio, m->ci_lo, m->ci_hi, m->p);
                }
                rc = 1;
            } else {
                fprintf(stderr, "tprof diff: regression gate: no result slower than A by more than %g %% beyond the "
                                "noise\n", fail_above);
            }
        }
    }
    tp_diff_free(&d);
    for (int i = 0; i < loaded; i++) tp_diff_run_free(&runs[i]);
    free(runs);
    return rc;
}

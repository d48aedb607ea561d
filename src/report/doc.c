/* doc.c: the Markdown / HTML document writer (doc.h). */
#include "report/doc.h"

#include <stdarg.h>
#include <string.h>

void tp_doc_put(tp_doc *d, const char *s) {
    for (; *s; s++) {
        const char *x = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : NULL;
        if (!x && d->html && *s == '"') x = "&quot;";
        if (!x && !d->html && *s == '|') x = "\\|"; /* also outside tables: renders as | there */
        if (x)
            fputs(x, d->f);
        else
            fputc(*s, d->f);
    }
}

static void vput(tp_doc *d, const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    tp_doc_put(d, buf);
}

void tp_doc_txt(tp_doc *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vput(d, fmt, ap);
    va_end(ap);
}

void tp_doc_code(tp_doc *d, const char *s) {
    if (d->html) {
        fputs("<code>", d->f);
        tp_doc_put(d, s);
        fputs("</code>", d->f);
        return;
    }
    int ticks = strchr(s, '`') != NULL; /* a name with a backtick needs a double-backtick span */
    fputs(ticks ? "`` " : "`", d->f);
    for (; *s; s++)
        if (*s == '|')
            fputs("\\|", d->f);
        else
            fputc(*s, d->f);
    fputs(ticks ? " ``" : "`", d->f);
}

void tp_doc_heading(tp_doc *d, int level, const char *id, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (level < 1) level = 1;
    if (level > 6) level = 6;
    if (d->html) {
        fprintf(d->f, "<h%d id=\"", level);
        tp_doc_put(d, id);
        fputs("\">", d->f);
    } else {
        fprintf(d->f, "%.*s ", level, "######");
    }
    vput(d, fmt, ap);
    if (d->html)
        fprintf(d->f, "</h%d>\n", level);
    else
        fputs("\n\n", d->f);
    va_end(ap);
}

void tp_doc_para_open(tp_doc *d) { fputs(d->html ? "<p>" : "", d->f); }
void tp_doc_para_close(tp_doc *d) { fputs(d->html ? "</p>\n" : "\n\n", d->f); }

void tp_doc_para(tp_doc *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tp_doc_para_open(d);
    vput(d, fmt, ap);
    tp_doc_para_close(d);
    va_end(ap);
}

void tp_doc_list_open(tp_doc *d) { fputs(d->html ? "<ul>\n" : "", d->f); }
void tp_doc_list_close(tp_doc *d) { fputs(d->html ? "</ul>\n" : "\n", d->f); }
void tp_doc_li_open(tp_doc *d) { fputs(d->html ? "<li>" : "- ", d->f); }
void tp_doc_li_close(tp_doc *d) { fputs(d->html ? "</li>\n" : "\n", d->f); }

void tp_doc_table_openv(tp_doc *d, const char *align, const char *const *headers) {
    d->align = align;
    fputs(d->html ? "<table><thead><tr>" : "|", d->f);
    for (; *headers; headers++) {
        fputs(d->html ? "<th>" : " ", d->f);
        tp_doc_put(d, *headers);
        fputs(d->html ? "</th>" : " |", d->f);
    }
    if (d->html) {
        fputs("</tr></thead><tbody>\n", d->f);
        return;
    }
    fputs("\n|", d->f);
    for (const char *a = align; *a; a++) fputs(*a == 'r' ? " ---: |" : " :--- |", d->f);
    fputs("\n", d->f);
}

void tp_doc_table_open(tp_doc *d, const char *align, ...) {
    const char *h[64];
    int n = 0;
    va_list ap;
    va_start(ap, align);
    for (const char *x; (x = va_arg(ap, const char *)) && n < 63;) h[n++] = x;
    va_end(ap);
    h[n] = NULL;
    tp_doc_table_openv(d, align, h);
}

void tp_doc_table_close(tp_doc *d) {
    d->align = NULL;
    fputs(d->html ? "</tbody></table>\n" : "\n", d->f);
}

void tp_doc_tr_open(tp_doc *d) {
    d->col = 0;
    fputs(d->html ? "<tr>" : "|", d->f);
}

void tp_doc_tr_close(tp_doc *d) { fputs(d->html ? "</tr>\n" : "\n", d->f); }

void tp_doc_td_open(tp_doc *d) {
    int right = d->align && d->col < (int)strlen(d->align) && d->align[d->col] == 'r';
    fputs(d->html ? (right ? "<td class=\"r\">" : "<td>") : " ", d->f);
}

void tp_doc_td_close(tp_doc *d) {
    d->col++;
    fputs(d->html ? "</td>" : " |", d->f);
}

void tp_doc_td(tp_doc *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tp_doc_td_open(d);
    vput(d, fmt, ap);
    tp_doc_td_close(d);
    va_end(ap);
}

void tp_doc_td_code(tp_doc *d, const char *s) {
    tp_doc_td_open(d);
    tp_doc_code(d, s);
    tp_doc_td_close(d);
}

void tp_doc_td_ratio(tp_doc *d, double num, double den) {
    if (num > 0 && den > 0)
        tp_doc_td(d, "%.3f×", num / den);
    else
        tp_doc_td(d, "n/a");
}

const char *tp_doc_css(void) {
    return "body{font-family:Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222;line-height:1.4}"
           "table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px;"
           "vertical-align:top}th{background:#f0f0f0}td.r{text-align:right;font-variant-numeric:tabular-nums}"
           "code{font-size:0.85em;background:#f6f6f6;padding:0 2px}figure{margin:1em 0}svg{max-width:100%;height:auto}"
           "h2{border-bottom:1px solid #ddd;padding-bottom:0.2em;margin-top:1.6em}";
}

/* doc.h: a minimal document writer that emits the same content as GitHub-flavoured Markdown or as HTML, so a
 * report written once through it reads the same in both (report.md and report.html of `tprof compare`).
 *
 * Escaping: text is always escaped for its target (HTML: & < > "; Markdown: & < > as entities and | as \|, so
 * it cannot open a tag or break a table). Code spans (kernel and layer names) are literal in Markdown (only |
 * is escaped, as GFM tables require) and escaped inside <code> in HTML. Formatted text is cut at 2047 bytes.
 * Write errors are not reported per call: the caller checks ferror on the stream at the end. */
#ifndef TP_DOC_H
#define TP_DOC_H

#include <stdio.h>

#if defined(__GNUC__)
#define TP_PRINTF_LIKE(a, b) __attribute__((format(printf, a, b)))
#else
#define TP_PRINTF_LIKE(a, b)
/* The style sheet of tprof's HTML reports (compare, diff): one look for both. */
const char *tp_doc_css(void);

#endif

typedef struct {
    FILE *f;
    int html;          /* 0: Markdown, 1: HTML */
    const char *align; /* the open table's column alignments, one 'l' or 'r' each */
    int col;           /* the current cell's column */
} tp_doc;

void tp_doc_put(tp_doc *d, const char *s); /* escaped text */
void tp_doc_txt(tp_doc *d, const char *fmt, ...) TP_PRINTF_LIKE(2, 3);
void tp_doc_code(tp_doc *d, const char *s);
/* A heading of level 1..6; id is the HTML anchor (unique in the page). */
void tp_doc_heading(tp_doc *d, int level, const char *id, const char *fmt, ...) TP_PRINTF_LIKE(4, 5);
void tp_doc_para(tp_doc *d, const char *fmt, ...) TP_PRINTF_LIKE(2, 3);
void tp_doc_para_open(tp_doc *d); /* a paragraph built from several calls */
void tp_doc_para_close(tp_doc *d);
void tp_doc_list_open(tp_doc *d); /* bullet list */
void tp_doc_list_close(tp_doc *d);
void tp_doc_li_open(tp_doc *d);
void tp_doc_li_close(tp_doc *d);
/* Opens a table: align has one 'l' or 'r' per column; headers is NULL-terminated (the _v form: an array). */
void tp_doc_table_open(tp_doc *d, const char *align, ...);
void tp_doc_table_openv(tp_doc *d, const char *align, const char *const *headers);
void tp_doc_table_close(tp_doc *d);
void tp_doc_tr_open(tp_doc *d);
void tp_doc_tr_close(tp_doc *d);
void tp_doc_td_open(tp_doc *d); /* a cell built from several calls */
void tp_doc_td_close(tp_doc *d);
void tp_doc_td(tp_doc *d, const char *fmt, ...) TP_PRINTF_LIKE(2, 3);
void tp_doc_td_code(tp_doc *d, const char *s);
/* A ratio cell "1.234×", or "n/a" when num or den is not > 0 (unknown). */
void tp_doc_td_ratio(tp_doc *d, double num, double den);

/* The style sheet of tprof's HTML reports (compare, diff): one look for both. */
const char *tp_doc_css(void);

#endif

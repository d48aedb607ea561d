/* tokens.h: token-id files: whitespace-separated non-negative decimal integers (what a tokenizer's ids print as,
 * e.g. `python -c "print(*tok.encode(text))" > prompt.txt`). */
#ifndef TP_TOKENS_H
#define TP_TOKENS_H

#include "tprof.h"

/* Reads at most max ids from path into ids (max entries, as fp32 integers: exact below 2^24), each checked against
 * a vocabulary of V; *n receives how many were read (fewer than max at the end of the file). Errors, one line
 * naming the file, the token's position (1-based) and its text: TP_ERR_IO (cannot open), TP_ERR_FORMAT (a word
 * that is not a decimal integer, such as 1.5, 1,2,3 or 0x10; an id outside [0, V)). */
tp_status tp_tokens_read(const char *path, int V, int max, float *ids, int *n, tp_error *err);

#endif

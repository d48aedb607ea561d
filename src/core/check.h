/* check.h: the first error tier. CHECK aborts on a broken internal invariant (never on bad user input,
 * which goes through tp_status/tp_error). Each prints the failing expression and file:line to stderr. */
#ifndef TP_CHECK_H
#define TP_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "tprof: internal check failed: %s at %s:%d\n", #cond, __FILE__, \
                    __LINE__);                                                               \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* Allocation failure on the host: out of memory is reported, not crashed on, where a status can be
 * returned; this macro is for the few places where it cannot. */
#define CHECK_ALLOC(p)                                                                          \
    do {                                                                                        \
        if ((p) == NULL) {                                                                      \
            fprintf(stderr, "tprof: out of host memory: %s at %s:%d\n", #p, __FILE__, __LINE__); \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#endif

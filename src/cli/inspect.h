/* inspect.h: `tprof inspect FILE.onnx` (inspect.c). */
#ifndef TP_CLI_INSPECT_H
#define TP_CLI_INSPECT_H

#include "tprof.h"

/* argv: the command's arguments (the file); exit_code maps a failure's class to the exit status (main.c). Prints
 * the summary on stdout and returns 0, or one line on stderr and the class's status. */
int tp_cli_inspect(int argc, char **argv, int (*exit_code)(tp_status));

#endif

/* diff_cmd.h: `tprof diff` (diff_cmd.c). */
#ifndef TP_CLI_DIFF_CMD_H
#define TP_CLI_DIFF_CMD_H

#include "tprof.h"

/* argv: the command's arguments (the files and options); exit_code maps a failure's class to the exit status
 * (main.c). Prints the comparison (stdout or --out) and returns 0; 1 when --fail-above finds a regression; a usage
 * error 2; an unreadable or malformed file the class's status, with one line on stderr. */
int tp_cli_diff(int argc, char **argv, int (*exit_code)(tp_status));

#endif

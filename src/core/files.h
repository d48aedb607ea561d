/* files.h: opening the files tprof reads without blocking on them, and writing the files it makes without
 * destroying what they replace.
 *
 * Inputs: a path is checked with stat() before anything opens it, so a FIFO, socket or device given where a file
 * is expected is refused instead of blocking forever on open(); a folder where a file is expected (or the
 * reverse) is named as such. The open itself is O_NONBLOCK and the type checked again on the descriptor, so a
 * path swapped for a FIFO between the two cannot block either.
 *
 * Outputs: every file is written to a temporary file in its target's folder and renamed over the target only when
 * complete (rename(2) is atomic within a folder), so an interrupted or failed write leaves the old file as it was
 * and removes only the temporary file it made. A target that exists and is not a regular file (a device, FIFO,
 * socket, folder) is refused; a symbolic link is followed and its target written, so the link stays a link. */
#ifndef TP_FILES_H
#define TP_FILES_H
#include <stdio.h>
#include <sys/types.h>

#include "tprof.h"

/* What a path given as an input must be. */
typedef enum { TP_WANT_FILE = 1, TP_WANT_DIR = 2, TP_WANT_FILE_OR_DIR = 3 } tp_path_want;

/* Names a file type for messages: "a FIFO", "a character device", "a folder", ... (st_mode from stat). */
const char *tp_file_type_name(unsigned mode);

/* Checks that path exists (links followed) and is what want allows; *is_dir (may be NULL) receives whether it is a
 * folder. what names the input in messages ("--tokens", "the ONNX file"). Errors, TP_ERR_IO, one line:
 * "PATH: cannot open WHAT: No such file or directory", "PATH: WHAT is a folder; expected a file",
 * "PATH: WHAT is a FIFO; expected a regular file". */
tp_status tp_input_check(const char *path, const char *what, tp_path_want want, int *is_dir, tp_error *err);

/* Opens a regular file for reading ("rb") after tp_input_check(path, what, TP_WANT_FILE): never blocks on a FIFO
 * or device. Returns NULL with err set (TP_ERR_IO) on any failure. */
FILE *tp_input_open(const char *path, const char *what, tp_error *err);

/* Checks an output path before any work: a target that exists must be a regular file (or a link to one, or to
 * nothing yet), its folder must exist and be writable. *link_target (may be NULL) receives the resolved target
 * of a symbolic link (caller frees; NULL when path is not a link). Errors TP_ERR_IO (the command line reports
 * them as usage errors, before any work):
 * "PATH: WHAT is a character device; tprof writes only regular files", "PATH: cannot write WHAT: folder 'D' does
 * not exist". */
tp_status tp_output_check(const char *path, const char *what, char **link_target, tp_error *err);

/* An output being written: f writes to tmp, which commit renames onto target. */
typedef struct {
    FILE *f;
    char *target; /* the file that will hold the output: path, or a symbolic link's target */
    char *tmp;    /* "<dir>/.<name>.tmp.<pid>.<n>" in target's folder */
} tp_outfile;

/* Starts writing the output at path (after tp_output_check's rules, checked again here): creates the temporary
 * file exclusively, with the mode of the file it will replace (0666 less the umask for a new file). what names
 * the output in messages ("--json", "the engine file"). */
tp_status tp_outfile_open(tp_outfile *o, const char *path, const char *what, tp_error *err);

/* Flushes, syncs and closes the temporary file and renames it onto the target; on any failure (a full disk shows
 * at the flush) removes the temporary file, leaves the target untouched, and fails with TP_ERR_IO naming it. */
tp_status tp_outfile_commit(tp_outfile *o, tp_error *err);

/* Abandons an output: closes and removes the temporary file, nothing else. Safe on a zeroed or committed o. */
void tp_outfile_abort(tp_outfile *o);

/* Whether a and b name the same existing file (device and inode, links followed): an output that is also an
 * input. 0 when either does not exist. */
int tp_same_file(const char *a, const char *b);

#endif

/* files.c: inputs opened without blocking, outputs written through a temporary file and a rename (files.h). */
#define _GNU_SOURCE
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tp_file_type_name(unsigned mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

tp_status tp_input_check(const char *path, const char *what, tp_path_want want, int *is_dir, tp_error *err) {
    struct stat sb;
    if (!path || !*path) return tp_fail(err, TP_ERR_IO, "%s: an empty path", what);
    if (stat(path, &sb) != 0) return tp_fail_path(err, TP_ERR_IO, path, "cannot open %s: %s", what, strerror(errno));
    const int dir = S_ISDIR(sb.st_mode);
    if (is_dir) *is_dir = dir;
    if (dir && !(want & TP_WANT_DIR))
        return tp_fail_path(err, TP_ERR_IO, path, "%s is a folder; expected a file", what);
    if (S_ISREG(sb.st_mode) && !(want & TP_WANT_FILE))
        return tp_fail_path(err, TP_ERR_IO, path, "%s is a file; expected a folder", what);
    if (!dir && !S_ISREG(sb.st_mode)) /* opening a FIFO for reading would wait for a writer: refused unopened */
        return tp_fail_path(err, TP_ERR_IO, path, "%s is %s; expected a regular file", what,
                            tp_file_type_name(sb.st_mode));
    return TP_OK;
}

FILE *tp_input_open(const char *path, const char *what, tp_error *err) {
    if (tp_input_check(path, what, TP_WANT_FILE, NULL, err)) return NULL;
    /* O_NONBLOCK: should the path have become a FIFO since the check, the open returns at once and the fstat
     * below refuses it. On a regular file the flag changes nothing; it is cleared all the same. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tp_fail_path(err, TP_ERR_IO, path, "cannot open %s: %s", what, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        tp_fail_path(err, TP_ERR_IO, path, "%s is %s; expected a regular file", what, tp_file_type_name(sb.st_mode));
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        tp_fail_path(err, TP_ERR_IO, path, "cannot open %s: %s", what, strerror(errno));
        close(fd);
    }
    return f;
}

/* The folder part of path ("." for a bare name, "/" for "/x"), trailing slashes of path ignored. Caller frees. */
static char *folder_of(const char *path) {
    char *d = strdup(path);
    if (!d) return NULL;
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') d[--n] = 0;
    char *slash = strrchr(d, '/');
    if (!slash) {
        free(d);
        return strdup(".");
    }
    if (slash == d) slash[1] = 0;
    else *slash = 0;
    return d;
}

/* Follows a chain of symbolic links from path to the name that is not a link (existing or not: a dangling link's
 * target is where the output goes). Caller frees; NULL with errno on a loop (ELOOP) or no memory. */
static char *follow_links(const char *path) {
    char *cur = strdup(path);
    for (int hop = 0; cur && hop < 40; hop++) {
        struct stat lb;
        if (lstat(cur, &lb) != 0 || !S_ISLNK(lb.st_mode)) return cur;
        char t[4096];
        ssize_t k = readlink(cur, t, sizeof t - 1);
        if (k < 0) return cur;
        t[k] = 0;
        char *next;
        if (t[0] == '/') {
            next = strdup(t);
        } else { /* relative to the link's own folder */
            char *d = folder_of(cur);
            size_t cap = (d ? strlen(d) : 0) + strlen(t) + 2;
            next = d ? malloc(cap) : NULL;
            if (next) snprintf(next, cap, "%s/%s", d, t);
            free(d);
        }
        free(cur);
        cur = next;
    }
    if (cur) {
        free(cur);
        errno = ELOOP;
    } else {
        errno = ENOMEM;
    }
    return NULL;
}

/* The shared checks of tp_output_check and tp_outfile_open: *target receives where the bytes go. */
static tp_status check_target(const char *path, const char *what, char **target, int *linked, tp_error *err) {
    *target = NULL;
    struct stat lb;
    *linked = lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode);
    char *t = follow_links(path);
    if (!t) return tp_fail_path(err, TP_ERR_IO, path, "%s: cannot follow the link: %s", what, strerror(errno));
    struct stat sb;
    if (stat(t, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        tp_status s = S_ISDIR(sb.st_mode)
                          ? tp_fail_path(err, TP_ERR_IO, path, "%s is a folder; expected a file name", what)
                          : tp_fail_path(err, TP_ERR_IO, path, "%s is %s; tprof writes only regular files", what,
                                         tp_file_type_name(sb.st_mode));
        free(t);
        return s;
    }
    char *d = folder_of(t);
    struct stat db;
    tp_status s = TP_OK;
    if (!d) s = tp_fail(err, TP_ERR_OOM, "%s: out of host memory", what);
    else if (stat(d, &db) != 0 || !S_ISDIR(db.st_mode))
        s = tp_fail_path(err, TP_ERR_IO, path, "cannot write %s: folder '%s' does not exist", what, d);
    else if (access(d, W_OK | X_OK) != 0)
        s = tp_fail_path(err, TP_ERR_IO, path, "cannot write %s: folder '%s' is not writable", what, d);
    free(d);
    if (s) {
        free(t);
        return s;
    }
    *target = t;
    return TP_OK;
}

tp_status tp_output_check(const char *path, const char *what, char **link_target, tp_error *err) {
    if (link_target) *link_target = NULL;
    char *t = NULL;
    int linked = 0;
    tp_status s = check_target(path, what, &t, &linked, err);
    if (s) return s;
    if (linked && link_target) *link_target = t;
    else free(t);
    return TP_OK;
}

tp_status tp_outfile_open(tp_outfile *o, const char *path, const char *what, tp_error *err) {
    memset(o, 0, sizeof *o);
    int linked = 0;
    tp_status s = check_target(path, what, &o->target, &linked, err);
    if (s) return s;
    struct stat sb;
    const int exists = stat(o->target, &sb) == 0;
    char *d = folder_of(o->target);
    const char *base = strrchr(o->target, '/') ? strrchr(o->target, '/') + 1 : o->target;
    size_t cap = (d ? strlen(d) : 0) + strlen(base) + 48;
    o->tmp = d ? malloc(cap) : NULL;
    if (!o->tmp) {
        free(d);
        tp_outfile_abort(o);
        return tp_fail(err, TP_ERR_OOM, "%s: out of host memory", what);
    }
    /* exclusive creation: never another writer's temporary file, never a name that appeared meanwhile */
    int fd = -1, e = 0;
    for (int n = 0; n < 100 && fd < 0; n++) {
        snprintf(o->tmp, cap, "%s/.%s.tmp.%ld.%d", d, base, (long)getpid(), n);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        e = errno;
        if (fd < 0 && e != EEXIST) break;
    }
    free(d);
    if (fd < 0) {
        free(o->tmp), o->tmp = NULL;
        tp_outfile_abort(o);
        return tp_fail_path(err, TP_ERR_IO, path, "cannot write %s: cannot create a temporary file beside it: %s", what,
                            strerror(e));
    }
    if (exists) (void)fchmod(fd, sb.st_mode & 07777); /* a replaced file keeps its permissions */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        e = errno;
        close(fd);
        tp_outfile_abort(o);
        return tp_fail_path(err, TP_ERR_IO, path, "cannot write %s: cannot create a temporary file beside it: %s", what,
                            strerror(e));
    }
    return TP_OK;
}

tp_status tp_outfile_commit(tp_outfile *o, tp_error *err) {
    if (!o->f || !o->tmp) return tp_fail(err, TP_ERR_IO, "an output committed twice or never opened");
    /* A full disk may show only at the flush; fsync before the rename so that a crash cannot leave a renamed
     * file whose blocks never reached the disk. */
    int e = EIO, bad = ferror(o->f);
    if (!bad && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)) bad = 1, e = errno;
    if (fclose(o->f) != 0 && !bad) bad = 1, e = errno;
    o->f = NULL;
    if (bad || rename(o->tmp, o->target) != 0) {
        if (!bad) e = errno;
        tp_status s = tp_fail_path(err, TP_ERR_IO, o->target, "cannot write: %s", strerror(e ? e : EIO));
        tp_outfile_abort(o);
        return s;
    }
    free(o->tmp), o->tmp = NULL;
    free(o->target), o->target = NULL;
    return TP_OK;
}

void tp_outfile_abort(tp_outfile *o) {
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp); /* only the file this writer created: the target is never touched */
    free(o->tmp);
    free(o->target);
    memset(o, 0, sizeof *o);
}

int tp_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

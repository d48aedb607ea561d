/* hf_hub.c: hub ids resolved in the local Hugging Face cache (hf_hub.h). */
#include "io/hf_hub.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

static int part_ok(const char *s, size_t len) {
    if (len == 0 || s[0] == '-' || s[0] == '.') return 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return 0;
        if (i && (c == '-' || c == '.') && s[i - 1] == c) return 0; /* "--" (the cache's separator) and ".." */
    }
    return 1;
}

int tp_hf_hub_is_id(const char *s) {
    const size_t len = strlen(s);
    if (len == 0 || len > 96) return 0;
    const char *slash = strchr(s, '/');
    if (!slash) return part_ok(s, len);
    return !strchr(slash + 1, '/') && part_ok(s, (size_t)(slash - s)) && part_ok(slash + 1, strlen(slash + 1));
}

enum { MAX_ROOTS = 4 };
typedef struct {
    char path[MAX_ROOTS][1024];
    const char *label[MAX_ROOTS]; /* where the path came from, for the message */
    int n;
} roots;

static void add_root(roots *r, const char *label, const char *base, const char *tail) {
    if (!base || !*base || r->n == MAX_ROOTS) return;
    char p[1024];
    if (snprintf(p, sizeof p, "%s%s", base, tail) >= (int)sizeof p) return;
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->path[i], p) == 0) return;
    memcpy(r->path[r->n], p, sizeof p);
    r->label[r->n++] = label;
}

/* huggingface_hub's order (constants.py): HF_HUB_CACHE, else HF_HOME/hub, HF_HOME defaulting to
 * $XDG_CACHE_HOME/huggingface, then ~/.cache/huggingface */
static void cache_roots(roots *r) {
    memset(r, 0, sizeof *r);
    add_root(r, "$HF_HUB_CACHE", getenv("HF_HUB_CACHE"), "");
    add_root(r, "$HF_HOME/hub", getenv("HF_HOME"), "/hub");
    add_root(r, "$XDG_CACHE_HOME/huggingface/hub", getenv("XDG_CACHE_HOME"), "/huggingface/hub");
    add_root(r, "~/.cache/huggingface/hub", getenv("HOME"), "/.cache/huggingface/hub");
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The commit hash in refs/main (a short regular file: read without blocking on a FIFO put there); 0 or -1. */
static int read_ref(const char *path, char *hash, size_t n) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat sb;
    ssize_t got = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && n > 1) got = read(fd, hash, n - 1);
    close(fd);
    if (got <= 0) return -1;
    hash[got] = 0;
    while (got > 0 && isspace((unsigned char)hash[got - 1])) hash[--got] = 0;
    for (ssize_t i = 0; i < got; i++)
        if (!isalnum((unsigned char)hash[i])) return -1; /* a hash, never a path */
    return got > 0 ? 0 : -1;
}

tp_status tp_hf_hub_resolve(const char *id, char *dir, size_t n, tp_error *err) {
    if (!tp_hf_hub_is_id(id)) return tp_fail(err, TP_ERR_ARG, "'%.100s' is not a Hugging Face model id", id);
    char folder[160] = "models--";
    for (const char *c = id; *c; c++) tp_append(folder, sizeof folder, *c == '/' ? "--" : "%c", *c);
    roots r;
    cache_roots(&r);
    char repo[1300], p[1400], hash[80];
    for (int i = 0; i < r.n; i++) {
        snprintf(repo, sizeof repo, "%s/%s", r.path[i], folder);
        if (!is_dir(repo)) continue;
        snprintf(p, sizeof p, "%s/refs/main", repo);
        if (read_ref(p, hash, sizeof hash))
            return tp_fail(err, TP_ERR_IO, "%s: %.300s: no readable commit hash (downloaded at another revision? "
                           "`hf download %s` fetches main)", id, p, id);
        snprintf(p, sizeof p, "%s/snapshots/%s", repo, hash);
        if (!is_dir(p))
            return tp_fail(err, TP_ERR_IO, "%s: %.300s: refs/main's snapshot folder is missing (an interrupted "
                           "download? `hf download %s` completes it)", id, p, id);
        if (snprintf(dir, n, "%s", p) >= (int)n) return tp_fail(err, TP_ERR_ARG, "%s: path too long", p);
        snprintf(p, sizeof p, "%s/config.json", dir);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
            return tp_fail(err, TP_ERR_IO, "%s: %.300s is missing (only some files downloaded? `hf download %s` "
                           "fetches the whole model)", id, p, id);
        return TP_OK;
    }
    char where[700] = "";
    for (int i = 0; i < r.n; i++)
        tp_append(where, sizeof where, "%s%s=%.150s", i ? ", " : "", r.label[i], r.path[i]);
    return tp_fail(err, TP_ERR_IO, "'%s' is not a file or folder, nor in the Hugging Face cache (no %s in %s); tprof "
                   "does not download: run `hf download %s` (or `huggingface-cli download %s`) first", id, folder,
                   r.n ? where : "any: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set", id, id);
}

int tp_hf_hub_id_of(const char *path, char *id, size_t n) {
    if (n) id[0] = 0;
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return 0;
    enum { MAX_PARTS = 256 };
    const char *part[MAX_PARTS];
    int np = 0;
    char *save = NULL;
    for (char *s = strtok_r(buf, "/", &save); s && np < MAX_PARTS; s = strtok_r(NULL, "/", &save)) part[np++] = s;
    /* .../models--ORG--NAME/snapshots/HASH, or a file in it */
    for (int i = np - 2; i >= 1 && i >= np - 3; i--) {
        if (strcmp(part[i], "snapshots") != 0 || strncmp(part[i - 1], "models--", 8) != 0) continue;
        const char *name = part[i - 1] + 8, *sep = strstr(name, "--");
        const int w = snprintf(id, n, "%.*s%s%s", sep ? (int)(sep - name) : (int)strlen(name), name, sep ? "/" : "",
                               sep ? sep + 2 : "");
        if (w > 0 && w < (int)n && tp_hf_hub_is_id(id)) return 1;
        if (n) id[0] = 0;
        return 0;
    }
    return 0;
}

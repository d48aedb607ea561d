/* test_tmpdir.h: a per-test temporary directory and whole-file helpers, shared by the file-format tests.
 * Include once per test program, after defining TP_TMPDIR_PREFIX (e.g. "/tmp/tp_st_test_"); register setup and
 * teardown as the TCase's checked fixture. */
#ifndef TP_TEST_TMPDIR_H
#define TP_TEST_TMPDIR_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "%sXXXXXX", TP_TMPDIR_PREFIX);
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp failed");
}

/* Removes the files the test left and the directory (tests create no subdirectories). */
static void teardown(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_dir);
}

/* A path inside the test directory; four rotating buffers so a test can hold a few at once. */
static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static inline void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert(n == 0 || fwrite(p, 1, n, f) == n);
    ck_assert(fclose(f) == 0);
}

/* The whole file, malloc'ed (one spare byte), its size in *n. */
static inline unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert(fseek(f, 0, SEEK_END) == 0);
    long sz = ftell(f);
    ck_assert(sz >= 0);
    ck_assert(fseek(f, 0, SEEK_SET) == 0);
    unsigned char *b = malloc((size_t)sz + 1);
    ck_assert(b != NULL);
    ck_assert(fread(b, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

#endif

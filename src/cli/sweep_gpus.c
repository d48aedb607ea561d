/* sweep_gpus.c: a batch sweep spread over GPUs (sweep_gpus.h). */
#include "cli/sweep_gpus.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 256

/* name is option `opt` given as "--opt V" (consumes the next argument) or "--opt=V" */
static int is_opt(const char *arg, const char *opt) {
    const size_t n = strlen(opt);
    return strncmp(arg, opt, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

extern char **environ;

/* CUDA_VISIBLE_DEVICES for GPU index g: the g-th entry of the caller's own list when it has one; 0, or -1 when g
 * lies past that list */
static int visible_device(int g, char *out, size_t n) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(out, n, "CUDA_VISIBLE_DEVICES=%d", g);
    if (!v || !*v) return 0;
    for (int i = 0; *v; i++) {
        const size_t len = strcspn(v, ",");
        if (i == g) {
            snprintf(out, n, "CUDA_VISIBLE_DEVICES=%.*s", (int)len, v);
            return 0;
        }
        v += len + (v[len] == ',');
    }
    return -1;
}

typedef struct {
    pid_t pid;
    int rows_fd;   /* read end of the rows pipe */
    FILE *out;     /* the process's output */
    int batches[16], n;
} part;

static tp_status start(int argc, char **argv, int gpu, part *p, tp_error *err) {
    char batch_opt[300] = "--batch=", fd_opt[32], dev[96];
    for (int k = 0; k < p->n; k++) {
        size_t l = strlen(batch_opt);
        snprintf(batch_opt + l, sizeof batch_opt - l, "%s%d", k ? "," : "", p->batches[k]);
    }
    if (visible_device(gpu, dev, sizeof dev))
        return tp_fail(err, TP_ERR_ARG, "--gpus: GPU %d is not in CUDA_VISIBLE_DEVICES=%s", gpu,
                       getenv("CUDA_VISIBLE_DEVICES"));
    /* the environment is built before fork: the child only execs (the parent may have threads) */
    int ne = 0;
    while (environ[ne]) ne++;
    char **env = malloc(sizeof(char *) * (size_t)(ne + 2));
    if (!env) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    int k = 0;
    for (int i = 0; i < ne; i++)
        if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) != 0) env[k++] = environ[i];
    env[k++] = dev;
    env[k] = NULL;
    int fds[2] = {-1, -1};
    tp_status st = TP_OK;
    if (!(p->out = tmpfile())) st = tp_fail(err, TP_ERR_IO, "--gpus: a temporary file for GPU %d's output: %s", gpu, strerror(errno));
    else if (pipe(fds) != 0) st = tp_fail(err, TP_ERR_IO, "--gpus: a pipe for GPU %d: %s", gpu, strerror(errno));
    if (st) {
        if (p->out) fclose(p->out);
        p->out = NULL;
        free(env);
        return st;
    }
    /* later children must not hold this one's files: only the write end crosses this child's exec */
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fileno(p->out), F_SETFD, FD_CLOEXEC);
    snprintf(fd_opt, sizeof fd_opt, "--rows-fd=%d", fds[1]);
    char *args[MAX_ARGS];
    int na = 0;
    args[na++] = "tprof";
    args[na++] = "bench";
    args[na++] = "--device=gpu"; /* a GPU that is not there is an error, never a run on the CPU */
    for (int i = 0; i < argc && na < MAX_ARGS - 4; i++) {
        if (is_opt(argv[i], "--gpus") || is_opt(argv[i], "--batch")) {
            if (!strchr(argv[i], '=')) i++; /* and its value */
            continue;
        }
        args[na++] = argv[i];
    }
    args[na++] = batch_opt;
    args[na++] = fd_opt;
    args[na] = NULL;
    fflush(stdout);
    fflush(stderr);
    p->pid = fork();
    if (p->pid == 0) { /* the child: its output and errors into the file, then exec (nothing touches CUDA here) */
        dup2(fileno(p->out), STDOUT_FILENO);
        dup2(fileno(p->out), STDERR_FILENO);
        execve("/proc/self/exe", args, env);
        static const char msg[] = "tprof: --gpus: could not exec /proc/self/exe\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(126);
        _exit(127);
    }
    const int fork_errno = errno;
    free(env);
    close(fds[1]);
    if (p->pid < 0) {
        close(fds[0]);
        fclose(p->out);
        p->out = NULL;
        return tp_fail(err, TP_ERR_IO, "--gpus: fork for GPU %d: %s", gpu, strerror(fork_errno));
    }
    p->rows_fd = fds[0];
    return TP_OK;
}

/* reads exactly n bytes; 0, or -1 when the pipe closed early */
static int read_all(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

tp_status tp_sweep_gpus(int argc, char **argv, const int *gpus, int n_gpus, const int *batches, int n_batches,
                        int n_precs, tp_bench_row *rows, tp_error *err) {
    if (n_gpus > n_batches)
        return tp_fail(err, TP_ERR_ARG, "--gpus: %d GPUs for %d batch sizes: give at most as many GPUs as sizes",
                       n_gpus, n_batches);
    part *parts = calloc((size_t)n_gpus, sizeof *parts);
    tp_bench_row *buf = malloc(sizeof *buf * (size_t)(n_batches * n_precs));
    if (!parts || !buf) {
        free(parts);
        free(buf);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int b = 0; b < n_batches; b++) { /* round robin, in the order given */
        part *p = &parts[b % n_gpus];
        p->batches[p->n++] = batches[b];
    }
    printf("Sweep over %d GPUs, one process each (their output follows GPU by GPU once all are done):\n", n_gpus);
    for (int g = 0; g < n_gpus; g++) {
        printf("  GPU %d: batch", gpus[g]);
        for (int k = 0; k < parts[g].n; k++) printf("%s%d", k ? "," : " ", parts[g].batches[k]);
        printf("\n");
    }
    tp_status st = TP_OK;
    int started = 0;
    for (; started < n_gpus && !st; started++) st = start(argc, argv, gpus[started], &parts[started], err);
    if (st) started--; /* the one that failed did not start */
    for (int g = 0; g < started; g++) {
        part *p = &parts[g];
        const size_t bytes = sizeof *buf * (size_t)(p->n * n_precs);
        const int rows_ok = p->pid > 0 && read_all(p->rows_fd, buf, bytes) == 0;
        close(p->rows_fd);
        int status = 0;
        while (p->pid > 0 && waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
        }
        printf("\n########## GPU %d ##########\n", gpus[g]);
        fflush(stdout);
        rewind(p->out);
        char line[4096];
        while (fgets(line, sizeof line, p->out)) fputs(line, stdout);
        fclose(p->out);
        const int ok = p->pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!st && !ok)
            st = tp_fail(err, TP_ERR_CUDA, "--gpus: the process on GPU %d (batch %d%s) failed (%s %d): its error is "
                         "in its output above", gpus[g], p->batches[0], p->n > 1 ? " and more" : "",
                         WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        else if (!st && !rows_ok)
            st = tp_fail(err, TP_ERR_IO, "--gpus: the process on GPU %d sent no results back", gpus[g]);
        /* its rows into the sweep's batch-major table */
        for (int k = 0; !st && k < p->n; k++) /* its k-th size is the sweep's (g + k n_gpus)-th: dealt round robin */
            memcpy(rows + (size_t)(g + k * n_gpus) * n_precs, buf + (size_t)k * n_precs, sizeof *buf * (size_t)n_precs);
    }
    free(parts);
    free(buf);
    return st;
}

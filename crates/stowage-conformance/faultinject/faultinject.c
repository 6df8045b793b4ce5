/*
 * faultinject: an LD_PRELOAD interposer that makes writes or fsyncs of files under one directory
 * fail with a chosen errno, for the fault cases of the conformance suite (src/injector.rs) and
 * stowage-reliability's resource-fault campaign. A disk that fills up or a device that reports
 * EIO cannot be had without root (no tmpfs, no dm-error target in CI), and libhdf5 does its own
 * write/pwrite, so the failure is injected at libc's entry points, which a preloaded shared
 * object replaces in every library of the process.
 *
 * Environment (read once, at load):
 * - FAULTINJECT_DIR: absolute directory; only descriptors whose path is below it count. Without
 *   it every call passes straight through.
 * - FAULTINJECT_OP: which calls count:
 *   - "write": write, pwrite, pwrite64, writev, pwritev, pwritev64;
 *   - "fsync": fsync, fdatasync;
 *   - "ftruncate": ftruncate, ftruncate64, truncate, truncate64;
 *   - "fallocate": fallocate, fallocate64, posix_fallocate, posix_fallocate64 (which return the
 *     errno instead of setting it);
 *   - "rename": rename, renameat, renameat2 (when either name is below the directory);
 *   - "mkdir": mkdir, mkdirat;
 *   - "open": open, open64, openat, openat64, creat, creat64 that may create a file (O_CREAT or
 *     O_TMPFILE): opening an existing file for reading cannot run out of space.
 *   Rust's std calls open64, ftruncate64, rename and mkdir; libhdf5 open and ftruncate64; the
 *   other names are there so that a backend switching to the *at forms stays covered.
 * - FAULTINJECT_ERRNO: the errno of a failed call (ENOSPC 28, EIO 5, EMFILE 24).
 * - FAULTINJECT_AFTER: how many matching calls succeed before the first failure; -1 only counts.
 * - FAULTINJECT_STICKY: "1": every matching call from the first failure on fails too (a full disk
 *   stays full); otherwise only that one call fails (a retried fsync then "succeeds", the trap a
 *   writer must not fall into).
 * - FAULTINJECT_SHORT: "1": a failing write first writes half its bytes and returns that short
 *   count; the next matching call fails (how a disk fills up in the middle of a write).
 * - FAULTINJECT_STOP: a path; once it exists no call fails any more (the disk was freed). Checked
 *   only when a call is about to fail.
 * - FAULTINJECT_LOG: a file (outside FAULTINJECT_DIR) that gets "loaded <pid>" at load, one
 *   "fired <op> <call> <path>" line per injected failure and "calls <n> fired <m>" at exit.
 * - FAULTINJECT_IGNORE: a file name whose descriptors never count (the writer lock's pid hint,
 *   whose write failure is ignored by design).
 * - FAULTINJECT_TRACE: "1": log every matching call as "call <op> <n> <path>", and print the
 *   native stack of each injected failure to stderr (to find out what a fault point hit).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum op { OP_NONE, OP_WRITE, OP_FSYNC, OP_FTRUNCATE, OP_FALLOCATE, OP_RENAME, OP_MKDIR, OP_OPEN };

static enum op target;
static char dir[PATH_MAX];
static size_t dir_len;
static char stop_path[PATH_MAX];
static char log_path[PATH_MAX];
static char ignore_name[NAME_MAX + 1];
static int fail_errno;
static long after;
static int sticky, short_write, trace;
static atomic_long calls, fired;
/* Set by the half-written call of a short write: the next matching call fails. */
static atomic_int pending_failure;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);

static void copy_env(const char *name, char *out, size_t size) {
    const char *value = getenv(name);
    if (value && strlen(value) < size) strcpy(out, value);
}

static void log_line(const char *fmt, ...) {
    if (!log_path[0] || !real_open) return;
    /* The real open: this file's own would count the log as a call. */
    int fd = real_open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[PATH_MAX + 128];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    if (n > 0) real_write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    close(fd);
}

static void init(void) {
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_pwritev64 = dlsym(RTLD_NEXT, "pwritev64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_truncate = dlsym(RTLD_NEXT, "truncate");
    real_truncate64 = dlsym(RTLD_NEXT, "truncate64");
    real_fallocate = dlsym(RTLD_NEXT, "fallocate");
    real_fallocate64 = dlsym(RTLD_NEXT, "fallocate64");
    real_posix_fallocate = dlsym(RTLD_NEXT, "posix_fallocate");
    real_posix_fallocate64 = dlsym(RTLD_NEXT, "posix_fallocate64");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    real_renameat2 = dlsym(RTLD_NEXT, "renameat2");
    real_mkdir = dlsym(RTLD_NEXT, "mkdir");
    real_mkdirat = dlsym(RTLD_NEXT, "mkdirat");
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_creat = dlsym(RTLD_NEXT, "creat");
    real_creat64 = dlsym(RTLD_NEXT, "creat64");
    copy_env("FAULTINJECT_DIR", dir, sizeof dir);
    copy_env("FAULTINJECT_STOP", stop_path, sizeof stop_path);
    copy_env("FAULTINJECT_LOG", log_path, sizeof log_path);
    copy_env("FAULTINJECT_IGNORE", ignore_name, sizeof ignore_name);
    const char *op = getenv("FAULTINJECT_OP");
    const char *err = getenv("FAULTINJECT_ERRNO");
    const char *n = getenv("FAULTINJECT_AFTER");
    if (dir[0] != '/' || !op || !err || !n) return;
    dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/') dir[--dir_len] = 0;
    fail_errno = atoi(err);
    after = atol(n);
    const char *s = getenv("FAULTINJECT_STICKY");
    sticky = s && strcmp(s, "1") == 0;
    s = getenv("FAULTINJECT_TRACE");
    trace = s && strcmp(s, "1") == 0;
    s = getenv("FAULTINJECT_SHORT");
    short_write = s && strcmp(s, "1") == 0;
    static const struct {
        const char *name;
        enum op op;
    } ops[] = {{"write", OP_WRITE},         {"fsync", OP_FSYNC}, {"ftruncate", OP_FTRUNCATE},
               {"fallocate", OP_FALLOCATE}, {"rename", OP_RENAME}, {"mkdir", OP_MKDIR},
               {"open", OP_OPEN}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i].name) == 0) target = ops[i].op;
}

static void ensure_init(void) { pthread_once(&init_once, init); }

__attribute__((constructor)) static void announce(void) {
    ensure_init();
    if (target != OP_NONE) log_line("loaded %d\n", (int)getpid());
}

__attribute__((destructor)) static void summarize(void) {
    if (target != OP_NONE) log_line("calls %ld fired %ld\n", atomic_load(&calls), atomic_load(&fired));
}

/* Whether `fd` names a file below FAULTINJECT_DIR (not the ignored one); its path in `path`. */
static int watched(int fd, char *path, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n < 0) return 0;
    path[n] = 0;
    if (strncmp(path, dir, dir_len) != 0 || path[dir_len] != '/') return 0;
    const char *base = strrchr(path, '/') + 1;
    return !(ignore_name[0] && strcmp(base, ignore_name) == 0);
}

/* Whether `path` (relative ones resolved against `dirfd`) is below FAULTINJECT_DIR (and not the
 * ignored file); the absolute path in `out`. The kernel's names of the directories are
 * canonical, as FAULTINJECT_DIR is; a relative path's ".." is not resolved (no backend uses one). */
static int watched_path(int dirfd, const char *path, char *out, size_t size) {
    char base[PATH_MAX];
    if (!path) return 0;
    if (path[0] == '/') {
        if (strlen(path) >= size) return 0;
        strcpy(out, path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = 0;
        }
        if ((size_t)snprintf(out, size, "%s/%s", base, path) >= size) return 0;
    }
    if (strncmp(out, dir, dir_len) != 0 || out[dir_len] != '/') return 0;
    const char *name = strrchr(out, '/') + 1;
    return !(ignore_name[0] && strcmp(name, ignore_name) == 0);
}

static int stopped(void) {
    struct stat st;
    return stop_path[0] && stat(stop_path, &st) == 0;
}

/* What a matching call on `fd` must do. */
enum verdict { PASS, FAIL, HALF };

/* The native stack of an injected failure, when tracing. */
static void print_stack(void) {
    if (!trace) return;
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
}

/* The verdict of a matching call on the file `path` (already known to be watched). */
static enum verdict decide_on(enum op op, const char *name, const char *path);

static enum verdict decide(enum op op, int fd, const char *name) {
    ensure_init();
    char path[PATH_MAX];
    if (target != op || !watched(fd, path, sizeof path)) return PASS;
    return decide_on(op, name, path);
}

/* As decide, for a call naming a file by path (relative to `dirfd`). */
static enum verdict decide_path(enum op op, int dirfd, const char *file, const char *name) {
    ensure_init();
    char path[PATH_MAX];
    if (target != op || !watched_path(dirfd, file, path, sizeof path)) return PASS;
    return decide_on(op, name, path);
}

static enum verdict decide_on(enum op op, const char *name, const char *path) {
    long call = atomic_fetch_add(&calls, 1);
    if (trace) log_line("call %s %ld %s\n", name, call, path);
    int due = after >= 0 && (call == after || (sticky && call > after) ||
                             atomic_exchange(&pending_failure, 0));
    if (!due || stopped()) return PASS;
    if (short_write && op == OP_WRITE && call == after) {
        atomic_store(&pending_failure, 1);
        log_line("fired %s-half %ld %s\n", name, call, path);
        atomic_fetch_add(&fired, 1);
        print_stack();
        return HALF;
    }
    log_line("fired %s %ld %s\n", name, call, path);
    atomic_fetch_add(&fired, 1);
    print_stack();
    return FAIL;
}

static size_t iov_len(const struct iovec *iov, int count) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    return total;
}

/* The first half of a vectored write, as a plain write at the same place. */
static ssize_t write_half(int fd, const struct iovec *iov, int count, off_t offset, int positional) {
    size_t half = iov_len(iov, count) / 2;
    if (half == 0) {
        errno = fail_errno;
        return -1;
    }
    char *buf = malloc(half);
    if (!buf) return -1;
    size_t at = 0;
    for (int i = 0; i < count && at < half; i++) {
        size_t take = iov[i].iov_len < half - at ? iov[i].iov_len : half - at;
        memcpy(buf + at, iov[i].iov_base, take);
        at += take;
    }
    ssize_t n = positional ? real_pwrite64(fd, buf, half, offset) : real_write(fd, buf, half);
    free(buf);
    return n;
}

#define FAIL_WITH_ERRNO                                                                            \
    do {                                                                                           \
        errno = fail_errno;                                                                        \
        return -1;                                                                                 \
    } while (0)

ssize_t write(int fd, const void *buf, size_t len) {
    switch (decide(OP_WRITE, fd, "write")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF:
        if (len >= 2) return real_write(fd, buf, len / 2);
        FAIL_WITH_ERRNO;
    default: return real_write(fd, buf, len);
    }
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t offset) {
    switch (decide(OP_WRITE, fd, "pwrite")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF:
        if (len >= 2) return real_pwrite(fd, buf, len / 2, offset);
        FAIL_WITH_ERRNO;
    default: return real_pwrite(fd, buf, len, offset);
    }
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t offset) {
    switch (decide(OP_WRITE, fd, "pwrite64")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF:
        if (len >= 2) return real_pwrite64(fd, buf, len / 2, offset);
        FAIL_WITH_ERRNO;
    default: return real_pwrite64(fd, buf, len, offset);
    }
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    switch (decide(OP_WRITE, fd, "writev")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF: return write_half(fd, iov, count, 0, 0);
    default: return real_writev(fd, iov, count);
    }
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    switch (decide(OP_WRITE, fd, "pwritev")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF: return write_half(fd, iov, count, offset, 1);
    default: return real_pwritev(fd, iov, count, offset);
    }
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    switch (decide(OP_WRITE, fd, "pwritev64")) {
    case FAIL: FAIL_WITH_ERRNO;
    case HALF: return write_half(fd, iov, count, offset, 1);
    default: return real_pwritev64(fd, iov, count, offset);
    }
}

int fsync(int fd) {
    if (decide(OP_FSYNC, fd, "fsync") != PASS) FAIL_WITH_ERRNO;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (decide(OP_FSYNC, fd, "fdatasync") != PASS) FAIL_WITH_ERRNO;
    return real_fdatasync(fd);
}

int ftruncate(int fd, off_t length) {
    if (decide(OP_FTRUNCATE, fd, "ftruncate") != PASS) FAIL_WITH_ERRNO;
    return real_ftruncate(fd, length);
}

int ftruncate64(int fd, off_t length) {
    if (decide(OP_FTRUNCATE, fd, "ftruncate64") != PASS) FAIL_WITH_ERRNO;
    return real_ftruncate64(fd, length);
}

int truncate(const char *path, off_t length) {
    if (decide_path(OP_FTRUNCATE, AT_FDCWD, path, "truncate") != PASS) FAIL_WITH_ERRNO;
    return real_truncate(path, length);
}

int truncate64(const char *path, off_t length) {
    if (decide_path(OP_FTRUNCATE, AT_FDCWD, path, "truncate64") != PASS) FAIL_WITH_ERRNO;
    return real_truncate64(path, length);
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
    if (decide(OP_FALLOCATE, fd, "fallocate") != PASS) FAIL_WITH_ERRNO;
    return real_fallocate(fd, mode, offset, len);
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
    if (decide(OP_FALLOCATE, fd, "fallocate64") != PASS) FAIL_WITH_ERRNO;
    return real_fallocate64(fd, mode, offset, len);
}

/* posix_fallocate returns the error number and leaves errno alone. */
int posix_fallocate(int fd, off_t offset, off_t len) {
    if (decide(OP_FALLOCATE, fd, "posix_fallocate") != PASS) return fail_errno;
    return real_posix_fallocate(fd, offset, len);
}

int posix_fallocate64(int fd, off_t offset, off_t len) {
    if (decide(OP_FALLOCATE, fd, "posix_fallocate64") != PASS) return fail_errno;
    return real_posix_fallocate64(fd, offset, len);
}

/* A rename counts when its target is below the directory, else when its source is (one call,
 * one count). */
static enum verdict decide_rename(int fromfd, const char *from, int tofd, const char *to,
                                  const char *name) {
    ensure_init();
    char path[PATH_MAX];
    if (target != OP_RENAME) return PASS;
    if (watched_path(tofd, to, path, sizeof path) || watched_path(fromfd, from, path, sizeof path))
        return decide_on(OP_RENAME, name, path);
    return PASS;
}

int rename(const char *from, const char *to) {
    if (decide_rename(AT_FDCWD, from, AT_FDCWD, to, "rename") != PASS) FAIL_WITH_ERRNO;
    return real_rename(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    if (decide_rename(fromfd, from, tofd, to, "renameat") != PASS) FAIL_WITH_ERRNO;
    return real_renameat(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    if (decide_rename(fromfd, from, tofd, to, "renameat2") != PASS) FAIL_WITH_ERRNO;
    return real_renameat2(fromfd, from, tofd, to, flags);
}

int mkdir(const char *path, mode_t mode) {
    if (decide_path(OP_MKDIR, AT_FDCWD, path, "mkdir") != PASS) FAIL_WITH_ERRNO;
    return real_mkdir(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode) {
    if (decide_path(OP_MKDIR, dirfd, path, "mkdirat") != PASS) FAIL_WITH_ERRNO;
    return real_mkdirat(dirfd, path, mode);
}

/* The mode argument is only there with O_CREAT or O_TMPFILE, which are also the opens that count
 * (they may need a new inode or directory entry). */
#define CREATES(flags) ((flags) & (O_CREAT | __O_TMPFILE))
#define MODE_ARG(flags, mode)                                                                      \
    mode_t mode = 0;                                                                               \
    if (CREATES(flags)) {                                                                          \
        va_list args;                                                                              \
        va_start(args, flags);                                                                     \
        mode = (mode_t)va_arg(args, int);                                                          \
        va_end(args);                                                                              \
    }

static enum verdict decide_open(int dirfd, const char *path, int flags, const char *name) {
    ensure_init();
    if (!CREATES(flags)) return PASS;
    return decide_path(OP_OPEN, dirfd, path, name);
}

int open(const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    if (decide_open(AT_FDCWD, path, flags, "open") != PASS) FAIL_WITH_ERRNO;
    return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    if (decide_open(AT_FDCWD, path, flags, "open64") != PASS) FAIL_WITH_ERRNO;
    return real_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    if (decide_open(dirfd, path, flags, "openat") != PASS) FAIL_WITH_ERRNO;
    return real_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    if (decide_open(dirfd, path, flags, "openat64") != PASS) FAIL_WITH_ERRNO;
    return real_openat64(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode) {
    if (decide_open(AT_FDCWD, path, O_CREAT, "creat") != PASS) FAIL_WITH_ERRNO;
    return real_creat(path, mode);
}

int creat64(const char *path, mode_t mode) {
    if (decide_open(AT_FDCWD, path, O_CREAT, "creat64") != PASS) FAIL_WITH_ERRNO;
    return real_creat64(path, mode);
}

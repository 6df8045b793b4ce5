/*
 * faultfs: an LD_PRELOAD interposer that keeps the "durable image" of one directory tree, what
 * a power cut would leave of it, for the power-loss cases of the conformance suite and the
 * power-loss trials of stowage-reliability's crash campaign.
 *
 * The model is POSIX's, taken strictly:
 * - a regular file's contents become durable when the file is fsync'd or fdatasync'd: the shim
 *   then copies the whole file to SHADOW/files/<inode>;
 * - a directory's entries (a new file's name, a rename, an unlink) become durable when the
 *   directory is fsync'd: the shim then writes its listing to SHADOW/dirs/<inode>;
 * - sync() and syncfs() make the whole tree durable.
 * The real file holds the latest bytes, and fsync is the moment they are copied. Everything else
 * (unsynced writes, unsynced names) is dropped by the reconstruction
 * (src/durable_image.rs), which rebuilds the tree from SHADOW (and, for torn writes, may
 * keep a prefix of a file's unsynced bytes: see there).
 *
 * A failed fsync or fdatasync of a regular file (whatever made it fail: a real error or the
 * faultinject interposer loaded after this one) drops its dirty pages, as Linux does: after a
 * writeback error the kernel marks the pages clean, keeps the new bytes in the page cache (reads
 * still see them) and never writes them, so a later fsync "succeeds" without them. The shim
 * marks every 4 KiB page of the file that differs from its durable snapshot as lost, and keeps
 * that page's durable bytes (zeros past the durable end) in SHADOW/lostbase/<inode>. A later
 * write, pwrite, writev or pwritev touching a lost page, or an ftruncate cutting it off, makes it
 * dirty again (a rewrite after the error does reach the disk); every later snapshot of the file
 * takes the lost pages' bytes from lostbase, and its length from the file. Each failed fsync is
 * logged to SHADOW/dropped as "dropped <inode> <pages> <path>". Directories are not modelled so
 * (their entries are journaled metadata: a failed directory fsync keeps its last listing).
 *
 * Snapshots are keyed by inode number, so an inode must not be reused while a listing may still
 * name it: before a regular file's last link goes (unlink, remove, or a rename over it), the
 * shim links it into SHADOW/grave, which keeps the inode allocated until the trial ends.
 *
 * What the model cannot vouch for is logged to SHADOW/unmodeled, one line each: a shared
 * writable memory map of a file in the tree (writes through it bypass write(2); msync would
 * need handling) and an O_SYNC/O_DSYNC open (its writes are durable without an fsync, which
 * the model would wrongly drop). A run whose log is not empty cannot vouch for its result.
 *
 * Environment: FAULTFS_ROOT (absolute path of the tree) and FAULTFS_SHADOW (absolute path of the
 * shadow store, on the same filesystem so that grave links work). Without them every call
 * passes straight through. Every snapshot is written under SHADOW/tmp and renamed into place,
 * so a SIGKILL at any moment leaves whole snapshots only; one mutex orders the snapshots of a
 * process, so a later fsync's snapshot is never replaced by an earlier one's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static char root[PATH_MAX];
static size_t root_len;
/* Short enough that every path built from it fits in PATH_MAX. */
#define SHADOW_MAX 1024
static char shadow[SHADOW_MAX];
static int active;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong counter;

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_remove)(const char *);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);

/* The page size of the failed-fsync model. */
#define PAGE 4096
/* The files whose pages a failed fsync dropped: per inode, one flag per page. */
struct lost {
    ino_t ino;
    size_t pages;
    unsigned char *flags;
};
static struct lost *lost_files;
static size_t lost_count;
/* lost_count, readable without the lock: most writes see 0 and skip the bookkeeping. */
static atomic_size_t lost_any;

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

static void init(void) {
    real_fsync = next("fsync");
    real_fdatasync = next("fdatasync");
    real_sync = next("sync");
    real_syncfs = next("syncfs");
    real_unlink = next("unlink");
    real_unlinkat = next("unlinkat");
    real_remove = next("remove");
    real_rename = next("rename");
    real_renameat = next("renameat");
    real_renameat2 = next("renameat2");
    real_open = next("open");
    real_open64 = next("open64");
    real_openat = next("openat");
    real_openat64 = next("openat64");
    real_mmap = next("mmap");
    real_mmap64 = next("mmap64");
    real_write = next("write");
    real_pwrite = next("pwrite");
    real_pwrite64 = next("pwrite64");
    real_writev = next("writev");
    real_pwritev = next("pwritev");
    real_pwritev64 = next("pwritev64");
    real_ftruncate = next("ftruncate");
    real_ftruncate64 = next("ftruncate64");
    const char *r = getenv("FAULTFS_ROOT");
    const char *s = getenv("FAULTFS_SHADOW");
    if (!r || !s || r[0] != '/' || s[0] != '/' || strlen(r) >= PATH_MAX ||
        strlen(s) >= SHADOW_MAX)
        return;
    strcpy(root, r);
    root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/') root[--root_len] = 0;
    strcpy(shadow, s);
    active = 1;
}

static void ensure_init(void) { pthread_once(&init_once, init); }

/* Marks the shim as loaded, so the caller can tell a working model from an inert one. */
__attribute__((constructor)) static void announce(void) {
    ensure_init();
    if (!active) return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/loaded", shadow);
    int fd = real_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dprintf(fd, "%d\n", (int)getpid());
        close(fd);
    }
}

static int under_root(const char *path) {
    return strncmp(path, root, root_len) == 0 && (path[root_len] == '/' || path[root_len] == 0);
}

/* The path an open descriptor refers to (as the kernel names it). */
static int fd_path(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, size - 1);
    if (n < 0) return -1;
    out[n] = 0;
    return 0;
}

/* `path` as an absolute path (relative ones resolved against `dirfd` or the working directory). */
static int absolute(int dirfd, const char *path, char *out, size_t size) {
    if (path[0] == '/') {
        if (strlen(path) >= size) return -1;
        strcpy(out, path);
        return 0;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return -1;
    } else if (fd_path(dirfd, base, sizeof base) < 0) {
        return -1;
    }
    if ((size_t)snprintf(out, size, "%s/%s", base, path) >= size) return -1;
    return 0;
}

static void log_unmodeled(const char *what, const char *path) {
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/unmodeled", shadow);
    int fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    dprintf(fd, "%s %s\n", what, path);
    close(fd);
}

/* A fresh name under SHADOW/tmp for a snapshot being written. */
static void temp_name(char *out, size_t size) {
    snprintf(out, size, "%s/tmp/%d-%ld-%lu", shadow, (int)getpid(), (long)syscall(SYS_gettid),
             atomic_fetch_add(&counter, 1));
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        /* The next write, not this shim's (which would look the shadow file up). */
        ssize_t n = real_write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The lost pages of `ino`, or NULL. Call with snapshot_lock held. */
static struct lost *find_lost(ino_t ino) {
    for (size_t i = 0; i < lost_count; i++)
        if (lost_files[i].ino == ino) return &lost_files[i];
    return NULL;
}

/* Puts back, in the snapshot being written to `out` (`len` bytes), the durable bytes of the
 * pages of `ino` a failed fsync dropped. Call with snapshot_lock held. */
static int restore_lost(int out, ino_t ino, off_t len) {
    struct lost *lost = find_lost(ino);
    if (!lost) return 0;
    char path[PATH_MAX], page[PAGE];
    snprintf(path, sizeof path, "%s/lostbase/%lu", shadow, (unsigned long)ino);
    int base = real_open(path, O_RDONLY | O_CLOEXEC);
    if (base < 0) return -1;
    int failed = 0;
    for (size_t p = 0; p < lost->pages && (off_t)(p * PAGE) < len; p++) {
        if (!lost->flags[p]) continue;
        off_t at = (off_t)(p * PAGE);
        size_t want = (size_t)(len - at) < PAGE ? (size_t)(len - at) : PAGE;
        memset(page, 0, sizeof page);
        if (pread(base, page, want, at) < 0 || real_pwrite(out, page, want, at) != (ssize_t)want)
            failed = 1;
    }
    close(base);
    return failed ? -1 : 0;
}

/* Reads up to `len` bytes at `at` of `fd` into `buf` (zeros past its end). */
static void read_page(int fd, char *buf, size_t len, off_t at) {
    memset(buf, 0, len);
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, at + (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
}

/* A failed fsync of the regular file open as `fd` (inode `ino`, at `path`): every page that
 * differs from its durable snapshot is lost (see the header). Call with snapshot_lock held. */
static void drop_dirty(int fd, ino_t ino, const char *path) {
    char src[64], durable_path[PATH_MAX], base_path[PATH_MAX], now[PAGE], then[PAGE];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    snprintf(durable_path, sizeof durable_path, "%s/files/%lu", shadow, (unsigned long)ino);
    snprintf(base_path, sizeof base_path, "%s/lostbase/%lu", shadow, (unsigned long)ino);
    int in = real_open(src, O_RDONLY | O_CLOEXEC);
    int durable = real_open(durable_path, O_RDONLY | O_CLOEXEC);
    int base = real_open(base_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (in < 0 || base < 0 || fstat(in, &st) < 0) {
        log_unmodeled("failed-fsync-unreadable", path);
        goto out;
    }
    size_t pages = ((size_t)st.st_size + PAGE - 1) / PAGE;
    struct lost *lost = find_lost(ino);
    if (!lost) {
        struct lost *grown = realloc(lost_files, (lost_count + 1) * sizeof *grown);
        if (!grown) goto fail;
        lost_files = grown;
        lost = &lost_files[lost_count++];
        *lost = (struct lost){ino, 0, NULL};
        atomic_store(&lost_any, lost_count);
    }
    if (pages > lost->pages) {
        unsigned char *flags = realloc(lost->flags, pages);
        if (!flags) goto fail;
        memset(flags + lost->pages, 0, pages - lost->pages);
        lost->flags = flags;
        lost->pages = pages;
    }
    size_t dropped = 0;
    for (size_t p = 0; p < pages; p++) {
        off_t at = (off_t)(p * PAGE);
        read_page(in, now, PAGE, at);
        if (durable >= 0) read_page(durable, then, PAGE, at);
        else memset(then, 0, PAGE);
        /* A page past the durable end is new even when it holds zeros. */
        struct stat dst;
        int beyond = durable < 0 || (fstat(durable, &dst) == 0 && at >= dst.st_size);
        if (!beyond && memcmp(now, then, PAGE) == 0) continue;
        dropped++;
        if (lost->flags[p]) continue; /* already lost: its durable bytes are kept */
        lost->flags[p] = 1;
        if (real_pwrite(base, then, PAGE, at) != PAGE) goto fail;
    }
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/dropped", shadow);
    int fd_log = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_log >= 0) {
        dprintf(fd_log, "dropped %lu %zu %s\n", (unsigned long)ino, dropped, path);
        close(fd_log);
    }
    goto out;
fail:
    log_unmodeled("failed-fsync-bookkeeping", path);
out:
    if (in >= 0) close(in);
    if (durable >= 0) close(durable);
    if (base >= 0) close(base);
}

/* Pages [from, to) of the file open as `fd` were written (or cut off) after a failed fsync
 * dropped some: they are dirty again and reach the disk with the next fsync. */
static void redirty(int fd, off_t from, off_t to) {
    struct stat st;
    if (to <= from || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) return;
    pthread_mutex_lock(&snapshot_lock);
    struct lost *lost = find_lost(st.st_ino);
    if (lost) {
        for (size_t p = (size_t)(from / PAGE); p < lost->pages && (off_t)(p * PAGE) < to; p++)
            lost->flags[p] = 0;
    }
    pthread_mutex_unlock(&snapshot_lock);
}

/* Copies the regular file open as `fd` to SHADOW/files/<inode>. */
static void snapshot_file(int fd, ino_t ino) {
    char src[64], tmp[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    int in = real_open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        log_unmodeled("unreadable-at-fsync", src);
        return;
    }
    temp_name(tmp, sizeof tmp);
    int out = real_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        log_unmodeled("shadow-write-failed", tmp);
        return;
    }
    char buf[1 << 16];
    off_t offset = 0;
    int failed = 0;
    for (;;) {
        ssize_t n = pread(in, buf, sizeof buf, offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) failed = 1;
        if (n <= 0) break;
        if (write_all(out, buf, (size_t)n) < 0) {
            failed = 1;
            break;
        }
        offset += n;
    }
    close(in);
    if (!failed && restore_lost(out, ino, offset) < 0) failed = 1;
    close(out);
    snprintf(dst, sizeof dst, "%s/files/%lu", shadow, (unsigned long)ino);
    if (failed || real_rename(tmp, dst) < 0) {
        real_unlink(tmp);
        log_unmodeled("shadow-write-failed", dst);
    }
}

/* Writes the listing of the directory open as `fd` to SHADOW/dirs/<inode>: one line per entry,
 * "<d|f|o> <inode> <name>" (d: directory, f: regular file, o: anything else). */
static void snapshot_dir(int fd, ino_t ino) {
    char src[64], tmp[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    int dfd = real_open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        log_unmodeled("unreadable-at-fsync", src);
        return;
    }
    DIR *dir = fdopendir(dfd);
    if (!dir) {
        close(dfd);
        return;
    }
    temp_name(tmp, sizeof tmp);
    FILE *out = fopen(tmp, "we");
    if (!out) {
        closedir(dir);
        log_unmodeled("shadow-write-failed", tmp);
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        const char *name = entry->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '\n')) continue;
        unsigned char type = entry->d_type;
        if (type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
        }
        char kind = type == DT_DIR ? 'd' : type == DT_REG ? 'f' : 'o';
        fprintf(out, "%c %lu %s\n", kind, (unsigned long)entry->d_ino, name);
    }
    closedir(dir);
    int failed = fclose(out) != 0;
    snprintf(dst, sizeof dst, "%s/dirs/%lu", shadow, (unsigned long)ino);
    if (failed || real_rename(tmp, dst) < 0) {
        real_unlink(tmp);
        log_unmodeled("shadow-write-failed", dst);
    }
}

/* Records what an fsync of `fd` made durable, when `fd` is in the tree. */
static void snapshot_fd(int fd) {
    char path[PATH_MAX];
    struct stat st;
    if (fd_path(fd, path, sizeof path) < 0 || !under_root(path) || fstat(fd, &st) < 0) return;
    pthread_mutex_lock(&snapshot_lock);
    if (S_ISREG(st.st_mode)) snapshot_file(fd, st.st_ino);
    else if (S_ISDIR(st.st_mode)) snapshot_dir(fd, st.st_ino);
    pthread_mutex_unlock(&snapshot_lock);
}

/* Snapshots every file and directory below the directory open as `dirfd` (sync, syncfs). */
static void snapshot_tree(int dirfd) {
    struct stat st;
    if (fstat(dirfd, &st) == 0) snapshot_dir(dirfd, st.st_ino);
    int copy = dup(dirfd);
    if (copy < 0) return;
    DIR *dir = fdopendir(copy);
    if (!dir) {
        close(copy);
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, "..")) continue;
        int child = real_openat(dirfd, entry->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (child < 0) continue;
        if (fstat(child, &st) == 0) {
            if (S_ISDIR(st.st_mode)) snapshot_tree(child);
            else if (S_ISREG(st.st_mode)) snapshot_file(child, st.st_ino);
        }
        close(child);
    }
    closedir(dir);
}

static void snapshot_root(void) {
    int fd = real_open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    pthread_mutex_lock(&snapshot_lock);
    snapshot_tree(fd);
    pthread_mutex_unlock(&snapshot_lock);
    close(fd);
}

/* Keeps the inode of a regular file in the tree allocated when its last link is about to go. */
static void pin(int dirfd, const char *path) {
    char full[PATH_MAX], grave[PATH_MAX];
    struct stat st;
    if (!path || absolute(dirfd, path, full, sizeof full) < 0 || !under_root(full)) return;
    if (lstat(full, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) return;
    snprintf(grave, sizeof grave, "%s/grave/%d-%lu", shadow, (int)getpid(),
             atomic_fetch_add(&counter, 1));
    if (link(full, grave) < 0) log_unmodeled("pin-failed", full);
}

/* After a failed fsync of `fd`: drops its dirty pages when it is a regular file in the tree. */
static void fsync_failed(int fd) {
    int saved = errno;
    char path[PATH_MAX];
    struct stat st;
    if (fd_path(fd, path, sizeof path) == 0 && under_root(path) && fstat(fd, &st) == 0 &&
        S_ISREG(st.st_mode)) {
        pthread_mutex_lock(&snapshot_lock);
        drop_dirty(fd, st.st_ino, path);
        pthread_mutex_unlock(&snapshot_lock);
    }
    errno = saved;
}

int fsync(int fd) {
    ensure_init();
    int result = real_fsync(fd);
    if (active && result == 0) snapshot_fd(fd);
    else if (active) fsync_failed(fd);
    return result;
}

int fdatasync(int fd) {
    ensure_init();
    int result = real_fdatasync(fd);
    if (active && result == 0) snapshot_fd(fd);
    else if (active) fsync_failed(fd);
    return result;
}

/* Where a write(2) or writev(2) on `fd` is about to land, when lost pages are being tracked. */
static off_t write_offset(int fd) {
    if (!active || atomic_load(&lost_any) == 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : -1;
    }
    return lseek(fd, 0, SEEK_CUR);
}

/* After a write of `n` bytes at `at` (`at` < 0: not tracked). */
static void wrote(int fd, off_t at, ssize_t n) {
    int saved = errno;
    if (at >= 0 && n > 0 && active && atomic_load(&lost_any) != 0) redirty(fd, at, at + n);
    errno = saved;
}

ssize_t write(int fd, const void *buf, size_t len) {
    ensure_init();
    off_t at = write_offset(fd);
    ssize_t n = real_write(fd, buf, len);
    wrote(fd, at, n);
    return n;
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t offset) {
    ensure_init();
    ssize_t n = real_pwrite(fd, buf, len, offset);
    wrote(fd, offset, n);
    return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t offset) {
    ensure_init();
    ssize_t n = real_pwrite64(fd, buf, len, offset);
    wrote(fd, offset, n);
    return n;
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    ensure_init();
    off_t at = write_offset(fd);
    ssize_t n = real_writev(fd, iov, count);
    wrote(fd, at, n);
    return n;
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    ensure_init();
    ssize_t n = real_pwritev(fd, iov, count, offset);
    wrote(fd, offset, n);
    return n;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    ensure_init();
    ssize_t n = real_pwritev64(fd, iov, count, offset);
    wrote(fd, offset, n);
    return n;
}

/* A truncation cuts lost pages off (from the page holding the new end on): whatever the file
 * holds there later is written anew. */
static void truncated(int fd, off_t length, int result) {
    int saved = errno;
    if (result == 0 && active && atomic_load(&lost_any) != 0)
        redirty(fd, length / PAGE * PAGE, (off_t)1 << 62);
    errno = saved;
}

int ftruncate(int fd, off_t length) {
    ensure_init();
    int result = real_ftruncate(fd, length);
    truncated(fd, length, result);
    return result;
}

int ftruncate64(int fd, off_t length) {
    ensure_init();
    int result = real_ftruncate64(fd, length);
    truncated(fd, length, result);
    return result;
}

void sync(void) {
    ensure_init();
    real_sync();
    if (active) snapshot_root();
}

int syncfs(int fd) {
    ensure_init();
    int result = real_syncfs(fd);
    if (active && result == 0) snapshot_root();
    return result;
}

int unlink(const char *path) {
    ensure_init();
    if (active) pin(AT_FDCWD, path);
    return real_unlink(path);
}

int unlinkat(int dirfd, const char *path, int flags) {
    ensure_init();
    if (active && !(flags & AT_REMOVEDIR)) pin(dirfd, path);
    return real_unlinkat(dirfd, path, flags);
}

int remove(const char *path) {
    ensure_init();
    if (active) pin(AT_FDCWD, path);
    return real_remove(path);
}

int rename(const char *from, const char *to) {
    ensure_init();
    if (active) pin(AT_FDCWD, to);
    return real_rename(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    ensure_init();
    if (active) pin(tofd, to);
    return real_renameat(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    ensure_init();
    /* RENAME_EXCHANGE (2) frees no inode. */
    if (active && !(flags & 2)) pin(tofd, to);
    return real_renameat2(fromfd, from, tofd, to, flags);
}

static void check_open(int dirfd, const char *path, int flags) {
    char full[PATH_MAX];
    if (!active || !(flags & (O_SYNC | O_DSYNC))) return;
    if (absolute(dirfd, path, full, sizeof full) == 0 && under_root(full))
        log_unmodeled("synchronous-open", full);
}

/* The mode argument is only there with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, mode)                                                                      \
    mode_t mode = 0;                                                                               \
    if ((flags) & (O_CREAT | __O_TMPFILE)) {                                                       \
        va_list args;                                                                              \
        va_start(args, flags);                                                                     \
        mode = (mode_t)va_arg(args, int);                                                          \
        va_end(args);                                                                              \
    }

int open(const char *path, int flags, ...) {
    ensure_init();
    MODE_ARG(flags, mode);
    check_open(AT_FDCWD, path, flags);
    return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    ensure_init();
    MODE_ARG(flags, mode);
    check_open(AT_FDCWD, path, flags);
    return real_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    ensure_init();
    MODE_ARG(flags, mode);
    check_open(dirfd, path, flags);
    return real_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    ensure_init();
    MODE_ARG(flags, mode);
    check_open(dirfd, path, flags);
    return real_openat64(dirfd, path, flags, mode);
}

static void check_map(int prot, int flags, int fd) {
    char path[PATH_MAX];
    if (!active || fd < 0 || !(prot & PROT_WRITE) || !(flags & MAP_SHARED)) return;
    if (fd_path(fd, path, sizeof path) == 0 && under_root(path))
        log_unmodeled("shared-writable-map", path);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    ensure_init();
    check_map(prot, flags, fd);
    return real_mmap(addr, len, prot, flags, fd, offset);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    ensure_init();
    check_map(prot, flags, fd);
    return real_mmap64(addr, len, prot, flags, fd, offset);
}

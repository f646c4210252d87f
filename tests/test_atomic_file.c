/* Files written whole or not at all (src/io/atomic_file.h, mpmd_file_* of
 * include/mpmd.h):
 *
 * - two threads of one process (the same pid, as two containers' processes
 *   may have) save checkpoints to one path at once, many times, while a
 *   third reads it: every save succeeds, every file the path shows at any
 *   moment is complete (its checksums hold, it loads, its values are one
 *   save's), and no temporary file stays behind;
 * - mpmd_file_*: a committed file replaces the old one; a discarded or
 *   failed one (the file-size limit makes a write fail, as a full disk
 *   does) leaves it as it was, with no temporary file; a symbolic link
 *   stays a link to the new contents; a pipe (like a device) is written in
 *   place, never replaced by a rename;
 * - a checkpoint is never renamed over a pipe or a device: it is refused.
 */
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static char dir[256];

/* Entries of dir whose name contains ".tmp." */
static int count_tmp(void) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += has(e->d_name, ".tmp.");
    closedir(d);
    return n;
}

/* ---- two writers, one path ------------------------------------------------ */

#define ROWS 64
#define COLS 256

typedef struct model {
    mpmd_graph *g;
    mpmd_exec *ex;
    mpmd_value w;
} model;

static model model_new(void) {
    model m;
    m.g = mpmd_graph_new();
    mpmd_value x = mpmd_input(m.g, "x", MPMD_F32, MPMD_SHAPE(1, ROWS));
    m.w = mpmd_param(m.g, "w", MPMD_SHAPE(ROWS, COLS), MPMD_ZEROS);
    mpmd_keep(m.g, mpmd_matmul(m.g, x, m.w, 0));
    m.ex = tu_exec(m.g, 1);
    return m;
}

static void model_free(model *m) {
    mpmd_exec_free(m->ex);
    mpmd_graph_free(m->g);
}

typedef struct writer {
    model m;
    int id, saves, failed;
    char msg[MPMD_ERROR_MSG_MAX + 32];
} writer;

static char shared_path[512];
static atomic_int writers_left;

/* Each save's parameter holds one value everywhere, unique to (writer,
 * save): a file mixing two saves' bytes shows two values. */
static void *write_loop(void *arg) {
    writer *w = arg;
    float *data = mpmd_exec_var_data(w->m.ex, w->m.w);
    for (int i = 0; i < w->saves && !w->failed; i++) {
        float v = (float)(w->id * 100000 + i + 1);
        for (int k = 0; k < ROWS * COLS; k++)
            data[k] = v;
        mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
        info.step = i;
        mpmd_error err;
        if (mpmd_exec_save(w->m.ex, shared_path, &info, &err) != MPMD_OK) {
            w->failed = 1;
            snprintf(w->msg, sizeof w->msg, "save %d: %s", i, err.msg);
        }
    }
    atomic_fetch_sub(&writers_left, 1);
    return NULL;
}

typedef struct reader {
    model m;
    int reads, failed;
    char msg[MPMD_ERROR_MSG_MAX + 64];
} reader;

/* Check what the path holds, again and again, until the writers are done. */
static void *read_loop(void *arg) {
    reader *r = arg;
    float *data = mpmd_exec_var_data(r->m.ex, r->m.w);
    while (atomic_load(&writers_left) > 0 && !r->failed) {
        mpmd_error err;
        if (access(shared_path, F_OK) != 0) continue; /* no save has finished yet */
        if (mpmd_checkpoint_verify(shared_path, NULL, &err) != MPMD_OK) {
            r->failed = 1;
            snprintf(r->msg, sizeof r->msg, "verify: %s", err.msg);
            break;
        }
        if (mpmd_exec_load(r->m.ex, shared_path, NULL, &err) != MPMD_OK) {
            r->failed = 1;
            snprintf(r->msg, sizeof r->msg, "load: %s", err.msg);
            break;
        }
        for (int k = 1; k < ROWS * COLS; k++)
            if (data[k] != data[0]) {
                r->failed = 1;
                snprintf(r->msg, sizeof r->msg, "element %d is %g, element 0 %g: two saves mixed", k, data[k],
                         data[0]);
                break;
            }
        r->reads++;
    }
    return NULL;
}

static void two_writers(void) {
    snprintf(shared_path, sizeof shared_path, "%s/shared.safetensors", dir);
    const int saves = tu_quick() ? 40 : 150;
    writer w[2];
    reader r;
    memset(w, 0, sizeof w);
    memset(&r, 0, sizeof r);
    for (int t = 0; t < 2; t++)
        w[t].m = model_new(), w[t].id = t + 1, w[t].saves = saves;
    r.m = model_new();
    atomic_store(&writers_left, 2);
    pthread_t th[3];
    for (int t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, write_loop, &w[t]);
    pthread_create(&th[2], NULL, read_loop, &r);
    for (int t = 0; t < 3; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        CHECK(!w[t].failed, "writer %d: %s", w[t].id, w[t].msg);
    CHECK(!r.failed, "reader, after %d good reads: %s", r.reads, r.msg);
    /* the last file is one writer's last save */
    mpmd_error err;
    CHECK(mpmd_exec_load(r.m.ex, shared_path, NULL, &err) == MPMD_OK, "%s", err.msg);
    float last = ((float *)mpmd_exec_var_data(r.m.ex, r.m.w))[0];
    CHECK(last == (float)(100000 + saves) || last == (float)(200000 + saves), "the path holds %g", last);
    CHECK(count_tmp() == 0, "%d temporary files left behind", count_tmp());
    printf("test_atomic_file: 2 x %d saves to one path, %d complete reads while they ran\n", saves, r.reads);
    for (int t = 0; t < 2; t++)
        model_free(&w[t].m);
    model_free(&r.m);
}

/* ---- mpmd_file_* -------------------------------------------------------------- */

static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return (int)n;
}

static mpmd_status write_text(const char *path, const char *text, size_t repeat, mpmd_error *err) {
    mpmd_file *file;
    mpmd_status rc = mpmd_file_create(path, &file, err);
    if (rc) return rc;
    for (size_t i = 0; i < repeat; i++)
        fputs(text, mpmd_file_stream(file));
    return mpmd_file_commit(file, err);
}

static void files(void) {
    char path[512], link[600], buf[256];
    mpmd_error err;
    snprintf(path, sizeof path, "%s/out.txt", dir);
    CHECK(write_text(path, "first\n", 1, &err) == MPMD_OK, "%s", err.msg);
    CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "first\n"), "first write: '%s'", buf);
    CHECK(write_text(path, "second\n", 1, &err) == MPMD_OK, "%s", err.msg);
    CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "second\n"), "second write: '%s'", buf);

    /* discarded: the old file stays */
    mpmd_file *file;
    CHECK(mpmd_file_create(path, &file, &err) == MPMD_OK, "%s", err.msg);
    fputs("never\n", mpmd_file_stream(file));
    mpmd_file_discard(file);
    CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "second\n"), "after a discard: '%s'", buf);
    CHECK(count_tmp() == 0, "a discarded file left its temporary file");

    /* a write that fails half way (the file-size limit, as a full disk) */
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 1000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    mpmd_status rc = write_text(path, "0123456789abcdef\n", 1000, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(rc == MPMD_ERR_IO && has(err.msg, "cannot write") && has(err.msg, path) &&
              has(err.msg, "was left as it was"),
          "a write over the size limit: %s", rc ? err.msg : "committed");
    CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "second\n"), "after a failed write: '%s'",
          buf);
    CHECK(count_tmp() == 0, "a failed write left its temporary file");

    /* a missing directory */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none/out.txt", dir);
    CHECK(mpmd_file_create(missing, &file, &err) == MPMD_ERR_IO && has(err.msg, missing),
          "missing directory: %s", err.msg);

    /* a link keeps being a link, to the new contents */
    snprintf(link, sizeof link, "%s/link.txt", dir);
    CHECK(symlink(path, link) == 0, "symlink: %s", strerror(errno));
    CHECK(write_text(link, "third\n", 1, &err) == MPMD_OK, "%s", err.msg);
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced by a file");
    CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "third\n"), "through the link: '%s'", buf);
    CHECK(count_tmp() == 0, "a write through a link left a temporary file");
    /* a link to a directory: refused like the directory, the link kept */
    char sub[600], dlink[600];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(dlink, sizeof dlink, "%s/dirlink", dir);
    CHECK(mkdir(sub, 0755) == 0 && symlink(sub, dlink) == 0, "mkdir, symlink: %s", strerror(errno));
    rc = write_text(dlink, "x\n", 1, &err);
    CHECK(rc == MPMD_ERR_IO && has(err.msg, "renaming"), "a link to a directory: %s",
          rc ? err.msg : "written");
    CHECK(lstat(dlink, &sb) == 0 && S_ISLNK(sb.st_mode) && stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode),
          "a link to a directory was replaced");
    CHECK(count_tmp() == 0, "a temporary file left beside the directory");
    unlink(dlink);
    rmdir(sub);

    /* a pipe (as a device: /dev/stdout) is written in place, never renamed
     * over; a checkpoint, which must seek, refuses it. A pipe of its own
     * stands in for the devices, so that no mistake here can replace a
     * device of the machine. */
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    int rd = open(fifo, O_RDWR | O_NONBLOCK); /* a reader, so that opening for writing does not wait */
    CHECK(rd >= 0, "open %s: %s", fifo, strerror(errno));
    CHECK(write_text(fifo, "through the pipe\n", 1, &err) == MPMD_OK, "a pipe: %s", err.msg);
    ssize_t got = rd >= 0 ? read(rd, buf, sizeof buf - 1) : -1;
    buf[got > 0 ? got : 0] = '\0';
    CHECK(!strcmp(buf, "through the pipe\n"), "read from the pipe: '%s'", buf);
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the pipe was replaced");
    model m = model_new();
    rc = mpmd_exec_save(m.ex, fifo, NULL, &err);
    CHECK(rc == MPMD_ERR_IO && has(err.msg, "not a regular file"), "a checkpoint to a pipe: %s",
          rc ? err.msg : "saved");
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "a checkpoint replaced the pipe");
    CHECK(count_tmp() == 0, "a temporary file left beside the pipe");
    model_free(&m);
    if (rd >= 0) close(rd);
    unlink(fifo);

    CHECK(mpmd_file_create(path, NULL, &err) == MPMD_ERR_INVALID, "out NULL accepted");
    CHECK(mpmd_file_commit(NULL, &err) == MPMD_ERR_INVALID, "commit of NULL accepted");
    CHECK(mpmd_file_stream(NULL) == NULL, "a stream of no file");
    mpmd_file_discard(NULL);
    unlink(link);
    unlink(path);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mpmd_atomic_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    two_writers();
    files();
    DIR *d = opendir(dir); /* whatever a failure left */
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    return tu_report("test_atomic_file");
}

/*
 * Daemons in PID namespaces of their own (see harness_pidns.h). The daemon
 * is found from the outside by scanning /proc for the child of the unshare
 * process whose executable is the daemon's binary: /proc/PID/task/TID/children
 * is not available on every kernel, and a scan of a test machine's /proc is
 * cheap.
 */
#include "tests/e2e/harness_pidns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define H_PIDNS_MAX_ARGS 32

/* unshare from util-linux, where Debian puts it. */
static const char *h_pidns_unshare_path(void)
{
    static const char *const paths[] = {"/usr/bin/unshare", "/bin/unshare"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

static uint64_t h_pidns_inode_of(const char *ns_path)
{
    struct stat st;
    if (stat(ns_path, &st) != 0)
        return 0;
    return (uint64_t)st.st_ino;
}

uint64_t h_pidns_self(void)
{
    return h_pidns_inode_of("/proc/self/ns/pid");
}

/* The parent pid (field 4) of pid from /proc/PID/stat, or -1. */
static pid_t h_pidns_ppid(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may hold spaces and ')': fields start after the last ')'. */
    const char *p = strrchr(buf, ')');
    int ppid = -1;
    if (p == NULL || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

/* The child of parent whose executable is exe (a real path), or 0. */
static pid_t h_pidns_find_child(pid_t parent, const char *exe)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    pid_t found = 0;
    struct dirent *e;
    while (found == 0 && (e = readdir(d)) != NULL) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid <= 0)
            continue;
        if (h_pidns_ppid((pid_t)pid) != parent)
            continue;
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/%ld/exe", pid);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strcmp(target, exe) == 0)
            found = (pid_t)pid;
    }
    closedir(d);
    return found;
}

int h_pidns_probe(char *why, size_t why_len)
{
    const char *unshare = h_pidns_unshare_path();
    if (unshare == NULL) {
        snprintf(why, why_len, "unshare (util-linux) is not installed");
        return -ENOENT;
    }
    const char *argv[] = {unshare,        "--pid", "--fork",    "--mount-proc",
                          "--kill-child", "--",    "/bin/true", NULL};
    struct h_proc *p = NULL;
    int rc = h_spawn("unshare-probe", argv, &p);
    if (rc != 0) {
        snprintf(why, why_len, "cannot run %s: %s", unshare, strerror(-rc));
        return rc;
    }
    int status = 0;
    if (h_proc_wait(p, H_READY_TIMEOUT_MS, &status) != 0) {
        snprintf(why, why_len, "unshare --pid --fork --mount-proc /bin/true did not finish");
        return -ETIMEDOUT;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        /* Typically EPERM: no CAP_SYS_ADMIN and no user namespace (an
         * unprivileged container or a seccomp profile refusing unshare).
         * unshare's own words are in its log, which teardown removes. */
        char said[160] = "";
        FILE *f = fopen(p->log_path, "r");
        if (f != NULL) {
            if (fgets(said, sizeof(said), f) == NULL)
                said[0] = '\0';
            fclose(f);
        }
        said[strcspn(said, "\n")] = '\0';
        snprintf(why, why_len,
                 "unshare --pid --fork --mount-proc /bin/true failed (status 0x%x: %s): creating "
                 "PID and mount namespaces is not permitted here (needs root or CAP_SYS_ADMIN, "
                 "and no seccomp filter on unshare)",
                 (unsigned)status, said);
        return -EPERM;
    }
    return 0;
}

struct h_pidns_wait {
    struct h_pidns_proc *p;
    const char *exe;
    uint64_t self_ns;
};

static bool h_pidns_inner_ready(void *arg)
{
    struct h_pidns_wait *w = arg;
    if (!h_proc_is_running(w->p->outer))
        return true; /* the caller reports it */
    pid_t inner = h_pidns_find_child(w->p->outer->pid, w->exe);
    if (inner <= 0)
        return false;
    char ns[64];
    snprintf(ns, sizeof(ns), "/proc/%d/ns/pid", (int)inner);
    uint64_t ino = h_pidns_inode_of(ns);
    if (ino == 0 || ino == w->self_ns)
        return false;
    w->p->inner = inner;
    w->p->ns_inode = ino;
    return true;
}

int h_pidns_spawn(const char *name, const char *const argv[], struct h_pidns_proc *out)
{
    memset(out, 0, sizeof(*out));
    const char *unshare = h_pidns_unshare_path();
    if (unshare == NULL)
        return -ENOENT;
    char exe[PATH_MAX];
    if (realpath(argv[0], exe) == NULL)
        return -errno;
    const char *full[H_PIDNS_MAX_ARGS + 1];
    size_t n = 0;
    full[n++] = unshare;
    full[n++] = "--pid";
    full[n++] = "--fork";
    full[n++] = "--mount-proc";
    full[n++] = "--kill-child";
    full[n++] = "--";
    for (size_t i = 0; argv[i] != NULL; i++) {
        if (n == H_PIDNS_MAX_ARGS)
            return -E2BIG;
        full[n++] = argv[i];
    }
    full[n] = NULL;
    int rc = h_spawn(name, full, &out->outer);
    if (rc != 0)
        return rc;
    struct h_pidns_wait w = {.p = out, .exe = exe, .self_ns = h_pidns_self()};
    rc = h_wait_until(h_pidns_inner_ready, &w, H_READY_TIMEOUT_MS);
    if (rc == 0 && out->inner <= 0)
        rc = -ECHILD; /* unshare exited first */
    if (rc == 0)
        out->outer->term_pid = out->inner; /* a failed test's teardown stops the daemon */
    if (rc != 0)
        fprintf(stderr, "harness: %s under unshare did not start (%s)\n", name, strerror(-rc));
    return rc;
}

static int h_pidns_start_daemon(const char *name, const char *config_path, struct h_pidns_proc *out)
{
    char base[H_NAME_MAX], bin[H_PATH_MAX];
    snprintf(base, sizeof(base), "switchyard-%s", name);
    int rc = h_bin_path(base, bin, sizeof(bin));
    if (rc != 0)
        return rc;
    const char *argv[] = {bin, "--config", config_path, NULL};
    return h_pidns_spawn(name, argv, out);
}

int h_pidns_start_controlplane(const char *config_path, struct h_pidns_proc *out)
{
    return h_pidns_start_daemon("controlplane", config_path, out);
}

int h_pidns_start_dataplane(const char *config_path, struct h_pidns_proc *out)
{
    return h_pidns_start_daemon("dataplane", config_path, out);
}

int h_pidns_signal(struct h_pidns_proc *p, int sig)
{
    if (p->outer == NULL || p->inner <= 0)
        return -ESRCH;
    if (sig != SIGSTOP && sig != SIGCONT)
        p->outer->expected = true;
    if (!h_proc_is_running(p->outer))
        return -ESRCH;
    return kill(p->inner, sig) == 0 ? 0 : -errno;
}

int h_pidns_stop(struct h_pidns_proc *p, int timeout_ms)
{
    if (p->outer == NULL)
        return 0;
    p->outer->expected = true;
    if (!h_proc_is_running(p->outer))
        return 0;
    if (p->inner > 0)
        kill(p->inner, SIGTERM);
    if (h_proc_wait(p->outer, timeout_ms, NULL) == 0)
        return 0;
    /* unshare blocks SIGTERM; SIGKILL it and --kill-child takes the daemon. */
    if (p->inner > 0)
        kill(p->inner, SIGKILL);
    h_proc_stop(p->outer, 100);
    return -ETIMEDOUT;
}

/*
 * Process identity from /proc (see proc.h). Reads are small and bounded; no
 * allocation, safe from any thread.
 */
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * Reads the state letter (field 3) and start time (field 22) of pid.
 * -ENOENT or -ESRCH mean the process is gone; any other error (-EMFILE when
 * the descriptor limit is reached, -EACCES, -ENOMEM, -EIO for a line we
 * cannot parse) says nothing about it.
 */
static int proc_read_stat(pid_t pid, char *out_state, uint64_t *out_ticks)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int read_errno = errno;
    close(fd);
    /* A process that exits between open and read answers ESRCH. */
    if (n < 0)
        return read_errno == ESRCH ? -ESRCH : -EIO;
    if (n == 0)
        return -EIO;
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces and ')': skip to the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -EIO;
    p++;
    if (p[0] != ' ' || p[1] == '\0')
        return -EIO;
    *out_state = p[1];
    /* Fields after ')' start at field 3; the start time is field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return -EIO;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long ticks = strtoull(p + 1, &end, 10);
    if (errno != 0 || end == p + 1)
        return -EIO;
    *out_ticks = ticks;
    return 0;
}

int proc_start_time(pid_t pid, uint64_t *out_ticks)
{
    char state = 0;
    return proc_read_stat(pid, &state, out_ticks);
}

uint64_t proc_boot_ticks_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    uint64_t hz = (uint64_t)sysconf(_SC_CLK_TCK);
    return (uint64_t)ts.tv_sec * hz + (uint64_t)ts.tv_nsec / (1000000000u / hz);
}

int proc_pid_namespace(uint64_t *out_inode)
{
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0)
        return -errno;
    *out_inode = (uint64_t)st.st_ino;
    return 0;
}

int proc_pid_identity(pid_t pid, uint64_t *ns_inode, pid_t *pid_in_ns)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    char line[256];
    long inner = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        /* One pid per nested namespace, outermost first: keep the last. */
        char *p = line + 6;
        char *end = NULL;
        for (;;) {
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno != 0)
                break;
            inner = v;
            p = end;
        }
        break;
    }
    fclose(f);
    if (inner <= 0)
        return -EIO;
    *ns_inode = (uint64_t)st.st_ino;
    *pid_in_ns = (pid_t)inner;
    return 0;
}

bool proc_is_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    uint64_t now_start = 0;
    char state = 0;
    int rc = proc_read_stat(pid, &state, &now_start);
    if (rc == -ENOENT || rc == -ESRCH)
        return false;
    /* Anything else (out of descriptors above all) is "unknown": reaping a
     * live dataplane would drop its requests, so unknown counts as alive and
     * the heartbeat stays the judge. */
    if (rc != 0)
        return true;
    /* A zombie has exited; only its parent has not collected it yet. */
    if (state == 'Z' || state == 'X')
        return false;
    return now_start == start_time;
}

static uint64_t proc_rlim_u64(rlim_t v)
{
    return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t)v;
}

int proc_raise_fd_limit(uint64_t *before, uint64_t *after)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    if (before != NULL)
        *before = proc_rlim_u64(rl.rlim_cur);
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return -errno;
    }
    if (after != NULL)
        *after = proc_rlim_u64(rl.rlim_cur);
    return 0;
}

uint64_t proc_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return UINT64_MAX;
    return proc_rlim_u64(rl.rlim_cur);
}

uint64_t proc_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t proc_monotonic_ms(void)
{
    return proc_monotonic_ns() / 1000000u;
}

uint64_t proc_wall_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

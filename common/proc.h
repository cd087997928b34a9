/*
 * Facts about processes that lease liveness needs. A pid alone is not an
 * identity (pids are recycled), so a process is named by (pid, start time):
 * the start time is field 22 of /proc/PID/stat, in clock ticks since boot.
 * Pids are only comparable inside one PID namespace, so the namespace's
 * inode number travels with them.
 */
#ifndef SY_COMMON_PROC_H
#define SY_COMMON_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Start time of pid in clock ticks since boot. 0, -ENOENT or -ESRCH (no such
 * process), or another negative errno (-EMFILE, -EACCES, -EIO...) when /proc
 * could not be read. */
int proc_start_time(pid_t pid, uint64_t *out_ticks);
/* Now, in the unit and from the origin of proc_start_time: clock ticks
 * since boot (CLOCK_BOOTTIME, as the kernel counts a process's start). */
uint64_t proc_boot_ticks_now(void);

/* Inode number of this process's PID namespace (/proc/self/ns/pid). */
int proc_pid_namespace(uint64_t *out_inode);

/*
 * Who pid (as numbered in our PID namespace) is in its own namespace: the
 * inode of its PID namespace and its pid there (the last NSpid entry of
 * /proc/PID/status). Lets a peer's SO_PEERCRED pid be compared with a pid
 * it recorded itself from inside a container. 0 or a negative errno.
 */
int proc_pid_identity(pid_t pid, uint64_t *ns_inode, pid_t *pid_in_ns);

/*
 * True unless we can prove the process (pid, start_time) is gone: no such
 * pid (ESRCH from kill, ENOENT/ESRCH from /proc), a zombie, or a pid whose
 * start time differs (recycled). A /proc read that fails for any other
 * reason (EMFILE at the descriptor limit above all) proves nothing and
 * answers true. Only meaningful when the pid was recorded in our own PID
 * namespace.
 */
bool proc_is_alive(pid_t pid, uint64_t start_time);

/*
 * Raises this process's soft descriptor limit (RLIMIT_NOFILE) to its hard
 * limit, so that a low inherited soft limit cannot starve a daemon. Fills
 * the limits before and after (either pointer may be NULL). 0 or -errno.
 */
int proc_raise_fd_limit(uint64_t *before, uint64_t *after);

/* The soft descriptor limit in force (RLIM_INFINITY as UINT64_MAX). */
uint64_t proc_fd_limit(void);

/* Monotonic clock in nanoseconds and milliseconds. */
uint64_t proc_monotonic_ns(void);
uint64_t proc_monotonic_ms(void);

/* Wall clock (CLOCK_REALTIME) in ms since the epoch: for stamps that two
 * processes of one node compare (a load report's age). */
uint64_t proc_wall_ms(void);

#endif

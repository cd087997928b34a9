/*
 * File descriptors that turn signals and timers into epoll events, so each
 * daemon's loop waits in exactly one epoll_wait and never runs code in a
 * signal handler.
 */
#ifndef SY_COMMON_EVFD_H
#define SY_COMMON_EVFD_H

#include <stdint.h>

/*
 * Blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 in the calling thread (call before
 * starting threads so they inherit the mask), ignores SIGPIPE, and returns a
 * signalfd that becomes readable when one arrives, or a negative errno.
 */
int evfd_signals_open(void);

/* Reads one pending signal from a signalfd: its number, or 0 if none. */
int evfd_signals_read(int fd);

/* A CLOCK_MONOTONIC timerfd firing every period_ms (first after period_ms). */
int evfd_timer_open(uint64_t period_ms);

/* Re-arms a timerfd to fire once after delay_ms (0 disarms). */
int evfd_timer_arm_once(int fd, uint64_t delay_ms);

/* Consumes a timerfd's expirations; returns how many (0 if none). */
uint64_t evfd_timer_read(int fd);

#endif

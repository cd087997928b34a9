/*
 * signalfd / timerfd helpers (see evfd.h). All descriptors are non-blocking
 * and close-on-exec.
 */
#include "common/evfd.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

int evfd_signals_open(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1); /* the data plane reopens its access log */
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -errno;
    /* A peer that goes away must surface as EPIPE on that socket, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int evfd_signals_read(int fd)
{
    struct signalfd_siginfo si;
    ssize_t n = read(fd, &si, sizeof(si));
    return n == (ssize_t)sizeof(si) ? (int)si.ssi_signo : 0;
}

static struct timespec evfd_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    return ts;
}

int evfd_timer_open(uint64_t period_ms)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct itimerspec its = {.it_interval = evfd_ms(period_ms), .it_value = evfd_ms(period_ms)};
    if (period_ms > 0 && timerfd_settime(fd, 0, &its, NULL) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int evfd_timer_arm_once(int fd, uint64_t delay_ms)
{
    struct itimerspec its = {.it_value = evfd_ms(delay_ms)};
    return timerfd_settime(fd, 0, &its, NULL) == 0 ? 0 : -errno;
}

uint64_t evfd_timer_read(int fd)
{
    uint64_t expirations = 0;
    ssize_t n = read(fd, &expirations, sizeof(expirations));
    return n == (ssize_t)sizeof(expirations) ? expirations : 0;
}

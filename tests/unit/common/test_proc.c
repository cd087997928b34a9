/*
 * Unit tests of process identity (common/proc.c), above all the rule that
 * lease reaping rests on: only proof that a process is gone (no such pid, a
 * recycled pid, a zombie) makes it dead; a /proc read that fails for another
 * reason, such as running out of descriptors, leaves it alive. A control
 * plane at its descriptor limit once reaped a live data plane's lease that
 * way and made it exit with requests in flight.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"

static void test_self_is_alive(void **state)
{
    (void)state;
    uint64_t start = 0;
    assert_int_equal(proc_start_time(getpid(), &start), 0);
    assert_true(start > 0);
    assert_true(proc_is_alive(getpid(), start));
    /* A different start time is a recycled pid: another process. */
    assert_false(proc_is_alive(getpid(), start + 1));
}

static void test_reaped_child_is_dead(void **state)
{
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    uint64_t start = 0;
    int rc = proc_start_time(child, &start);
    assert_true(rc == 0);
    /* Wait for the exit without collecting it: the child is a zombie now. */
    siginfo_t info;
    assert_int_equal(waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT), 0);
    assert_false(proc_is_alive(child, start)); /* a zombie has exited */
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_false(proc_is_alive(child, start)); /* collected: no such pid */
    assert_true(proc_start_time(child, &start) == -ENOENT ||
                proc_start_time(child, &start) == -ESRCH);
}

/* Fills the descriptor table so that /proc/PID/stat cannot be opened. */
static void test_out_of_descriptors_is_not_dead(void **state)
{
    (void)state;
    uint64_t start = 0;
    assert_int_equal(proc_start_time(getpid(), &start), 0);

    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit low = {.rlim_cur = 64, .rlim_max = old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fds[64];
    int n = 0;
    for (; n < 64; n++) {
        fds[n] = dup(0);
        if (fds[n] < 0)
            break;
    }
    assert_int_equal(errno, EMFILE);

    uint64_t ignored = 0;
    int rc = proc_start_time(getpid(), &ignored);
    bool alive = proc_is_alive(getpid(), start);

    for (int i = 0; i < n; i++)
        close(fds[i]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);

    assert_int_equal(rc, -EMFILE);
    assert_true(alive);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_is_alive),
        cmocka_unit_test(test_reaped_child_is_dead),
        cmocka_unit_test(test_out_of_descriptors_is_not_dead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

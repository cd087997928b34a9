/*
 * The forked lease holder (see harness_holder.h).
 */
#include "tests/e2e/harness_holder.h"

#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "dataplane/lifecycle/admin_client.h"
#include "shm/lease.h"
#include "shm/load.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"

static uint64_t h_holder_answer(void *arg, uint32_t slot, uint32_t generation)
{
    (void)slot;
    (void)generation;
    return *(const uint64_t *)arg;
}

static void h_holder_main(const struct h_holder_spec *s, int ready_wr, int cmd_rd)
{
    struct shm_segment seg;
    struct shm_lease_handle lease;
    char err[256];
    if (shm_segment_attach(&seg, s->shm, err, sizeof(err)) != 0 ||
        shm_lease_claim(&seg, &lease, err, sizeof(err)) != 0)
        _exit(10);
    struct shm_load_guard g[64];
    int ng = 0;
    for (int k = 0; k < s->guards && ng < 64; k++)
        if (shm_load_acquire(&seg, lease.index, s->slot, s->generation, &g[ng++]) != 0)
            _exit(11);
    for (size_t m = 0; m < s->n_more; m++)
        for (int k = 0; k < s->more[m].guards && ng < 64; k++)
            if (shm_load_acquire(&seg, lease.index, s->more[m].slot, s->more[m].generation,
                                 &g[ng++]) != 0)
                _exit(11);
    uint64_t answer = s->answer;
    struct adm_client *client = NULL;
    if (s->socket != NULL &&
        adm_client_create(s->socket, &lease, h_holder_answer, &answer, &client) != 0)
        _exit(12);
    bool reported = false, beating = true;
    for (;;) {
        uint64_t now = proc_monotonic_ms();
        if (beating)
            shm_lease_heartbeat(&lease);
        if (client != NULL)
            adm_client_run(client, now);
        if (!reported && (client == NULL || adm_client_is_connected(client))) {
            uint32_t idx = lease.index;
            if (write(ready_wr, &idx, sizeof(idx)) != sizeof(idx))
                _exit(13);
            reported = true;
        }
        struct pollfd pf[2] = {
            {.fd = cmd_rd, .events = POLLIN},
            {.fd = client != NULL ? adm_client_fd(client) : -1, .events = POLLIN}};
        if (poll(pf, 2, 20) <= 0 || !(pf[0].revents & POLLIN))
            continue;
        char c;
        if (read(cmd_rd, &c, 1) != 1)
            _exit(14);
        if (c == 'x') {
            adm_client_destroy(client);
            client = NULL;
            beating = false;
            continue;
        }
        break;
    }
    adm_client_destroy(client);
    for (int k = 0; k < ng && !s->leak; k++)
        shm_load_release(&seg, &g[k]);
    shm_lease_release(&lease);
    _exit(0);
}

void h_holder_start(struct h_holder *h, const struct h_holder_spec *s)
{
    int ready[2], cmd[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(cmd), 0);
    pid_t parent = getpid();
    h->pid = fork();
    assert_true(h->pid >= 0);
    if (h->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(ready[0]);
        close(cmd[1]);
        h_holder_main(s, ready[1], cmd[0]);
    }
    close(ready[1]);
    close(cmd[0]);
    h->ready_rd = ready[0];
    h->cmd_wr = cmd[1];
    struct pollfd pf = {.fd = h->ready_rd, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, H_READY_TIMEOUT_MS), 1);
    assert_int_equal(read(h->ready_rd, &h->lease, sizeof(h->lease)), sizeof(h->lease));
}

void h_holder_command(struct h_holder *h, char c)
{
    assert_int_equal(write(h->cmd_wr, &c, 1), 1);
}

void h_holder_finish(struct h_holder *h)
{
    h_holder_command(h, 'q');
    int status = 0;
    assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(h->ready_rd);
    close(h->cmd_wr);
}

void h_holder_kill(struct h_holder *h)
{
    kill(h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    close(h->ready_rd);
    close(h->cmd_wr);
}

/*
 * A gate in front of dp_adm_confirm for tests/e2e/test_admission_race.c,
 * linked only into the test-only data plane
 * build/tests/e2e/switchyard-dataplane-confirm-race with
 * -Wl,--wrap=dp_adm_confirm (see the Makefile), never into the product.
 *
 * Why: admission's limit is exact because the forwarder re-checks a
 * worker's summed load after taking its guard (dp_adm_confirm) and gives
 * the guard back when another loop or data plane took the last slot in
 * between. That window is nanoseconds wide; a test cannot hit it by
 * hoping. This wrapper holds the window open: on the first call of the
 * process, when SWITCHYARD_TEST_CONFIRM_GATE names a directory, it writes
 * 'r' to the FIFO <dir>/confirm-reached (the guard is held, the real check
 * not made yet), waits for one byte on the FIFO <dir>/confirm-go (the
 * test meanwhile takes the slot as another data plane), makes the real
 * check, and writes its result ('1' within the limit, '0' refused) to
 * confirm-reached before returning it. Every other call, and every call
 * without the variable, is the real function alone.
 *
 * Threading: called on a loop thread; the first-call flag is atomic. The
 * test opens both FIFOs read-write before starting the data plane, so the
 * opens here never block; the wait for "go" is bounded (a test that died
 * lets the data plane carry on).
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dataplane/admission/admission.h"

#define RACE_GATE_ENV     "SWITCHYARD_TEST_CONFIRM_GATE"
#define RACE_GATE_WAIT_MS 30000

bool __real_dp_adm_confirm(const struct dp_loop *loop, uint32_t slot, uint32_t generation);
bool __wrap_dp_adm_confirm(const struct dp_loop *loop, uint32_t slot, uint32_t generation);

static atomic_bool race_gate_used;

static void race_gate_say(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        fprintf(stderr, "confirm gate: cannot write to the test\n");
}

bool __wrap_dp_adm_confirm(const struct dp_loop *loop, uint32_t slot, uint32_t generation)
{
    const char *dir = getenv(RACE_GATE_ENV);
    if (dir == NULL || dir[0] == '\0' ||
        atomic_exchange_explicit(&race_gate_used, true, memory_order_relaxed))
        return __real_dp_adm_confirm(loop, slot, generation);
    char reached[PATH_MAX], go[PATH_MAX];
    snprintf(reached, sizeof(reached), "%s/confirm-reached", dir);
    snprintf(go, sizeof(go), "%s/confirm-go", dir);
    int rfd = open(reached, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    int gfd = open(go, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (rfd < 0 || gfd < 0) {
        fprintf(stderr, "confirm gate: cannot open the FIFOs in %s\n", dir);
        goto out_real;
    }
    fprintf(stderr, "confirm gate: holding the guard on slot %u before the check\n",
            (unsigned)slot);
    race_gate_say(rfd, 'r');
    struct pollfd p = {.fd = gfd, .events = POLLIN};
    char c;
    if (poll(&p, 1, RACE_GATE_WAIT_MS) != 1 || read(gfd, &c, 1) != 1)
        fprintf(stderr, "confirm gate: no word from the test, carrying on\n");
    bool ok = __real_dp_adm_confirm(loop, slot, generation);
    fprintf(stderr, "confirm gate: the real check says %s\n", ok ? "within" : "over the limit");
    race_gate_say(rfd, ok ? '1' : '0');
    close(gfd);
    close(rfd);
    return ok;
out_real:
    if (gfd >= 0)
        close(gfd);
    if (rfd >= 0)
        close(rfd);
    return __real_dp_adm_confirm(loop, slot, generation);
}

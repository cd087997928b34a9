/*
 * Shared set-up for unit tests that need a real (private) segment with
 * one worker registered: the segment is unlinked at once, so nothing is
 * left behind when a test fails; the caller closes it.
 */
#ifndef SY_TESTS_UNIT_UNIT_SHM_H
#define SY_TESTS_UNIT_UNIT_SHM_H

#include <stdio.h>
#include <unistd.h>

#include "shm/registry.h"
#include "shm/segment.h"

/* Opens a 4-slot segment named after tag and this process, and registers a
 * healthy regular worker "w1" at http://127.0.0.1:1 serving model ("" for
 * none); *w is what the registry holds. Asserts (cmocka) on failure. */
static inline void unit_segment_with_worker(struct shm_segment *seg, const char *tag,
                                            const char *model, struct shm_worker_info *w)
{
    char name[64], err[256];
    snprintf(name, sizeof(name), "/sy-unit-%s-%d", tag, (int)getpid());
    enum shm_open_outcome oc;
    assert_int_equal(shm_segment_open_owner(seg, name, 4, 2, &oc, err, sizeof(err)), 0);
    shm_segment_unlink(name);
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR, .healthy = true};
    snprintf(in.id, sizeof(in.id), "w1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:1");
    snprintf(in.model, sizeof(in.model), "%s", model);
    assert_int_equal(shm_registry_add(seg, &in, w), 0);
}

#endif

/*
 * The loop's own helpers (see loop.h): the graveyard, where a request whose
 * last reference went waits for the end of the pass, so a pointer to it
 * still in the current epoll batch stays readable. The driver (init, the
 * thread body, the dispatch) is loop_run.c.
 */
#include "dataplane/core/loop.h"

#include <stdlib.h>

void dp_loop_bury(struct dp_loop *loop, struct dp_request *req)
{
    req->dead_next = loop->graveyard;
    loop->graveyard = req;
}

void dp_loop_free_graveyard(struct dp_loop *loop)
{
    while (loop->graveyard != NULL) {
        struct dp_request *r = loop->graveyard;
        loop->graveyard = r->dead_next;
        free(r);
    }
}

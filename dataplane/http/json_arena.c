/*
 * The JSON arena (see json_arena.h): a thread-local block handed out in
 * 16-byte steps while a window is open; a pointer inside the block is
 * never passed to free().
 */
#include "dataplane/http/json_arena.h"

#include <jansson.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

static _Thread_local struct {
    alignas(16) unsigned char buf[DP_JSON_ARENA_BYTES];
    size_t used;
    bool open;
} ja;

static pthread_once_t ja_once = PTHREAD_ONCE_INIT;

static void *ja_malloc(size_t n)
{
    if (ja.open) {
        size_t need = (n + 15u) & ~(size_t)15u;
        if (need >= n && need <= sizeof(ja.buf) - ja.used) {
            void *p = ja.buf + ja.used;
            ja.used += need;
            return p;
        }
    }
    return malloc(n);
}

static void ja_free(void *p)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)ja.buf;
    if (a >= lo && a < lo + sizeof(ja.buf))
        return; /* the arena's: reclaimed at dp_json_arena_end */
    free(p);
}

static void ja_install(void)
{
    json_set_alloc_funcs(ja_malloc, ja_free);
}

void dp_json_arena_begin(void)
{
    pthread_once(&ja_once, ja_install);
    ja.used = 0;
    ja.open = true;
}

void dp_json_arena_end(void)
{
    ja.open = false;
    ja.used = 0;
}

/*
 * A bump arena for the JSON tree of one request body. jansson allocates
 * every value, string and hash table of a parse with malloc and frees each
 * again at json_decref: a small chat request's parse made about 28 malloc
 * and 28 free calls (callgrind: 5,000 instructions, a third of jansson's
 * own parse). Between dp_json_arena_begin and dp_json_arena_end the
 * calling thread's jansson allocations come from a fixed per-thread block
 * instead, and freeing them costs nothing; the block is reset at the end.
 * An allocation that does not fit (a long conversation) falls back to
 * malloc, and everything outside a begin/end window (other threads, other
 * uses of jansson) uses malloc as before.
 *
 * Contract: every JSON value created between begin and end is released
 * (json_decref) before end, and none outlives it; windows do not nest.
 * The allocation functions are installed process-wide on first use
 * (json_set_alloc_funcs); they fall back to malloc/free, so values made
 * before or outside a window are unaffected.
 *
 * Threading: per thread (thread-local block); no locks.
 */
#ifndef SY_DATAPLANE_JSON_ARENA_H
#define SY_DATAPLANE_JSON_ARENA_H

#define DP_JSON_ARENA_BYTES (16u * 1024u) /* per thread */

/* From now on this thread's jansson allocations come from its arena. */
void dp_json_arena_begin(void);

/* Ends the window and resets the arena (see the contract above). */
void dp_json_arena_end(void);

#endif

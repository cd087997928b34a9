/*
 * Unit tests of the KV-event batch decoder (controlplane/kv/kv_event_decode.c)
 * on batches built with msgpack-c's packer the way vLLM's msgspec encoder
 * lays them out: the current maps and the older positional arrays, hashes
 * as ints and as digest bytes, fields at defaults omitted, unknown fields
 * and events skipped and counted; its limits; and malformed input (every
 * truncation of a valid batch, trailing bytes, wrong types, a nesting bomb,
 * counts larger than the bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/kv/kv_event_decode.h"

/* ---- building batches -------------------------------------------------------- */

struct pk {
    msgpack_sbuffer sb;
    msgpack_packer p;
};

static void pk_init(struct pk *k)
{
    msgpack_sbuffer_init(&k->sb);
    msgpack_packer_init(&k->p, &k->sb, msgpack_sbuffer_write);
}

static void pk_fini(struct pk *k)
{
    msgpack_sbuffer_destroy(&k->sb);
}

static void str(struct pk *k, const char *s)
{
    msgpack_pack_str(&k->p, strlen(s));
    msgpack_pack_str_body(&k->p, s, strlen(s));
}

static void digest(struct pk *k, uint64_t v)
{
    unsigned char d[32];
    memset(d, 0xab, sizeof(d));
    for (int i = 0; i < 8; i++)
        d[31 - i] = (unsigned char)(v >> (8 * i));
    msgpack_pack_bin(&k->p, sizeof(d));
    msgpack_pack_bin_body(&k->p, d, sizeof(d));
}

static void ints(struct pk *k, const uint64_t *v, size_t n)
{
    msgpack_pack_array(&k->p, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(&k->p, v[i]);
}

static int decode(struct kvd_decoder *d, const struct pk *k, struct kv_event_batch *b,
                  struct kvd_counts *c)
{
    char err[200];
    int rc = kvd_decode(d, k->sb.data, k->sb.size, b, c, err, sizeof(err));
    if (rc != 0)
        assert_true(err[0] != '\0'); /* a reason is always given */
    return rc;
}

static const uint64_t H[] = {11, 0xfedcba9876543210ull, 33};
static const uint64_t T[] = {1, 2, 3, 4, 5, 6, 70000, 8};

/* The current form: {ts, events, data_parallel_rank}, events tagged maps. */
static void pack_current(struct pk *k)
{
    msgpack_pack_map(&k->p, 3);
    str(k, "ts");
    msgpack_pack_double(&k->p, 1712345678.25);
    str(k, "events");
    msgpack_pack_array(&k->p, 3);
    /* BlockStored with every required field; parent nil; LoRA name set. */
    msgpack_pack_map(&k->p, 8);
    str(k, "type");
    str(k, "BlockStored");
    str(k, "block_hashes");
    ints(k, H, 2);
    str(k, "parent_block_hash");
    msgpack_pack_nil(&k->p);
    str(k, "token_ids");
    ints(k, T, 8);
    str(k, "block_size");
    msgpack_pack_uint32(&k->p, 4);
    str(k, "lora_id");
    msgpack_pack_nil(&k->p);
    str(k, "medium");
    str(k, "GPU");
    str(k, "lora_name");
    str(k, "adapter-a");
    /* BlockRemoved, the tag not first (msgpack does not promise order). */
    msgpack_pack_map(&k->p, 3);
    str(k, "block_hashes");
    ints(k, H + 2, 1);
    str(k, "medium");
    str(k, "CPU");
    str(k, "type");
    str(k, "BlockRemoved");
    msgpack_pack_map(&k->p, 1);
    str(k, "type");
    str(k, "AllBlocksCleared");
    str(k, "data_parallel_rank");
    msgpack_pack_int(&k->p, 2);
}

static void test_current_maps(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    assert_non_null(d);
    struct pk k;
    pk_init(&k);
    pack_current(&k);
    struct kv_event_batch b;
    struct kvd_counts c = {0};
    assert_int_equal(decode(d, &k, &b, &c), 0);
    assert_true(b.ts == 1712345678.25);
    assert_int_equal(b.dp_rank, 2);
    assert_int_equal(b.n_events, 3);
    const struct kv_event *e = &b.events[0];
    assert_int_equal(e->kind, KV_EVENT_BLOCK_STORED);
    assert_int_equal(e->n_block_hashes, 2);
    assert_true(e->block_hashes[0] == H[0] && e->block_hashes[1] == H[1]);
    assert_false(e->has_parent);
    assert_int_equal(e->n_token_ids, 8);
    static const uint32_t want_ids[] = {1, 2, 3, 4, 5, 6, 70000, 8};
    assert_memory_equal(e->token_ids, want_ids, sizeof(want_ids));
    assert_int_equal(e->block_size, 4);
    assert_int_equal(e->medium, KV_MEDIUM_GPU);
    assert_string_equal(e->lora_name, "adapter-a");
    e = &b.events[1];
    assert_int_equal(e->kind, KV_EVENT_BLOCK_REMOVED);
    assert_int_equal(e->n_block_hashes, 1);
    assert_true(e->block_hashes[0] == 33);
    assert_int_equal(e->medium, KV_MEDIUM_CPU);
    assert_int_equal(b.events[2].kind, KV_EVENT_ALL_BLOCKS_CLEARED);
    assert_int_equal(c.unknown_fields, 0);
    assert_int_equal(c.unknown_events, 0);
    pk_fini(&k);
    kvd_destroy(d);
}

/* The older form: [ts, events, rank] with positional events, digest
 * hashes, a short BlockStored (the first vLLM had 5 fields after the tag),
 * trailing fields at defaults omitted. */
static void test_old_arrays_and_bytes(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    struct pk k;
    pk_init(&k);
    msgpack_pack_array(&k.p, 3);
    msgpack_pack_float(&k.p, 2.5f);
    msgpack_pack_array(&k.p, 3);
    msgpack_pack_array(&k.p, 6); /* tag, hashes, parent, tokens, block_size, lora_id */
    str(&k, "BlockStored");
    msgpack_pack_array(&k.p, 1);
    digest(&k, 0x1122334455667788ull);
    digest(&k, 0x0102030405060708ull);
    ints(&k, T, 4);
    msgpack_pack_uint32(&k.p, 4);
    msgpack_pack_nil(&k.p);
    msgpack_pack_array(&k.p, 8); /* with medium and lora_name */
    str(&k, "BlockStored");
    msgpack_pack_array(&k.p, 1);
    msgpack_pack_int64(&k.p, -2); /* a negative int hash: its two's complement */
    msgpack_pack_uint64(&k.p, 9);
    ints(&k, T, 4);
    msgpack_pack_uint32(&k.p, 4);
    msgpack_pack_nil(&k.p);
    str(&k, "STORAGE");
    msgpack_pack_nil(&k.p);
    msgpack_pack_array(&k.p, 2);
    str(&k, "BlockRemoved");
    msgpack_pack_array(&k.p, 1);
    digest(&k, 42);
    msgpack_pack_nil(&k.p); /* rank nil */
    struct kv_event_batch b;
    assert_int_equal(decode(d, &k, &b, NULL), 0);
    assert_true(b.ts == 2.5);
    assert_int_equal(b.dp_rank, -1);
    assert_int_equal(b.n_events, 3);
    assert_true(b.events[0].block_hashes[0] == 0x1122334455667788ull);
    assert_true(b.events[0].has_parent);
    assert_true(b.events[0].parent_block_hash == 0x0102030405060708ull);
    assert_int_equal(b.events[0].medium, KV_MEDIUM_GPU);
    assert_null(b.events[0].lora_name);
    assert_true(b.events[1].block_hashes[0] == UINT64_MAX - 1);
    assert_true(b.events[1].parent_block_hash == 9);
    assert_int_equal(b.events[1].medium, KV_MEDIUM_STORAGE);
    assert_int_equal(b.events[2].kind, KV_EVENT_BLOCK_REMOVED);
    assert_true(b.events[2].block_hashes[0] == 42);
    assert_int_equal(b.events[2].medium, KV_MEDIUM_GPU);
    pk_fini(&k);
    kvd_destroy(d);
}

/* The array batch with map events, and a map batch without a rank: defaults. */
static void test_mixed_and_defaults(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    struct pk k;
    pk_init(&k);
    msgpack_pack_array(&k.p, 2);  /* no rank at all */
    msgpack_pack_uint64(&k.p, 7); /* an integer ts */
    msgpack_pack_array(&k.p, 1);
    msgpack_pack_map(&k.p, 4); /* parent, medium, lora omitted */
    str(&k, "type");
    str(&k, "BlockStored");
    str(&k, "block_hashes");
    ints(&k, H, 1);
    str(&k, "token_ids");
    ints(&k, T, 2);
    str(&k, "block_size");
    msgpack_pack_uint32(&k.p, 2);
    struct kv_event_batch b;
    assert_int_equal(decode(d, &k, &b, NULL), 0);
    assert_true(b.ts == 7.0);
    assert_int_equal(b.dp_rank, -1);
    assert_false(b.events[0].has_parent);
    assert_int_equal(b.events[0].medium, KV_MEDIUM_GPU);
    assert_null(b.events[0].lora_name);
    pk_fini(&k);
    kvd_destroy(d);
}

/* Unknown fields, unknown events, known-but-unused fields, other media. */
static void test_unknown_skipped_and_counted(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    struct pk k;
    pk_init(&k);
    msgpack_pack_map(&k.p, 4);
    str(&k, "events");
    msgpack_pack_array(&k.p, 3);
    msgpack_pack_map(&k.p, 4);
    str(&k, "type");
    str(&k, "BlockMoved"); /* a future event */
    str(&k, "block_hashes");
    ints(&k, H, 3);
    str(&k, "to");
    msgpack_pack_map(&k.p, 1);
    str(&k, "x");
    msgpack_pack_array(&k.p, 0);
    msgpack_pack_uint8(&k.p, 1); /* a non-string key */
    msgpack_pack_true(&k.p);
    msgpack_pack_map(&k.p, 5);
    str(&k, "type");
    str(&k, "BlockRemoved");
    str(&k, "block_hashes");
    ints(&k, H, 1);
    str(&k, "group_idx"); /* known, unused: not counted */
    msgpack_pack_uint8(&k.p, 1);
    str(&k, "medium");
    str(&k, "DISK");
    str(&k, "hot"); /* unknown: counted */
    msgpack_pack_false(&k.p);
    msgpack_pack_array(&k.p, 4); /* tag + its 3 fields */
    str(&k, "BlockRemoved");
    ints(&k, H, 1);
    msgpack_pack_nil(&k.p);
    msgpack_pack_uint8(&k.p, 0);
    str(&k, "ts");
    msgpack_pack_double(&k.p, 1.0);
    str(&k, "source");
    str(&k, "engine-0"); /* unknown batch field */
    str(&k, "data_parallel_rank");
    msgpack_pack_uint8(&k.p, 0);
    struct kv_event_batch b;
    struct kvd_counts c = {0};
    assert_int_equal(decode(d, &k, &b, &c), 0);
    assert_int_equal(b.n_events, 2);
    assert_int_equal(b.events[0].medium, KV_MEDIUM_OTHER);
    assert_int_equal(b.dp_rank, 0);
    assert_int_equal(c.unknown_events, 1);
    assert_int_equal(c.unknown_fields, 2); /* "hot", "source"; group_idx is known */
    pk_fini(&k);
    kvd_destroy(d);
}

/* A batch of n BlockStored events of one block of 2 tokens each. */
static void pack_n(struct pk *k, size_t n)
{
    msgpack_pack_array(&k->p, 3);
    msgpack_pack_double(&k->p, 0);
    msgpack_pack_array(&k->p, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&k->p, 5);
        str(k, "BlockStored");
        ints(k, H, 1);
        msgpack_pack_nil(&k->p);
        ints(k, T, 2);
        msgpack_pack_uint32(&k->p, 2);
    }
    msgpack_pack_uint8(&k->p, 0);
}

static void test_limits(void **state)
{
    (void)state;
    struct kvd_limits lim = {.max_events = 3, .max_hashes = 5, .max_token_ids = 7};
    struct kvd_decoder *d = kvd_create(&lim);
    struct kv_event_batch b;
    struct pk k;
    pk_init(&k);
    pack_n(&k, 3);
    assert_int_equal(decode(d, &k, &b, NULL), 0);
    assert_int_equal(b.n_events, 3);
    pk_fini(&k);
    pk_init(&k);
    pack_n(&k, 4); /* one event too many (and 8 token ids) */
    assert_int_equal(decode(d, &k, &b, NULL), -E2BIG);
    assert_int_equal(b.n_events, 0);
    pk_fini(&k);
    lim = (struct kvd_limits){.max_events = 100, .max_hashes = 100, .max_token_ids = 7};
    kvd_destroy(d);
    d = kvd_create(&lim);
    pk_init(&k);
    pack_n(&k, 4); /* 8 token ids > 7 */
    assert_int_equal(decode(d, &k, &b, NULL), -E2BIG);
    pk_fini(&k);
    /* A LoRA name over the limit. */
    pk_init(&k);
    msgpack_pack_array(&k.p, 2);
    msgpack_pack_double(&k.p, 0);
    msgpack_pack_array(&k.p, 1);
    msgpack_pack_array(&k.p, 8);
    str(&k, "BlockStored");
    ints(&k, H, 1);
    msgpack_pack_nil(&k.p);
    ints(&k, T, 1);
    msgpack_pack_uint32(&k.p, 1);
    msgpack_pack_nil(&k.p);
    msgpack_pack_nil(&k.p);
    char big[KVD_LORA_NAME_MAX + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    str(&k, big);
    assert_int_equal(decode(d, &k, &b, NULL), -E2BIG);
    pk_fini(&k);
    kvd_destroy(d);
}

/* Every truncation of a valid batch fails cleanly; so do trailing bytes. */
static void test_truncations_and_trailing(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    struct pk k;
    pk_init(&k);
    pack_current(&k);
    struct kv_event_batch b;
    char err[200];
    for (size_t n = 0; n < k.sb.size; n++) {
        char *copy = malloc(n + 1); /* exactly n bytes readable (ASan) */
        memcpy(copy, k.sb.data, n);
        assert_int_equal(kvd_decode(d, copy, n, &b, NULL, err, sizeof(err)), -EINVAL);
        assert_int_equal(b.n_events, 0);
        free(copy);
    }
    msgpack_pack_nil(&k.p);
    assert_int_equal(kvd_decode(d, k.sb.data, k.sb.size, &b, NULL, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "after the batch"));
    pk_fini(&k);
    kvd_destroy(d);
}

/* One event of the array form whose fields are given by fn. */
static int decode_stored(struct kvd_decoder *d, void (*fn)(struct pk *))
{
    struct pk k;
    pk_init(&k);
    msgpack_pack_array(&k.p, 2);
    msgpack_pack_double(&k.p, 0);
    msgpack_pack_array(&k.p, 1);
    fn(&k);
    struct kv_event_batch b;
    int rc = decode(d, &k, &b, NULL);
    pk_fini(&k);
    return rc;
}

static void stored_head(struct pk *k, size_t n_fields)
{
    msgpack_pack_array(&k->p, 1 + n_fields);
    str(k, "BlockStored");
}

static void bad_token_negative(struct pk *k)
{
    stored_head(k, 4);
    ints(k, H, 1);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_int8(&k->p, -1);
    msgpack_pack_uint32(&k->p, 1);
}

static void bad_token_too_big(struct pk *k)
{
    stored_head(k, 4);
    ints(k, H, 1);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_uint64(&k->p, 1ull << 32);
    msgpack_pack_uint32(&k->p, 1);
}

static void bad_token_count(struct pk *k)
{
    stored_head(k, 4);
    ints(k, H, 2);
    msgpack_pack_nil(&k->p);
    ints(k, T, 3); /* 2 blocks of 2 need 4 */
    msgpack_pack_uint32(&k->p, 2);
}

static void bad_block_size_zero(struct pk *k)
{
    stored_head(k, 4);
    ints(k, H, 1);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 0);
    msgpack_pack_uint32(&k->p, 0);
}

static void bad_hash_type(struct pk *k)
{
    stored_head(k, 1);
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_double(&k->p, 1.5);
}

static void bad_parent_type(struct pk *k)
{
    stored_head(k, 2);
    ints(k, H, 0);
    msgpack_pack_true(&k->p);
}

static void bad_empty_array(struct pk *k)
{
    msgpack_pack_array(&k->p, 0);
}

static void bad_deep(struct pk *k)
{
    /* An unknown field nested past the depth limit: refused, not recursed. */
    msgpack_pack_array(&k->p, 13);
    str(k, "BlockRemoved");
    ints(k, H, 1);
    msgpack_pack_nil(&k->p);
    msgpack_pack_nil(&k->p); /* group_idx */
    for (int i = 0; i < 8; i++)
        msgpack_pack_nil(&k->p);
    for (int i = 0; i < 100; i++)
        msgpack_pack_array(&k->p, 1);
    msgpack_pack_nil(&k->p);
}

static void test_wrong_types(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    assert_int_equal(decode_stored(d, bad_token_negative), -EINVAL);
    assert_int_equal(decode_stored(d, bad_token_too_big), -EINVAL);
    /* Odd but well formed (a sliding-window group's token ids cover its
     * masked blocks too): decoded, left to the index to skip, never a
     * refused batch (which would resync the worker). */
    assert_int_equal(decode_stored(d, bad_token_count), 0);
    assert_int_equal(decode_stored(d, bad_block_size_zero), 0);
    assert_int_equal(decode_stored(d, bad_hash_type), -EINVAL);
    assert_int_equal(decode_stored(d, bad_parent_type), -EINVAL);
    assert_int_equal(decode_stored(d, bad_empty_array), -EINVAL);
    assert_int_equal(decode_stored(d, bad_deep), -EINVAL);
    kvd_destroy(d);
}

/* Raw bytes: not a batch, a count larger than the bytes, 0xc1, a map
 * event without "type". */
static void test_raw_malformed(void **state)
{
    (void)state;
    struct kvd_decoder *d = kvd_create(NULL);
    struct kv_event_batch b;
    char err[200];
    static const unsigned char not_batch[] = {0x2a};
    static const unsigned char huge_count[] = {0x92, 0xcb, 0,    0,    0,    0,    0,   0,
                                               0,    0,    0xdd, 0xff, 0xff, 0xff, 0xff};
    static const unsigned char never_used[] = {0x92, 0x00, 0x91, 0xc1};
    static const unsigned char no_type[] = {0x92, 0x00, 0x91, 0x81, 0xa1, 'x', 0x01};
    static const unsigned char no_events[] = {0x81, 0xa2, 't', 's', 0x01};
    assert_int_equal(kvd_decode(d, not_batch, sizeof(not_batch), &b, NULL, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(kvd_decode(d, huge_count, sizeof(huge_count), &b, NULL, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(kvd_decode(d, never_used, sizeof(never_used), &b, NULL, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(kvd_decode(d, no_type, sizeof(no_type), &b, NULL, err, sizeof(err)), -EINVAL);
    assert_int_equal(kvd_decode(d, no_events, sizeof(no_events), &b, NULL, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(kvd_decode(d, NULL, 0, &b, NULL, err, sizeof(err)), -EINVAL);
    kvd_destroy(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_maps),
        cmocka_unit_test(test_old_arrays_and_bytes),
        cmocka_unit_test(test_mixed_and_defaults),
        cmocka_unit_test(test_unknown_skipped_and_counted),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_truncations_and_trailing),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_raw_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

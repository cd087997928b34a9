/*
 * A PodList body read as it arrives, one item at a time: the Kubernetes
 * source's defence against a list it cannot afford to hold. The API server
 * sends {"kind":"PodList","metadata":{...},"items":[{...},...]}; parsing
 * that whole with jansson costs some hundred bytes a value, so a hostile
 * or broken server's 60 MB list of tiny items once took the control plane
 * to 2.7 GB. The scanner follows the body's structure byte by byte (depth,
 * strings, escapes) and copies out only one value at a time: each element
 * of the top-level "items" array, parsed with jansson on its own and handed
 * to on_item, and the few other top-level members the source reads (kind,
 * apiVersion, metadata), kept for the end. Everything else is skipped
 * without being stored.
 *
 * Bounds: one copied value at most max_value bytes (an item larger is an
 * error, as the API server stores no object above about 1.5 MiB); on_item
 * may refuse an item (the page is then refused: the caller stops the
 * transfer). Memory is one value plus the kept members, whatever the size
 * of the body.
 *
 * Structure is checked as far as the scanner needs it (an object at the
 * top, keys, colons, commas, balanced brackets outside strings); each
 * copied value is checked by jansson. A body that is no such object, is
 * cut short, or holds an item jansson refuses, fails the scan.
 *
 * Caller storage; kube_ls_init / kube_ls_feed / kube_ls_finish /
 * kube_ls_fini. One thread (the control plane's loop).
 */
#ifndef SY_CONTROLPLANE_SOURCE_KUBERNETES_LIST_H
#define SY_CONTROLPLANE_SOURCE_KUBERNETES_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Called with each item (borrowed for the call); false refuses it. NULL:
 * items are checked and dropped. */
typedef bool (*kube_ls_item_fn)(void *user, const json_t *item);

struct kube_list_scan {
    kube_ls_item_fn on_item;
    void *user;
    size_t max_value;
    /* Where the top-level object is: what the next byte may be. */
    int at;
    char key[16]; /* the current top-level member's name, cut (only short names matter) */
    size_t key_len;
    bool key_esc;     /* inside the key: the last byte was a backslash */
    bool key_bad;     /* escaped or too long: names no member the source reads */
    int member;       /* what the current member's value is to the scanner */
    bool in_items;    /* between the items array's brackets */
    bool items_array; /* an "items" array was seen */
    /* The value being skipped or copied: its nesting, string state, kind. */
    int vdepth;
    bool vstr, vesc, vscalar, vcopy;
    char *buf; /* the copied value */
    size_t len, cap;
    size_t items;  /* items handed to on_item */
    json_t *rest;  /* the kept members */
    bool failed;   /* sticky */
    char why[160]; /* when failed */
};

/* max_value: bytes of the largest item or kept member. */
void kube_ls_init(struct kube_list_scan *s, size_t max_value, kube_ls_item_fn on_item, void *user);
void kube_ls_fini(struct kube_list_scan *s);

/* Makes s ready for another body (keeps its buffer). */
void kube_ls_reset(struct kube_list_scan *s);

/* Scans len more bytes. false once the scan failed (why says why; a
 * refusal by on_item says "refused"): the caller stops feeding. */
bool kube_ls_feed(struct kube_list_scan *s, const char *bytes, size_t len);

/*
 * The body ended: the list without its items, as an object holding the
 * kept members and, when the body had an items array, "items": [] (new
 * reference). NULL when the scan failed or the body was cut short or had
 * no top-level object (why says which).
 */
json_t *kube_ls_finish(struct kube_list_scan *s);

#endif

/*
 * Reply helpers (see admin_reply.h). Error bodies are {"error": "..."},
 * the shape every admin route answers with.
 */
#include "controlplane/admin/admin_reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void adm_reply_fini(struct adm_reply *r)
{
    json_decref(r->json);
    free(r->text);
    memset(r, 0, sizeof(*r));
}

void adm_reply_json(struct adm_reply *r, unsigned status, json_t *json)
{
    adm_reply_fini(r);
    r->status = status;
    r->json = json;
}

void adm_reply_error(struct adm_reply *r, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *body = json_pack("{s:s}", "error", msg);
    if (body == NULL) {
        /* The message echoes client bytes (a URL, say) that are not UTF-8,
         * which JSON cannot carry: say it with those bytes replaced rather
         * than answer with an empty body. */
        for (char *c = msg; *c != '\0'; c++)
            if ((unsigned char)*c >= 0x80 || (unsigned char)*c < 0x20)
                *c = '?';
        body = json_pack("{s:s}", "error", msg);
    }
    adm_reply_json(r, status, body);
}

void adm_reply_deliver(struct adm_reply_later *later, struct adm_reply *reply)
{
    struct adm_reply_later l = *later;
    memset(later, 0, sizeof(*later));
    l.fn(l.arg, reply);
}

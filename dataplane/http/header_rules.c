/*
 * Header syntax checks for client requests (see header_rules.h for why).
 */
#include "dataplane/http/header_rules.h"

#include <string.h>
#include <strings.h>

/* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
 *         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static bool hdr_is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
        return true;
    default:
        return false;
    }
}

bool dp_hdr_name_is_token(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!hdr_is_tchar((unsigned char)name[i]))
            return false;
    return true;
}

bool dp_hdr_value_is_clean(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static bool hdr_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

bool dp_hdr_connection_lists(const char *connection_value, const char *name, size_t len)
{
    const char *p = connection_value;
    while (*p != '\0') {
        while (hdr_is_ows(*p) || *p == ',')
            p++;
        const char *start = p;
        while (*p != '\0' && *p != ',')
            p++;
        const char *end = p;
        while (end > start && hdr_is_ows(end[-1]))
            end--;
        if ((size_t)(end - start) == len && len > 0 && strncasecmp(start, name, len) == 0)
            return true;
    }
    return false;
}

/* Compares name[0..len) with lower-case want, without regard to case. */
static bool hdr_name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

void dp_hdr_framing_note(struct dp_hdr_framing *f, const char *name, size_t name_len,
                         const char *value, size_t value_len)
{
    if (name == NULL)
        return;
    /* MHD trims the value's surrounding white space; inner text is as sent. */
    if (hdr_name_is(name, name_len, "content-length")) {
        f->content_lengths++;
        bool digits = value != NULL && value_len > 0;
        for (size_t i = 0; digits && i < value_len; i++)
            digits = value[i] >= '0' && value[i] <= '9';
        if (!digits)
            f->length_not_digits = true;
    } else if (hdr_name_is(name, name_len, "transfer-encoding")) {
        f->transfer_encodings++;
        if (value == NULL || !hdr_name_is(value, value_len, "chunked"))
            f->coding_not_chunked = true;
    }
}

const char *dp_hdr_framing_problem(const struct dp_hdr_framing *f)
{
    if (f->content_lengths > 1)
        return "more than one Content-Length header";
    if (f->transfer_encodings > 0 && f->content_lengths > 0)
        return "both Transfer-Encoding and Content-Length";
    if (f->transfer_encodings > 1 || f->coding_not_chunked)
        return "a Transfer-Encoding other than a single \"chunked\"";
    if (f->length_not_digits)
        return "a Content-Length that is not a decimal number";
    return NULL;
}

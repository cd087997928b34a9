/*
 * What a client's header must look like before the data plane forwards it
 * (RFC 9110 section 5). libmicrohttpd 0.9.75 is lenient: it accepts a bare
 * CR inside a value, other control bytes, and white space between a name
 * and its colon, and hands such headers over as they came. Forwarded
 * verbatim they let a client smuggle a header past the hop-by-hop filter
 * ("Transfer-Encoding : chunked", "Content-Length\t: 5") or inject one
 * ("X-A: foo\rX-Injected: 1"). So a name must be a token and a value must
 * hold no control byte but HTAB; the listener answers 400 otherwise.
 *
 * Headers named by the client's Connection header are hop-by-hop too (RFC
 * 9110 section 7.6.1) and are not forwarded.
 *
 * A request's framing must be unambiguous (RFC 9112 section 6.3): two
 * Content-Length headers, Transfer-Encoding beside Content-Length, or a
 * coding other than a lone "chunked" let the router and a peer disagree on
 * where the body ends, and the rest of it runs as a second request. The
 * listener answers 400 and closes before reading the body.
 *
 * Pure functions over caller memory; any thread.
 */
#ifndef SY_DATAPLANE_HEADER_RULES_H
#define SY_DATAPLANE_HEADER_RULES_H

#include <stdbool.h>
#include <stddef.h>

/* True when name[0..len) is a non-empty RFC 9110 token (1*tchar). */
bool dp_hdr_name_is_token(const char *name, size_t len);

/* True when value[0..len) holds no CR, LF, NUL or other control byte (HTAB
 * and bytes from 0x80 up are allowed, as obs-text). */
bool dp_hdr_value_is_clean(const char *value, size_t len);

/* True when connection_value (a Connection header's value: tokens separated
 * by commas and optional white space) lists name[0..len), compared without
 * regard to case. */
bool dp_hdr_connection_lists(const char *connection_value, const char *name, size_t len);

/* What a request's framing headers said, noted one header at a time. */
struct dp_hdr_framing {
    unsigned content_lengths;    /* Content-Length headers seen */
    unsigned transfer_encodings; /* Transfer-Encoding headers seen */
    bool length_not_digits;      /* a Content-Length that is not 1*DIGIT */
    bool coding_not_chunked;     /* a Transfer-Encoding other than "chunked" */
};

/* Notes one request header (any header: others are ignored). */
void dp_hdr_framing_note(struct dp_hdr_framing *f, const char *name, size_t name_len,
                         const char *value, size_t value_len);

/* NULL when the framing is unambiguous, else why not (a static string). */
const char *dp_hdr_framing_problem(const struct dp_hdr_framing *f);

#endif

/*
 * The control-plane reload (SIGHUP, POST /reload, switchyard-ctl reload):
 * re-read the config file the control plane was started with and apply
 * what can change while it runs — the static workers (re-synced: unchanged
 * ones keep slot and generation, so their load stays attached) and
 * controlplane.health (interval, timeout, thresholds, path, initial).
 *
 * Every key has one way it takes effect, in its schema row (cfg_key_effect
 * in common/config.h; the table in docs/operations.md says the same): at a
 * control-plane reload, at the data planes' hot restart (dataplane.*,
 * policy.*: the control plane accepts them and says so), or only at a
 * restart of the control plane (the segment's shape, the admin listener,
 * socket and token). A reload that changes a key of the last kind is
 * refused as a whole, naming the keys, and the running config stays in
 * force; so is one whose file does not load or whose workers clash with
 * another source's.
 *
 * Control plane only, on its loop thread (the registry's one writer).
 */
#ifndef SY_CONTROLPLANE_RELOAD_H
#define SY_CONTROLPLANE_RELOAD_H

#include <stddef.h>

#include "common/config.h"
#include "controlplane/probes/health_prober.h"
#include "controlplane/sources/registry_sync.h"

/*
 * Loads cur->path again and applies it to reg (the registry's writer) and hc. Returns 0 with *next
 * the new config (heap; the caller makes it current, keeps it alive as long
 * as hc runs, and frees it with cfg_fini + free once replaced) and a
 * one-line summary in msg. Otherwise *next is NULL, nothing changed, and msg
 * says why: -EINVAL the file does not load (the loader's FILE:LINE:COL
 * message), -EPERM keys that need a restart changed (named), -EEXIST a
 * configured worker's id or url belongs to another source's worker, -ENOMEM.
 * A registry that fills up half-way (-ENOSPC) keeps what was applied.
 * *discovery_changed says whether a discovery.* key changed: the caller
 * then makes its discovery source anew from *next.
 * dp_base is the config the running data planes started with (cur when they
 * all started after the last reload): the message names every key that a
 * hot restart would apply, also those an earlier reload changed.
 */
int cp_reload(const struct cfg *cur, const struct cfg *dp_base, struct cp_registry *reg,
              struct hc_prober *hc, struct cfg **next, bool *discovery_changed, char *msg,
              size_t msg_len);

#endif

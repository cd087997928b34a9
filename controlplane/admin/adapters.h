/*
 * The admin API's LoRA adapter routes (docs/admin-api.md, docs/api.md):
 *   POST /adapters {lora_name, lora_path, base_model?, count?} loads the
 *     adapter on `count` (default 1) healthy, non-draining workers serving
 *     base_model (optional when the fleet serves one model) that do not
 *     have it yet, the least loaded first, through each worker's
 *     POST /v1/load_lora_adapter (vLLM needs
 *     VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 for it);
 *   DELETE /adapters/{name} unloads it from every worker listing it
 *     (POST /v1/unload_lora_adapter).
 * A worker that answered 2xx gets the adapter among its names in the
 * registry at once, so routing follows before the call returns; its
 * /v1/models is read again right after to confirm (hc_refresh_models).
 * The answer lists the workers that did it and those that failed, with
 * each failure's status and text.
 *
 * The calls to the workers run in parallel and block the control plane's
 * loop for at most CP_ADAPTERS_TIMEOUT_MS: an operator action, rare and
 * short, not worth a state machine.
 *
 * Threading: the control plane's loop thread.
 */
#ifndef SY_CONTROLPLANE_ADAPTERS_H
#define SY_CONTROLPLANE_ADAPTERS_H

#include <stddef.h>

#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_reply.h"

#define CP_ADAPTERS_TIMEOUT_MS 5000

/* Serves /adapters (name NULL) or /adapters/{name}. */
void cp_adapters_serve(struct adm_ctx *ctx, const char *method, const char *name, const char *body,
                       size_t len, struct adm_reply *reply);

#endif

/*
 * The mock worker's LoRA adapters, as vLLM serves them: the adapters named
 * at start (--lora-modules, --lora-adapters) plus those loaded at run time
 * through POST /v1/load_lora_adapter (vLLM allows that only with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING=1; the mock always does), less those
 * unloaded. A request naming an adapter is served by the same simulated
 * model. The set also counts the requests running on each adapter, for
 * vllm:lora_requests_info's running_lora_adapters label.
 *
 * One set per process; every function takes its lock. Any thread.
 */
#ifndef SY_TESTS_MOCKWORKER_LORA_H
#define SY_TESTS_MOCKWORKER_LORA_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define MW_LORA_MAX 16

/* Starts the set with n adapters (names and paths copied). */
void mw_lora_init(const char (*names)[128], const char (*paths)[256], size_t n);

/* True when name is a loaded adapter. */
bool mw_lora_has(const char *name);

/* 0, -EEXIST (loaded already), -ENOSPC (MW_LORA_MAX loaded), -EINVAL. */
int mw_lora_load(const char *name, const char *path);
/* 0 or -ENOENT. */
int mw_lora_unload(const char *name);

/* Copies the loaded adapters (up to cap) into names/paths; returns how many. */
size_t mw_lora_list(char (*names)[128], char (*paths)[256], size_t cap);

/* A request on adapter name starts (returns a handle >= 0) or ends. */
int mw_lora_begin(const char *name);
void mw_lora_end(int handle);

/* True once any adapter was ever configured or loaded (vLLM with LoRA on). */
bool mw_lora_enabled(void);

/* The adapters with running requests, comma-joined, into out. */
void mw_lora_running(char *out, size_t cap);

/* vllm:lora_requests_info as vLLM's client library writes it: every label
 * set the gauge ever had stays in the output with the time it was last
 * set, the current one with now (wall clock, s). Up to MW_LORA_HISTORY
 * label sets, the oldest forgotten first. */
#define MW_LORA_HISTORY 8
struct mw_lora_info {
    char running[1024];
    double unix_s;
};
/* Copies the label sets (up to cap) into out; returns how many. */
size_t mw_lora_info(struct mw_lora_info *out, size_t cap);

#endif

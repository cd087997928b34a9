/*
 * The adapter set (see lora.h): a small array under a mutex. A handle is
 * an entry's index plus its load generation, so a request that began on
 * an adapter unloaded (and its entry reused) meanwhile ends without
 * touching the newcomer's count.
 */
#include "tests/mockworker/lora.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct mw_lora_entry {
    bool used;
    char name[128];
    char path[256];
    unsigned gen;
    unsigned running;
};

/* The label sets the gauge has had (mw_lora_info); [0] is the newest. */
static struct mw_lora_info mw_lora_hist[MW_LORA_HISTORY];
static size_t mw_lora_n_hist;

static pthread_mutex_t mw_lora_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mw_lora_entry mw_lora[MW_LORA_MAX];
static unsigned mw_lora_gen;
static bool mw_lora_on;

static int mw_lora_find(const char *name)
{
    for (int i = 0; i < MW_LORA_MAX; i++)
        if (mw_lora[i].used && strcmp(mw_lora[i].name, name) == 0)
            return i;
    return -1;
}

static int mw_lora_add(const char *name, const char *path)
{
    if (name[0] == '\0' || strlen(name) >= sizeof(mw_lora[0].name) ||
        strlen(path) >= sizeof(mw_lora[0].path))
        return -EINVAL;
    if (mw_lora_find(name) >= 0)
        return -EEXIST;
    for (int i = 0; i < MW_LORA_MAX; i++) {
        if (mw_lora[i].used)
            continue;
        mw_lora[i] = (struct mw_lora_entry){.used = true, .gen = ++mw_lora_gen};
        snprintf(mw_lora[i].name, sizeof(mw_lora[i].name), "%s", name);
        snprintf(mw_lora[i].path, sizeof(mw_lora[i].path), "%s", path);
        mw_lora_on = true;
        return 0;
    }
    return -ENOSPC;
}

void mw_lora_init(const char (*names)[128], const char (*paths)[256], size_t n)
{
    pthread_mutex_lock(&mw_lora_lock);
    for (size_t i = 0; i < n; i++)
        (void)mw_lora_add(names[i], paths[i]);
    pthread_mutex_unlock(&mw_lora_lock);
}

bool mw_lora_has(const char *name)
{
    pthread_mutex_lock(&mw_lora_lock);
    bool has = mw_lora_find(name) >= 0;
    pthread_mutex_unlock(&mw_lora_lock);
    return has;
}

int mw_lora_load(const char *name, const char *path)
{
    pthread_mutex_lock(&mw_lora_lock);
    int rc = mw_lora_add(name, path);
    pthread_mutex_unlock(&mw_lora_lock);
    return rc;
}

int mw_lora_unload(const char *name)
{
    pthread_mutex_lock(&mw_lora_lock);
    int i = mw_lora_find(name);
    if (i >= 0)
        mw_lora[i].used = false;
    pthread_mutex_unlock(&mw_lora_lock);
    return i >= 0 ? 0 : -ENOENT;
}

size_t mw_lora_list(char (*names)[128], char (*paths)[256], size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&mw_lora_lock);
    for (int i = 0; i < MW_LORA_MAX && n < cap; i++) {
        if (!mw_lora[i].used)
            continue;
        memcpy(names[n], mw_lora[i].name, sizeof(mw_lora[i].name));
        memcpy(paths[n], mw_lora[i].path, sizeof(mw_lora[i].path));
        n++;
    }
    pthread_mutex_unlock(&mw_lora_lock);
    return n;
}

static void mw_lora_running_locked(char *out, size_t cap);

static double mw_lora_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The current label set, stamped now, at the head of the history (vLLM
 * sets the gauge on every engine step; here on every change and scrape). */
static void mw_lora_stamp_locked(void)
{
    char now[sizeof(mw_lora_hist[0].running)];
    mw_lora_running_locked(now, sizeof(now));
    size_t at = 0;
    while (at < mw_lora_n_hist && strcmp(mw_lora_hist[at].running, now) != 0)
        at++;
    if (at == mw_lora_n_hist && mw_lora_n_hist < MW_LORA_HISTORY)
        mw_lora_n_hist++;
    if (at == MW_LORA_HISTORY)
        at = MW_LORA_HISTORY - 1; /* forget the oldest */
    memmove(&mw_lora_hist[1], &mw_lora_hist[0], at * sizeof(mw_lora_hist[0]));
    snprintf(mw_lora_hist[0].running, sizeof(mw_lora_hist[0].running), "%s", now);
    mw_lora_hist[0].unix_s = mw_lora_now_s();
}

int mw_lora_begin(const char *name)
{
    pthread_mutex_lock(&mw_lora_lock);
    if (mw_lora_on)
        mw_lora_stamp_locked(); /* the state before: current until now */
    int i = mw_lora_find(name);
    int handle = -1;
    if (i >= 0) {
        mw_lora[i].running++;
        handle = (int)(mw_lora[i].gen * MW_LORA_MAX) + i;
        mw_lora_stamp_locked();
    }
    pthread_mutex_unlock(&mw_lora_lock);
    return handle;
}

void mw_lora_end(int handle)
{
    if (handle < 0)
        return;
    int i = handle % MW_LORA_MAX;
    unsigned gen = (unsigned)handle / MW_LORA_MAX;
    pthread_mutex_lock(&mw_lora_lock);
    mw_lora_stamp_locked(); /* the state before: current until now */
    if (mw_lora[i].used && mw_lora[i].gen == gen && mw_lora[i].running > 0)
        mw_lora[i].running--;
    mw_lora_stamp_locked();
    pthread_mutex_unlock(&mw_lora_lock);
}

bool mw_lora_enabled(void)
{
    pthread_mutex_lock(&mw_lora_lock);
    bool on = mw_lora_on;
    pthread_mutex_unlock(&mw_lora_lock);
    return on;
}

void mw_lora_running(char *out, size_t cap)
{
    pthread_mutex_lock(&mw_lora_lock);
    mw_lora_running_locked(out, cap);
    pthread_mutex_unlock(&mw_lora_lock);
}

size_t mw_lora_info(struct mw_lora_info *out, size_t cap)
{
    pthread_mutex_lock(&mw_lora_lock);
    mw_lora_stamp_locked();
    size_t n = mw_lora_n_hist < cap ? mw_lora_n_hist : cap;
    memcpy(out, mw_lora_hist, n * sizeof(*out));
    pthread_mutex_unlock(&mw_lora_lock);
    return n;
}

static void mw_lora_running_locked(char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < MW_LORA_MAX; i++) {
        if (!mw_lora[i].used || mw_lora[i].running == 0)
            continue;
        int n = snprintf(out + at, cap - at, "%s%s", at > 0 ? "," : "", mw_lora[i].name);
        if (n < 0 || (size_t)n >= cap - at)
            break;
        at += (size_t)n;
    }
}

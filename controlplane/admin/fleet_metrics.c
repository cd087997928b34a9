/*
 * Fleet-level metrics (see fleet_metrics.h): the snapshot is sorted by
 * model, then each run of one model is one sample, so the page costs
 * O(n log n) whatever the number of models.
 */
#include "controlplane/admin/fleet_metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int cp_by_model(const void *a, const void *b)
{
    return strcmp(((const struct shm_worker_info *)a)->model,
                  ((const struct shm_worker_info *)b)->model);
}

void cp_fleet_metrics_write(struct prom_writer *w, struct shm_worker_info *all, size_t n)
{
    qsort(all, n, sizeof(*all), cp_by_model);
    prom_family(w, "switchyard_model_healthy_workers", PROM_GAUGE,
                "Workers serving the model that are healthy, awake and not draining.");
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint64_t routable = 0;
        for (; j < n && strcmp(all[j].model, all[i].model) == 0; j++)
            routable += all[j].healthy && !all[j].draining && !all[j].sleeping;
        if (all[i].model[0] != '\0') {
            struct prom_label l = {"model", all[i].model};
            prom_sample_u64(w, NULL, &l, 1, routable);
        }
        i = j;
    }
}

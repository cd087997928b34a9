/* The types of list.h: types only, including only types headers. */
#ifndef SY_COMMON_LIST_TYPES_H
#define SY_COMMON_LIST_TYPES_H

#include <stdbool.h>
#include <stddef.h>

/* Embedded in the element, or used as a list's head. */
struct list_node {
    struct list_node *prev, *next;
};

#endif

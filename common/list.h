/*
 * The one intrusive doubly linked list (h2o linklist / Linux list_head
 * style). A struct that wants to be on a list embeds a struct list_node and
 * the list itself is a struct list_node used as head: a circular ring where
 * the head is the sentinel, so insert and remove never test for NULL ends
 * and removal in the middle is O(1) given only the element. list_entry()
 * turns a node back into its containing struct.
 *
 * Invariants: a head is initialised with list_init() before use (an empty
 * list points at itself). A node that is on no list has prev == next ==
 * NULL (zeroed memory is a valid unlinked node; list_remove() leaves it so),
 * which makes list_is_linked() a cheap "is it queued?" test and makes a
 * second list_remove() a no-op. A node is on at most one list through one
 * embedded list_node; embed several nodes to be on several lists.
 *
 * Threading: none. A list and its nodes belong to whoever owns the head;
 * callers that share one across threads hold their own lock around every
 * call, including iteration.
 *
 * Iteration: list_foreach(it, head) visits nodes front to back and must not
 * remove `it`; list_foreach_safe(it, tmp, head) may remove (or free) `it`.
 */
#ifndef SY_COMMON_LIST_H
#define SY_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include "common/list_types.h"

/* Static initialiser of an empty head: static struct list_node h = LIST_STATIC_INIT(h); */
#define LIST_STATIC_INIT(head)                                                                     \
    {                                                                                              \
        &(head), &(head)                                                                           \
    }

/* The struct of type `type` whose member `member` is the node `node`. */
#define list_entry(node, type, member) ((type *)((char *)(node)-offsetof(type, member)))

/* Front to back; the body must not unlink `it`. */
#define list_foreach(it, head) for ((it) = (head)->next; (it) != (head); (it) = (it)->next)

/* Front to back; the body may unlink or free `it` (not other nodes). */
#define list_foreach_safe(it, tmp, head)                                                           \
    for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head); (it) = (tmp), (tmp) = (it)->next)

/* Makes head an empty list. */
static inline void list_init(struct list_node *head)
{
    head->prev = head;
    head->next = head;
}

static inline bool list_is_empty(const struct list_node *head)
{
    return head->next == head;
}

/* True while node is on some list (false for zeroed or removed nodes). */
static inline bool list_is_linked(const struct list_node *node)
{
    return node->next != NULL;
}

/* Links node (not on any list) just before pos; pos may be a head. */
static inline void list_insert_before(struct list_node *pos, struct list_node *node)
{
    node->prev = pos->prev;
    node->next = pos;
    pos->prev->next = node;
    pos->prev = node;
}

/* Links node (not on any list) just after pos; pos may be a head. */
static inline void list_insert_after(struct list_node *pos, struct list_node *node)
{
    list_insert_before(pos->next, node);
}

/* Appends node at the back of the list headed by head. */
static inline void list_push_back(struct list_node *head, struct list_node *node)
{
    list_insert_before(head, node);
}

/* Inserts node at the front of the list headed by head. */
static inline void list_push_front(struct list_node *head, struct list_node *node)
{
    list_insert_after(head, node);
}

/* Unlinks node from its list and marks it unlinked; an unlinked node is a no-op. */
static inline void list_remove(struct list_node *node)
{
    if (node->next == NULL)
        return;
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = NULL;
    node->next = NULL;
}

/* The first node, or NULL when the list is empty. */
static inline struct list_node *list_first(const struct list_node *head)
{
    return head->next != head ? head->next : NULL;
}

/* The last node, or NULL when the list is empty. */
static inline struct list_node *list_last(const struct list_node *head)
{
    return head->prev != head ? head->prev : NULL;
}

/* Unlinks and returns the first node, or NULL when the list is empty. */
static inline struct list_node *list_pop_front(struct list_node *head)
{
    struct list_node *node = list_first(head);
    if (node != NULL)
        list_remove(node);
    return node;
}

/*
 * Moves every node of from to the back of to, in order, leaving from empty.
 * O(1). to and from are distinct heads.
 */
static inline void list_splice_back(struct list_node *to, struct list_node *from)
{
    if (list_is_empty(from))
        return;
    struct list_node *first = from->next, *last = from->prev;
    first->prev = to->prev;
    to->prev->next = first;
    last->next = to;
    to->prev = last;
    list_init(from);
}

#endif

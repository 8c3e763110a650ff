/* list.h: intrusive doubly linked lists (a struct list_node embedded in the element). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

#define LIST_HEAD_INIT(name)                                                                       \
	{                                                                                          \
		&(name), &(name)                                                                   \
	}

static inline void
list_init(struct list_node *head)
{
	head->prev = head->next = head;
}

static inline bool
list_empty(const struct list_node *head)
{
	return head->next == head;
}

/* True when the node is linked into some list (nodes are initialised unlinked). */
static inline bool
list_linked(const struct list_node *n)
{
	return n->next && n->next != n;
}

static inline void
list_insert_after(struct list_node *pos, struct list_node *n)
{
	n->prev = pos;
	n->next = pos->next;
	pos->next->prev = n;
	pos->next = n;
}

/* Adds at the front (head->next). */
static inline void
list_push_front(struct list_node *head, struct list_node *n)
{
	list_insert_after(head, n);
}

static inline void
list_push_back(struct list_node *head, struct list_node *n)
{
	list_insert_after(head->prev, n);
}

/* Unlinks n (safe to call twice). */
static inline void
list_remove(struct list_node *n)
{
	if (!list_linked(n))
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

#define list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#define LIST_FOREACH(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define LIST_FOREACH_SAFE(pos, tmp, head)                                                          \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                           \
	     (pos) = (tmp), (tmp) = (pos)->next)

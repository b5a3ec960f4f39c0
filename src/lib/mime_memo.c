/* libmagic's answers by content within one collect: many produced files share their bytes (a
 * copied dataset, identical logs), and the raw answer depends on the bytes alone, so each
 * distinct SHA-256 is detected once. Only the raw answer is kept: refinement by each file's
 * name runs afterwards as usual, so a.csv and b.json with the same bytes still get their own
 * types. An open-addressing table under a mutex (a lookup is far cheaper than libmagic). */
#include "internal.h"
#include "mime_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct memo_slot {
	char sha[65]; /* "" when empty */
	char *raw;
};

struct hvm_memo {
	pthread_mutex_t mu;
	struct memo_slot *slots;
	size_t cap, used; /* cap a power of two */
};

static atomic_ulong memo_hits;

unsigned long hvm_memo_hits(void)
{
	return atomic_load(&memo_hits);
}

hvm_memo *hvm_memo_new(void)
{
	hvm_memo *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cap = 256;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	if (!m->slots) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->mu, NULL);
	return m;
}

void hvm_memo_free(hvm_memo *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].raw);
	free(m->slots);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

/* The slot for sha: its entry, or the empty slot where it belongs. A digest is uniform, so
 * its first hex digits are a good hash. */
static struct memo_slot *find(struct memo_slot *slots, size_t cap, const char *sha)
{
	uint64_t h = 0;
	for (int i = 0; i < 16; i++)
		h = h << 4 | (uint64_t)(sha[i] <= '9' ? sha[i] - '0' : (sha[i] | 0x20) - 'a' + 10);
	for (size_t i = (size_t)h & (cap - 1);; i = (i + 1) & (cap - 1))
		if (!slots[i].sha[0] || memcmp(slots[i].sha, sha, 64) == 0)
			return &slots[i];
}

char *hvm_memo_get(hvm_memo *m, const char *sha)
{
	if (!m || strlen(sha) != 64)
		return NULL;
	pthread_mutex_lock(&m->mu);
	const struct memo_slot *s = find(m->slots, m->cap, sha);
	char *raw = s->sha[0] ? strdup(s->raw) : NULL;
	pthread_mutex_unlock(&m->mu);
	if (raw)
		atomic_fetch_add(&memo_hits, 1);
	return raw;
}

void hvm_memo_put(hvm_memo *m, const char *sha, const char *raw)
{
	if (!m || strlen(sha) != 64)
		return;
	char *copy = strdup(raw);
	if (!copy)
		return; /* only a missed reuse */
	pthread_mutex_lock(&m->mu);
	if ((m->used + 1) * 2 > m->cap) {
		size_t cap = m->cap * 2;
		struct memo_slot *slots = calloc(cap, sizeof(*slots));
		if (!slots) {
			pthread_mutex_unlock(&m->mu);
			free(copy);
			return;
		}
		for (size_t i = 0; i < m->cap; i++)
			if (m->slots[i].sha[0])
				*find(slots, cap, m->slots[i].sha) = m->slots[i];
		free(m->slots);
		m->slots = slots;
		m->cap = cap;
	}
	struct memo_slot *s = find(m->slots, m->cap, sha);
	if (s->sha[0]) {
		free(copy); /* another thread detected the same bytes meanwhile */
	} else {
		memcpy(s->sha, sha, 65);
		s->raw = copy;
		m->used++;
	}
	pthread_mutex_unlock(&m->mu);
}

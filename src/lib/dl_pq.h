/* libpq through dlopen("libpq.so.5") on the first PostgreSQL use (dl.h). Included by
 * store_pg.c only: after this header, its PQ* calls go through the table, so the calls read as
 * libpq's own. */
#ifndef HARVEST_DL_PQ_H
#define HARVEST_DL_PQ_H

#include <libpq-fe.h>
#include <stddef.h>

#define HV_PQ_SONAME "libpq.so.5"

/* Every libpq function harvest calls. */
#define HV_PQ_FUNCS(X)                                                                   \
	X(PQclear)                                                                       \
	X(PQcmdTuples)                                                                   \
	X(PQconnectdbParams)                                                             \
	X(PQconsumeInput)                                                                \
	X(PQerrorMessage)                                                                \
	X(PQfinish)                                                                      \
	X(PQflush)                                                                       \
	X(PQgetResult)                                                                   \
	X(PQgetisnull)                                                                   \
	X(PQgetlength)                                                                   \
	X(PQgetvalue)                                                                    \
	X(PQisBusy)                                                                      \
	X(PQntuples)                                                                     \
	X(PQresultErrorField)                                                            \
	X(PQresultErrorMessage)                                                          \
	X(PQresultStatus)                                                                \
	X(PQsendQuery)                                                                   \
	X(PQsendQueryParams)                                                             \
	X(PQsetNoticeProcessor)                                                          \
	X(PQsetnonblocking)                                                              \
	X(PQsocket)                                                                      \
	X(PQstatus)

/* Each member has the type of a pointer to the function libpq-fe.h declares. */
/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator here, not an expression */
#define HV_PQ_MEMBER(f) __typeof__(f) *f;
struct hv__pq_api {
	HV_PQ_FUNCS(HV_PQ_MEMBER)
};
#undef HV_PQ_MEMBER

/* Filled by hv__pq_load; read only after it succeeded. */
extern struct hv__pq_api hv__pq;

/* Loads libpq once per process (thread-safe; a failure is retried on the next call): 0, or -1
 * with why = "cannot load libpq.so.5: <reason>". */
int hv__pq_load(char *why, size_t cap);

#ifndef HV_DL_PQ_IMPL
#define PQclear (hv__pq.PQclear)
#define PQcmdTuples (hv__pq.PQcmdTuples)
#define PQconnectdbParams (hv__pq.PQconnectdbParams)
#define PQconsumeInput (hv__pq.PQconsumeInput)
#define PQerrorMessage (hv__pq.PQerrorMessage)
#define PQfinish (hv__pq.PQfinish)
#define PQflush (hv__pq.PQflush)
#define PQgetResult (hv__pq.PQgetResult)
#define PQgetisnull (hv__pq.PQgetisnull)
#define PQgetlength (hv__pq.PQgetlength)
#define PQgetvalue (hv__pq.PQgetvalue)
#define PQisBusy (hv__pq.PQisBusy)
#define PQntuples (hv__pq.PQntuples)
#define PQresultErrorField (hv__pq.PQresultErrorField)
#define PQresultErrorMessage (hv__pq.PQresultErrorMessage)
#define PQresultStatus (hv__pq.PQresultStatus)
#define PQsendQuery (hv__pq.PQsendQuery)
#define PQsendQueryParams (hv__pq.PQsendQueryParams)
#define PQsetNoticeProcessor (hv__pq.PQsetNoticeProcessor)
#define PQsetnonblocking (hv__pq.PQsetnonblocking)
#define PQsocket (hv__pq.PQsocket)
#define PQstatus (hv__pq.PQstatus)
#endif

#endif

/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_ext_evd.h: public extensions of the evd libfabric provider.
 *
 * Everything here is reached through standard libfabric calls
 * (fi_open_ops, fi_control, bind flags); no standard call changes meaning.
 * See fi_evd(7).
 */
#ifndef FI_EXT_EVD_H
#define FI_EXT_EVD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Section 1: event queue extensions (issue 3).                          */
/* ===================================================================== */
/*
 * evd EQ extensions (fi_evd(7), section EVENT QUEUE).
 *
 * Obtained with
 *   struct fi_evd_eq_ops *ops;
 *   fi_open_ops(&eq->fid, FI_EVD_EQ_OPS_V1, 0, (void **)&ops, NULL);
 * on any evd EQ. Check ops->size before using members added later.
 */
#define FI_EVD_EQ_OPS_V1 "evd_eq_ops_v1"

/* Snapshot of an EQ's state (DAT's nmore and more). */
struct fi_evd_eq_depth {
	size_t   events;        /* entries queued: normal events + errors */
	size_t   errors;        /* of which error entries (fi_eq_readerr) */
	size_t   capacity;      /* entries fi_eq_write may fill (attr.size) */
	size_t   reserve;       /* extra entries kept for provider events */
	uint64_t lost;          /* provider events lost since the overrun */
	int      overrun;       /* 1 once the EQ has overrun (fatal) */
	uint32_t next_event;    /* event of the entry fi_eq_read would return */
	size_t   next_len;      /* bytes fi_eq_read needs for it (0 if none) */
	size_t   waiters;       /* threads blocked in fi_eq_sread / wait_n */
};

struct fi_evd_eq_ops {
	size_t size;            /* sizeof(struct fi_evd_eq_ops) of the provider */
	/*
	 * Blocks until at least `threshold` entries are queued (or an error
	 * entry is ready, or the EQ overran), then reads one event exactly like
	 * fi_eq_read (FI_PEEK honoured). *nmore (optional) receives the number
	 * of entries left after the read, or queued at timeout.
	 * Returns bytes read, -FI_EAVAIL (error ready: use fi_eq_readerr),
	 * -FI_EAGAIN (timeout; nothing dequeued), -FI_EINTR (woken by wake()),
	 * -FI_ECANCELED (EQ closed meanwhile), -FI_EINVAL (threshold 0 or larger
	 * than the EQ, or an EQ with FI_WAIT_NONE / FI_WAIT_SET).
	 * timeout is in milliseconds, negative means infinite.
	 */
	ssize_t (*wait_n)(struct fid_eq *eq, size_t threshold, int timeout,
			  uint32_t *event, void *buf, size_t len,
			  size_t *nmore, uint64_t flags);
	/* Fills *depth with a consistent snapshot. Returns 0. */
	int (*depth)(struct fid_eq *eq, struct fi_evd_eq_depth *depth);
	/*
	 * Wakes every thread blocked in fi_eq_sread (which returns -FI_EAGAIN
	 * if nothing is queued) or wait_n (-FI_EINTR) on this EQ at the time
	 * of the call. Not sticky: later waits block normally. Returns the
	 * number of threads that were blocked.
	 */
	int (*wake)(struct fid_eq *eq);
	/*
	 * Inserts an error entry (needs FI_WRITE like fi_eq_write). err->err
	 * must be > 0; err->err_data/err_data_size (up to the fi_eq_write
	 * maximum) are copied. Returns sizeof(struct fi_eq_err_entry) or a
	 * negative fabric errno (-FI_EOVERRUN when full).
	 */
	ssize_t (*write_err)(struct fid_eq *eq, const struct fi_eq_err_entry *err,
			     uint64_t flags);
};

/*
 * fi_control commands on an evd EQ (besides FI_GETWAIT and FI_GETWAITOBJ).
 * FI_EVD_EQ_GETDEPTH: arg is a struct fi_evd_eq_depth *.
 * FI_EVD_EQ_WAKE: arg is ignored; same as ops->wake.
 */
#define FI_EVD_EQ_GETDEPTH 0x65764501
#define FI_EVD_EQ_WAKE     0x65764502

/*
 * Provider error codes (prov_errno of struct fi_eq_err_entry) of the EQ
 * itself, of write_err, of an endpoint's terminal error caused by a failed
 * completion and of a resumable endpoint not joined again carry a class in bits 24..30 and a class specific code in bits
 * 0..23, so fi_eq_strerror can name what they mean. Records of other parts
 * keep their documented raw values (fi_evd(7)): ibv_event_type for async
 * events, rdma_cm status for CM errors.
 */
#define FI_EVD_PERR(cls, code) ((int)((((unsigned)(cls) & 0x7f) << 24) | \
				      ((unsigned)(code) & 0xffffff)))
#define FI_EVD_PERR_CLASS(e)   (((unsigned)(e) >> 24) & 0x7f)
#define FI_EVD_PERR_CODE(e)    ((int)((unsigned)(e) & 0xffffff))
enum fi_evd_perr_class {
	FI_EVD_PERR_EQ   = 0x45,  /* code: enum fi_evd_eq_perr ('E') */
	FI_EVD_PERR_USER = 0x55,  /* code: application defined ('U') */
	FI_EVD_PERR_WC   = 0x57,  /* code: enum ibv_wc_status of the completion
				     that ended the endpoint ('W') */
	FI_EVD_PERR_RESUME = 0x52, /* code: enum fi_evd_resume_reason: a
				     resumable endpoint not joined again ('R') */
};
enum fi_evd_eq_perr {
	FI_EVD_EQ_PERR_OVERRUN = 1,  /* provider events were lost: EQ overran */
};

/* ===================================================================== */
/* Section 2: hardware async events (issue 5).                           */
/* ===================================================================== */
/*
 * Hardware async events (ibv_get_async_event) become EQ records:
 *  - errors, read with fi_eq_readerr(): err is a positive FI_E* code,
 *    prov_errno is the enum ibv_event_type value, err_data points at a
 *    struct fi_evd_async_err (err_data_size == sizeof(struct fi_evd_async_err));
 *  - notifications, read with fi_eq_read() as FI_NOTIFY records (struct
 *    fi_eq_entry) whose data is encoded as described by FI_EVD_NOTIFY_*.
 * The full table (event -> record, err, target fid) is in fi_evd(7).
 */

/* Bind flag (provider-specific range, bits 60-63 of fabric.h) given to
 * fi_domain_bind(domain, eq, flags) or fi_ep_bind(ep, eq, flags): deliver
 * async notifications (PORT_ACTIVE, LID_CHANGE, COMM_EST, ...) as FI_NOTIFY
 * records. Without it only error records are delivered, so applications
 * that do not expect FI_NOTIFY keep working unchanged. */
#define FI_EVD_NOTIFY_ASYNC (1ULL << 61)

/* What an async event is about (fi_evd_async_err.object). */
enum fi_evd_async_object {
	FI_EVD_ASYNC_QP = 1,     /* a queue pair: the endpoint's fid */
	FI_EVD_ASYNC_CQ = 2,     /* a completion queue: the CQ's fid */
	FI_EVD_ASYNC_SRQ = 3,    /* a shared receive queue: the shared rx context's fid */
	FI_EVD_ASYNC_WQ = 4,     /* a work queue (RSS): its owner's fid */
	FI_EVD_ASYNC_PORT = 5,   /* a port: the domain's fid */
	FI_EVD_ASYNC_DEVICE = 6, /* the whole device: the domain's fid */
};

#define FI_EVD_ASYNC_MAGIC 0x41445645u /* "EVDA" in memory order */
#define FI_EVD_ASYNC_VERSION 1
#define FI_EVD_DEVNAME_MAX 64

/* err_data of every async error record. Fields that do not apply to the
 * event's object are 0 (port_num for QP/CQ/SRQ events, qp_num for port
 * events, ...). */
struct fi_evd_async_err {
	uint32_t magic;        /* FI_EVD_ASYNC_MAGIC */
	uint16_t version;      /* FI_EVD_ASYNC_VERSION */
	uint16_t size;         /* sizeof(struct fi_evd_async_err) */
	int32_t event_type;    /* enum ibv_event_type, same as prov_errno */
	uint32_t object;       /* enum fi_evd_async_object */
	char device[FI_EVD_DEVNAME_MAX]; /* ibv_get_device_name(), NUL-terminated */
	uint32_t port_num;     /* port events: the port (1-based) */
	uint32_t qp_num;       /* QP events: ibv_qp.qp_num */
	uint32_t cq_handle;    /* CQ events: ibv_cq.handle (kernel identity) */
	uint32_t srq_handle;   /* SRQ events: ibv_srq.handle (kernel identity) */
	uint32_t wq_num;       /* WQ events: ibv_wq.wq_num */
	uint32_t terminal;     /* 1 if this record ends its endpoint (no FI_SHUTDOWN follows) */
	struct fid *fid;       /* the fid the record is about (same as entry.fid) */
	uint64_t timestamp_ns; /* CLOCK_MONOTONIC when evd read the event from the device */
	uint64_t seq;          /* per-device sequence number of the event (1, 2, ...) */
};

/* FI_NOTIFY data of an async notification:
 *   bits  0..15  enum ibv_event_type
 *   bits 16..23  FI_EVD_NOTIFY_TAG (marks the record as an async notification)
 *   bits 24..31  port number (port events), else 0
 *   bits 32..63  QP number (QP events), SRQ handle (SRQ events),
 *                WQ number (WQ events), else 0 */
#define FI_EVD_NOTIFY_TAG 0xa5u
#define FI_EVD_NOTIFY_DATA(type, port, num)                                      \
	((uint64_t)((uint32_t)(type) & 0xffffu) | ((uint64_t)FI_EVD_NOTIFY_TAG << 16) | \
	 ((uint64_t)((port) & 0xffu) << 24) | ((uint64_t)(uint32_t)(num) << 32))
#define FI_EVD_NOTIFY_IS_ASYNC(data) ((((data) >> 16) & 0xffu) == FI_EVD_NOTIFY_TAG)
#define FI_EVD_NOTIFY_EVENT(data) ((int)((data) & 0xffffu))
#define FI_EVD_NOTIFY_PORT(data) ((unsigned)(((data) >> 24) & 0xffu))
#define FI_EVD_NOTIFY_NUM(data) ((uint32_t)((data) >> 32))

/* Snapshot of a domain's port, kept up to date from PORT_ERR/PORT_ACTIVE/... */
struct fi_evd_port_state {
	char device[FI_EVD_DEVNAME_MAX];
	uint32_t port_num;      /* the domain's port (1-based) */
	int32_t state;          /* enum ibv_port_state (IBV_PORT_ACTIVE, IBV_PORT_DOWN, ...) */
	int32_t last_event;     /* last port event seen (enum ibv_event_type), -1 if none */
	uint32_t reserved;
	uint64_t changes;       /* port events seen for this port since the domain opened */
	uint64_t last_change_ns;/* CLOCK_MONOTONIC of the last port event, 0 if none */
};

/* Async counters of the domain's device (shared by every domain on it). */
struct fi_evd_async_counters {
	uint64_t events;        /* async events read from the device */
	uint64_t delivered;     /* records posted to an EQ */
	uint64_t undeliverable; /* events with nowhere to go (logged with FI_WARN) */
	uint64_t suppressed;    /* notifications not requested (no FI_EVD_NOTIFY_ASYNC) */
};

/* fi_open_ops(&domain->fid, FI_EVD_ASYNC_OPS, 0, (void **)&ops, NULL) */
#define FI_EVD_ASYNC_OPS "evd_async_ops_v1"
struct fi_evd_async_ops {
	size_t size; /* sizeof(struct fi_evd_async_ops) */
	/* Fills *state with the domain's port snapshot. */
	int (*port_state)(struct fid_domain *domain, struct fi_evd_port_state *state);
	/* Fills *c with the counters of the domain's device. */
	int (*counters)(struct fid_domain *domain, struct fi_evd_async_counters *c);
	/* Arms the shared receive context `srx` (from fi_srx_context on this
	 * domain): when fewer than `limit` receives remain posted, one
	 * IBV_EVENT_SRQ_LIMIT_REACHED FI_NOTIFY record is delivered on the domain's
	 * EQ with fid = srx (also without FI_EVD_NOTIFY_ASYNC: arming is the
	 * request). The limit disarms when it fires; arm again to re-request.
	 * limit 0 disarms. Returns 0, -FI_EINVAL (not an evd srx of this domain),
	 * -FI_ENOSYS (device without SRQ limit support) or another -FI_E*. */
	int (*srq_arm)(struct fid_domain *domain, struct fid_ep *srx, size_t limit);
};

/*
 * Fail-fast on port loss (fi_evd(7), LINK AND PORT FAILURES). Off by default:
 * a port going down is then one FI_ENETDOWN record on the domain's EQ and the
 * connections through it live on until their transport gives up (or, idle,
 * forever), so a short flap costs nothing. On, IBV_EVENT_PORT_ERR also ends
 * every connected endpoint of the domain on that port at once: each gets one
 * terminal error record (err FI_ENETDOWN, prov_errno IBV_EVENT_PORT_ERR,
 * err_data a struct fi_evd_async_err with object FI_EVD_ASYNC_PORT, the port,
 * the endpoint's qp_num and terminal = 1) and its posted work is flushed to
 * its CQs (FI_ECANCELED), so the application can fail over at once.
 *
 *   int on = 1;
 *   fi_control(&domain->fid, FI_EVD_FAIL_FAST_SET, &on);   // or FI_EVD_FAIL_FAST=1
 *   fi_control(&domain->fid, FI_EVD_FAIL_FAST_GET, &on);   // *on = 0 or 1
 *
 * arg is an int *; anything but 0 or 1 is -FI_EINVAL. A domain starts with
 * the value of the FI_EVD_FAIL_FAST variable. The setting applies to ports
 * going down after the call.
 */
#define FI_EVD_FAIL_FAST_SET 0x65764401
#define FI_EVD_FAIL_FAST_GET 0x65764402

/*
 * Resumable connections (fi_evd(7), RESUMABLE CONNECTIONS): endpoints of the
 * domain enabled after the call keep every operation until it completes, so
 * that a connection whose queue pair fails (a link flap, a port lost, a
 * partition longer than the transport's retries) can be joined again within
 * this many milliseconds; 0 turns it off.
 *
 *   int ms = 30000;
 *   fi_control(&domain->fid, FI_EVD_RESUME_TIMEOUT_SET, &ms); // or FI_EVD_RESUME_TIMEOUT=30000
 *   fi_control(&domain->fid, FI_EVD_RESUME_TIMEOUT_GET, &ms);
 *
 * arg is an int *; a value outside 0..FI_EVD_RESUME_TIMEOUT_MAX is
 * -FI_EINVAL. A domain starts with the FI_EVD_RESUME_TIMEOUT variable.
 * FI_EVD_RESUME_TIMEOUT_GET on an enabled FI_EP_MSG endpoint reads what it
 * was enabled with: 0 when it is not resumable.
 * A connection is resumable when both sides' domains resume and the
 * passive endpoint shares its listener's EQ (fi_evd(7), RESUMABLE
 * CONNECTIONS).
 */
#define FI_EVD_RESUME_TIMEOUT_SET 0x65764405
#define FI_EVD_RESUME_TIMEOUT_GET 0x65764406
#define FI_EVD_RESUME_TIMEOUT_MAX 3600000

/*
 * The terminal record of a resumable endpoint that could not be joined
 * again: prov_errno is FI_EVD_PERR(FI_EVD_PERR_RESUME, reason) and err_data
 * (err_data_size bytes) a struct fi_evd_resume_err, which fi_eq_strerror
 * reads. Every operation still posted completes with FI_ECANCELED and its
 * own context, ahead of it, as without resumption (fi_evd(7)).
 */
enum fi_evd_resume_reason {
	FI_EVD_RESUME_DEADLINE = 1,      /* not joined again within the deadline */
	FI_EVD_RESUME_REFUSED = 2,       /* the peer refused (see refusal) */
	FI_EVD_RESUME_PEER_GONE = 3,     /* nobody listens at the peer's address */
	FI_EVD_RESUME_VERDICT = 4,       /* an operation in doubt could be neither
					    repeated nor known done (an atomic
					    whose result was lost, a read the
					    peer may have acted after) */
	FI_EVD_RESUME_NOT_TRANSIENT = 5, /* the failure is not one to ride through */
};
enum fi_evd_resume_refusal {           /* why a peer refused, as it said */
	FI_EVD_RESUME_REFUSED_UNKNOWN = 1, /* it knows no such connection */
	FI_EVD_RESUME_REFUSED_PEER = 2,    /* not from the connection's address */
	FI_EVD_RESUME_REFUSED_STALE = 3,   /* an attempt older than one it took */
	FI_EVD_RESUME_REFUSED_ENDED = 4,   /* its end of the connection is over */
	FI_EVD_RESUME_REFUSED_VERDICT = 5, /* its accounting ended the connection */
	FI_EVD_RESUME_REFUSED_MALFORMED = 6,
	FI_EVD_RESUME_REFUSED_BUSY = 7,    /* short of memory or a QP: the last
					      attempt's answer, tried again */
};
enum fi_evd_resume_cause {              /* what failed first */
	FI_EVD_RESUME_CAUSE_COMPLETION = 1, /* code: an ibv_wc_status */
	FI_EVD_RESUME_CAUSE_ASYNC = 2,      /* code: an ibv_event_type */
	FI_EVD_RESUME_CAUSE_CM = 3,         /* code: an rdma_cm_event_type */
};
#define FI_EVD_RESUME_ERR_MAGIC 0x52445645u /* "EVDR" in memory order on little-endian hosts */
#define FI_EVD_RESUME_ERR_VERSION 1
struct fi_evd_resume_err {             /* 40 bytes, no padding */
	uint32_t magic;        /* FI_EVD_RESUME_ERR_MAGIC */
	uint16_t version;      /* FI_EVD_RESUME_ERR_VERSION */
	uint16_t size;         /* sizeof(struct fi_evd_resume_err) of the provider */
	uint32_t reason;       /* enum fi_evd_resume_reason */
	uint32_t attempts;     /* in this outage: requests sent (active side) or
				  accepted (passive) */
	uint64_t outage_ms;    /* from the failure to this record */
	uint32_t cause_source; /* enum fi_evd_resume_cause */
	int32_t  cause_code;   /* its ibv_wc_status, ibv_event_type or
				  rdma_cm_event_type */
	uint32_t refusal;      /* FI_EVD_RESUME_REFUSED: enum fi_evd_resume_refusal */
	uint32_t generation;   /* the last attempt's generation */
};

/*
 * Registration cache (fi_evd(7), REGISTRATION CACHE): the counters of a
 * domain's cache.
 *
 *   struct fi_evd_mr_cache_stats st;
 *   fi_control(&domain->fid, FI_EVD_MR_CACHE_STATS, &st);
 *
 * Returns 0, or -FI_ENOSYS when the domain has no cache (FI_EVD_MR_CACHE_MAX_COUNT=0,
 * FI_EVD_MR_CACHE_MONITOR=disabled, or no userfaultfd).
 */
#define FI_EVD_MR_CACHE_STATS 0x65764403
struct fi_evd_mr_cache_stats {
	uint64_t hits;          /* fi_mr_reg answered with a cached registration */
	uint64_t misses;        /* not found in the cache */
	uint64_t registrations; /* ibv_reg_mr calls the cache made */
	uint64_t invalidations; /* entries dropped because their memory was unmapped,
	                           moved or discarded */
	uint64_t evictions;     /* unused entries dropped for room */
	uint64_t uncached;      /* misses registered outside the cache (memory that
	                           cannot be watched, a change during registration,
	                           no room) */
	uint64_t entries;       /* entries cached now */
	uint64_t bytes;         /* bytes they register */
};

/*
 * QP reuse (fi_evd(7), QP REUSE): the counters of a domain's kept queue pairs.
 *
 *   struct fi_evd_qp_pool_stats st;
 *   fi_control(&domain->fid, FI_EVD_QP_POOL_STATS, &st);
 *
 * Returns 0 (with FI_EVD_QP_POOL_SIZE=0 nothing is kept or reused, and
 * every endpoint counts as created).
 */
#define FI_EVD_QP_POOL_STATS 0x65764404
struct fi_evd_qp_pool_stats {
	uint64_t reused;    /* endpoints that took a kept QP */
	uint64_t created;   /* endpoints that created one (none compatible was idle) */
	uint64_t retired;   /* closed endpoints' QPs kept to wait out the time-wait */
	uint64_t discarded; /* closed endpoints' QPs destroyed instead (the connection
	                       did not end cleanly, the flush did not complete, the
	                       pool was full or off) */
	uint64_t waiting;   /* kept QPs waiting for their time-wait to end, now */
	uint64_t idle;      /* kept QPs reset and ready, now */
};

/* ===================================================================== */
/* Section 3: connection management (issue 4).                           */
/* ===================================================================== */
/*
 * Connection data: evd prefixes a 4-byte header of its own to the private
 * data of fi_connect/fi_accept/fi_reject; the user may send at most
 * FI_EVD_CM_DATA_MAX bytes with each (= FI_OPT_CM_DATA_SIZE). More is
 * -FI_EINVAL.
 */
#define FI_EVD_CM_DATA_MAX 52

/*
 * prov_errno of an FI_ECONNREFUSED error (RDMA_CM_EVENT_REJECTED): the IB CM
 * reject reason. FI_EVD_CM_REJ_CONSUMER means the peer called fi_reject
 * (err_data then holds its data); FI_EVD_CM_REJ_NO_LISTENER means nobody
 * listens on that port; on iWARP, whose rejects are errnos, evd gives them
 * these two reasons as well (fi_evd(7), IWARP). Other values are transport
 * rejects. For the other
 * connection errors prov_errno is rdma_cm's event status (a negative errno);
 * RDMA_CM_EVENT_DEVICE_REMOVAL (FI_ENODEV) comes with status 0 and gets
 * -ENODEV.
 */
#define FI_EVD_CM_REJ_CONSUMER 28
#define FI_EVD_CM_REJ_NO_LISTENER 8

#ifdef __cplusplus
}
#endif
#endif /* FI_EXT_EVD_H */

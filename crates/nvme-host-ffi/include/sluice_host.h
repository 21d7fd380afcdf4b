/*
 * sluice_host.h - C API of libsluice_host, Sluice's NVMe/TCP host (initiator).
 *
 * Written by hand to match crates/nvme-host-ffi/src/lib.rs; the struct sizes are
 * pinned on both sides (static asserts here, const asserts in Rust).
 *
 * Link with -lsluice_host (shared), or with libsluice_host.a plus
 * -lpthread -ldl -lm (static; the archive contains the Rust standard library).
 *
 * Return values: every function returning int returns >= 0 on success and a
 * negative errno on failure (-EINVAL bad argument, -ECONNREFUSED, -ETIMEDOUT,
 * -ECONNRESET, -ENODEV inactive namespace, -EBUSY, -EIO, ...). The text of the last
 * failure on the calling thread is sluice_last_error(). No Rust panic ever unwinds
 * into the caller: a panic inside the library is reported as -EIO, and a queue
 * that panicked refuses further work.
 *
 * Threads: a sluice_controller may be used from several threads at once
 * (namespace_info, take_queue). A sluice_queue belongs to one thread at a time:
 * no two calls on the same queue may overlap; it may move between threads.
 *
 * Requests: a submitted request (read, write, flush, trim) that returns 0 produces
 * exactly one sluice_completion, carrying its user_tag, from a later sluice_reap on
 * the same queue - also when the connection fails (then with error != 0). A
 * submit that returns < 0 queued nothing. Requests larger than the maximum data
 * transfer size are split into several NVMe commands and completed as one;
 * requests beyond the queue depth wait in a backlog inside the library and are sent
 * as completions free room (sluice_reap drives that), so a submit never fails just
 * because the queue is full.
 *
 * Buffer lifetime contract:
 *   - write: the data is copied before sluice_submit_write returns; the caller may
 *     reuse its buffer at once.
 *   - write in place: sluice_submit_write_in_place sends the data straight from
 *     `buf`, without a copy, so `buf` must stay valid and unchanged until
 *     sluice_reap returns the request's completion (or sluice_queue_release
 *     returns): a retry, a reconnect or a failover sends it again from there. The
 *     library reads it only during sluice_* calls on that queue, on the calling
 *     thread.
 *   - read: `buf` must stay valid and writable for blocks * block_size bytes until
 *     sluice_reap returns the request's completion (or sluice_queue_release is
 *     called). The library writes to it only during sluice_reap calls on that
 *     queue, on the calling thread; its contents are undefined until the completion
 *     with error == 0 is returned. After sluice_queue_release returns, no buffer is
 *     touched again.
 */
#ifndef SLUICE_HOST_H
#define SLUICE_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_DEFAULT_PORT 4420

typedef struct sluice_controller sluice_controller;
typedef struct sluice_queue sluice_queue;

/*
 * Connect options. Initialise with sluice_connect_options_init() (all zero): every
 * zero numeric field means "the library's default".
 */
struct sluice_connect_options {
	const char *traddr;   /* IPv4/IPv6 address or host name (required) */
	const char *subnqn;   /* subsystem NQN (required) */
	const char *hostnqn;  /* host NQN; NULL or "" = the library's default; a UUID
	                         NQN (nqn.2014-08.org.nvmexpress:uuid:...) also sets HOSTID */
	uint16_t trsvcid;     /* TCP port; 0 = 4420 */
	uint16_t nr_io_queues;/* I/O queues to create; 0 = 1 */
	uint16_t queue_size;  /* entries per I/O queue (depth + 1); 0 = default */
	uint16_t io_mode;     /* how I/O queues wait: SLUICE_IO_* below; 0 = adaptive */
	int32_t hdr_digest;   /* non-zero: ask for the PDU header digest (CRC32C) */
	int32_t data_digest;  /* non-zero: ask for the PDU data digest (CRC32C) */
	uint32_t keep_alive_timeout_ms;      /* KATO; 0 = default */
	uint32_t command_timeout_ms;         /* per command; 0 = default */
	uint32_t connect_timeout_ms;         /* TCP connect + Connect command; 0 = default */
	uint32_t reconnect_delay_ms;         /* between reconnect attempts; 0 = default */
	uint32_t controller_loss_timeout_ms; /* give up reconnecting; 0 = default */
	uint32_t max_transfer_bytes;         /* split requests above this; 0 = the
	                                        controller's limit (MDTS) */
	const char *tls_key;  /* NVMe/TCP over TLS 1.3 with this PSK (NVMeTLSkey-1:...,
	                         as `nvme gen-tls-key` prints it); NULL or "" = no TLS */
	uint32_t tls_flags;   /* SLUICE_TLS_* below; 0 = identity format 1, RFC 8446 keys */
	uint32_t reserved;    /* zero */
};

/* tls_flags bits. */
#define SLUICE_TLS_IDENTITY_V0 1u /* offer only a format 0 identity (NVMe0R0x host subsystem); without it: format 1, then 0 if refused */
#define SLUICE_TLS_COMPAT 2u      /* derive keys as libnvme before 1.16 does */

/* io_mode values. The ring modes drive each I/O queue on an io_uring ring of the
 * thread that uses it; blocking uses blocking sockets (no io_uring). */
#define SLUICE_IO_ADAPTIVE 0  /* spin while completions keep coming (50 us), then sleep */
#define SLUICE_IO_BUSY_POLL 1 /* spin always: lowest latency, a full core */
#define SLUICE_IO_SLEEP 2     /* never spin: least CPU */
#define SLUICE_IO_BLOCKING 3

/* One finished request. */
struct sluice_completion {
	uint64_t user_tag; /* as given to the submit call */
	int32_t error;     /* 0 ok; negative errno: -EIO for an NVMe error status
	                      (see sct/sc), the transport's error if the queue failed */
	uint8_t sct;       /* NVMe status code type of the first failing command */
	uint8_t sc;        /* NVMe status code */
	uint8_t dnr;       /* 1 if that status has Do Not Retry set */
	uint8_t reserved;
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct sluice_connect_options) == 80, "sluice_connect_options layout");
_Static_assert(sizeof(struct sluice_completion) == 16, "sluice_completion layout");
#endif

/* Zero the options (= all defaults). */
void sluice_connect_options_init(struct sluice_connect_options *opts);

/* Connect to a controller: admin queue and opts->nr_io_queues I/O queues. */
int sluice_connect(const struct sluice_connect_options *opts, sluice_controller **out);

/* Connect namespace `nsid` through several paths (native NVMe multipath):
 * opts->traddr is a comma-separated list, each entry "host", "host:port" or
 * "[v6]:port" (opts->trsvcid for entries without a port); every other option
 * applies to every path. One controller per path; I/O goes to optimized paths
 * (ANA), to non-optimized ones only when no optimized path is up, never to
 * inaccessible ones, least queue depth first; a command that fails with a path
 * error (the connection dropped, an ANA status, a timeout) is sent again on
 * another path (bounded retries with backoff, never past command_timeout_ms).
 * At least one path must connect. The handle then serves `nsid` only; queues,
 * submission and reaping work as for sluice_connect. */
int sluice_connect_multipath(const struct sluice_connect_options *opts, uint32_t nsid,
                             sluice_controller **out);

/* Number of I/O queues the controller granted. */
int sluice_controller_io_queue_count(sluice_controller *ctrl);

/* Namespace size in blocks and block size in bytes (Identify Namespace; cached).
 * -ENODEV if the namespace is not active. Either output may be NULL. */
int sluice_controller_namespace_info(sluice_controller *ctrl, uint32_t nsid,
                                     uint64_t *blocks, uint32_t *block_size);

/* Take I/O queue `index` (0 .. io_queue_count-1). Each queue can be taken once;
 * -EBUSY if it already was. */
int sluice_take_queue(sluice_controller *ctrl, unsigned int index, sluice_queue **out);

/* NVMe commands the queue keeps in flight at most. */
int sluice_queue_depth(sluice_queue *q);

/* Requests submitted whose completion has not been reaped yet. */
int sluice_queue_outstanding(sluice_queue *q);

/* Read `blocks` logical blocks at `lba` into `buf` (see the lifetime contract). */
int sluice_submit_read(sluice_queue *q, uint32_t nsid, uint64_t lba, uint32_t blocks,
                       void *buf, uint64_t user_tag);

/* Write `blocks` logical blocks at `lba` from `buf` (copied); fua != 0 sets FUA. */
int sluice_submit_write(sluice_queue *q, uint32_t nsid, uint64_t lba, uint32_t blocks,
                        const void *buf, int fua, uint64_t user_tag);

/* Write `blocks` logical blocks at `lba` straight from `buf` (not copied: see the
 * lifetime contract); fua != 0 sets FUA. */
int sluice_submit_write_in_place(sluice_queue *q, uint32_t nsid, uint64_t lba, uint32_t blocks,
                                 const void *buf, int fua, uint64_t user_tag);

/* Flush the namespace's volatile write cache. */
int sluice_submit_flush(sluice_queue *q, uint32_t nsid, uint64_t user_tag);

/* Deallocate (trim) `blocks` blocks at `lba` (Dataset Management, AD). */
int sluice_submit_trim(sluice_queue *q, uint32_t nsid, uint64_t lba, uint64_t blocks,
                       uint64_t user_tag);

/*
 * Reap completions into out[0 .. max-1]. Waits until at least `min` are there or
 * `timeout_ms` passed (< 0: no limit; 0: just poll); returns early with fewer than
 * `min` when fewer requests are outstanding. Returns the number written (0 .. max)
 * or a negative errno. Read data is copied into the read buffers here.
 */
int sluice_reap(sluice_queue *q, unsigned int min, unsigned int max, int timeout_ms,
                struct sluice_completion *out);

/* Release a queue (NULL: no-op). Outstanding requests are abandoned. */
int sluice_queue_release(sluice_queue *q);

/* Disconnect and free (NULL: no-op). -EBUSY, with the handle still valid, while a
 * queue of this controller is not released. On any other result the handle is gone. */
int sluice_disconnect(sluice_controller *ctrl);

/* Last error message of the calling thread ("" if none); valid until the next
 * failing call on this thread. */
const char *sluice_last_error(void);

/* Library version string. */
const char *sluice_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_HOST_H */

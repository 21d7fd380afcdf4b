/*
 * fio external ioengine "sluice": runs fio jobs over Sluice's userspace NVMe/TCP
 * host (libsluice_host, crates/nvme-host-ffi) instead of the kernel's.
 *
 *   fio --ioengine=external:/path/to/libsluice_fio.so \
 *       --traddr=127.0.0.1 --trsvcid=4420 --subnqn=nqn.2026-11.io.sluice:default \
 *       --nsid=1 --rw=randread --bs=4k --iodepth=32 --size=64m ...
 *
 * Multipath: several addresses in traddr (comma-separated, each "host" or
 * "host:port") reach one namespace through every path, ANA-aware with failover:
 *
 *   --traddr=127.0.0.1:4420,127.0.0.1:4421 --subnqn=... --nsid=1
 *
 * or name the target in the filename (each ':' escaped, fio splits file names at
 * unescaped colons):
 *
 *   --filename='tcp\://127.0.0.1\:4420/nqn.2026-11.io.sluice\:default/1'
 *
 * Model: every fio job (thread or process, numjobs clones included) connects its
 * own controller with one I/O queue in ->init, in the job's own process or thread,
 * and disconnects in ->cleanup. ->setup (which fio runs in the main process before
 * it forks the jobs) only probes the target: connect, Identify Namespace for each
 * file, disconnect; it sets each file's size from the namespace. Each fio "file" is
 * one namespace; all files of one job must be on the same controller.
 *
 * Asynchronous: ->queue submits and returns FIO_Q_QUEUED; ->getevents reaps with
 * sluice_reap. The library splits requests above the controller's transfer size and
 * holds back commands beyond the queue depth, so ->queue never returns FIO_Q_BUSY.
 *
 * Built against the headers of the same fio version as the fio binary that loads
 * it (scripts/build-fio-engine.sh), since an external engine shares fio's structs.
 * Only functions the fio binary exports dynamically may be called from here (the
 * build script checks the undefined symbols of the result).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include "sluice_host.h"

#define SLUICE_ENGINE_NAME "sluice"
#define SLUICE_URL_PREFIX "tcp://"
/* NVMe NQNs are at most 223 bytes; addresses are host names or IP literals. */
#define SLUICE_MAX_NQN 256
#define SLUICE_MAX_ADDR 256
/* Default I/O queue size: enough for iodepth commands (split ones included), at
 * most the Linux host's default of 128 (every target accepts it); the library keeps
 * any excess in its backlog. */
#define SLUICE_QUEUE_SIZE_MIN 32
#define SLUICE_QUEUE_SIZE_MAX 128
#define SLUICE_DEFAULT_MAX_TRANSFER (128 * 1024)

struct sluice_fio_options {
	void *pad; /* fio: an option's offset must not be 0 */
	char *traddr;
	unsigned int trsvcid;
	char *subnqn;
	char *hostnqn;
	unsigned int nsid;
	unsigned int hdr_digest;
	unsigned int data_digest;
	char *host_io;
	unsigned int queue_size;
	unsigned int max_transfer;
	unsigned int command_timeout_ms;
	unsigned int keep_alive_ms;
	unsigned int reconnect_delay_ms;
	unsigned int ctrl_loss_tmo_ms;
	char *tls_key;
	unsigned int tls_identity;
	unsigned int tls_compat;
};

static struct fio_option options[] = {
	{
		.name = "traddr",
		.lname = "NVMe/TCP target address",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct sluice_fio_options, traddr),
		.help = "NVMe/TCP target address (IP or host name); a comma-separated list of host[:port] for multipath",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "trsvcid",
		.lname = "NVMe/TCP target port",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, trsvcid),
		.def = "4420",
		.minval = 1,
		.maxval = 65535,
		.help = "NVMe/TCP target port",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "subnqn",
		.lname = "Subsystem NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct sluice_fio_options, subnqn),
		.help = "NVMe subsystem NQN to connect to",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "hostnqn",
		.lname = "Host NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct sluice_fio_options, hostnqn),
		.help = "Host NQN to connect as (default: the library's)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "nsid",
		.lname = "Namespace ID",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, nsid),
		.def = "1",
		.minval = 1,
		.help = "Namespace to do I/O on (when the filename does not name one)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "tls_key",
		.lname = "TLS pre-shared key",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct sluice_fio_options, tls_key),
		.help = "NVMe/TCP over TLS 1.3 with this PSK (NVMeTLSkey-1:..., as nvme gen-tls-key prints it); "
			"the SLUICE_TLS_KEY environment variable when unset",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "tls_identity",
		.lname = "TLS PSK identity format",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, tls_identity),
		.def = "1",
		.minval = 0,
		.maxval = 1,
		.help = "PSK identity format offered: 1 (with the PSK digest, then 0 if the target refuses it) or 0 (NQNs only)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "tls_compat",
		.lname = "TLS key derivation of libnvme before 1.16",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct sluice_fio_options, tls_compat),
		.def = "0",
		.help = "derive TLS keys as libnvme before 1.16 does",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "host_io",
		.lname = "How the host waits",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct sluice_fio_options, host_io),
		.def = "adaptive",
		.help = "adaptive (spin while completions keep coming, then sleep), busy-poll, sleep, or blocking (no io_uring)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "hdr_digest",
		.lname = "Header digest",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct sluice_fio_options, hdr_digest),
		.def = "0",
		.help = "Use the NVMe/TCP PDU header digest (CRC32C)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "data_digest",
		.lname = "Data digest",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct sluice_fio_options, data_digest),
		.def = "0",
		.help = "Use the NVMe/TCP PDU data digest (CRC32C)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "queue_size",
		.lname = "I/O queue size",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, queue_size),
		.def = "0",
		.maxval = 65535,
		.help = "NVMe I/O queue entries (0: from iodepth and bs, 32..128)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "max_transfer",
		.lname = "Largest command",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, max_transfer),
		.def = "0",
		.help = "Split I/Os into NVMe commands of at most this many bytes (0: the controller's MDTS)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "command_timeout_ms",
		.lname = "Command timeout",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, command_timeout_ms),
		.def = "0",
		.help = "Per-command timeout in ms (0: the library's default)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "keep_alive_ms",
		.lname = "Keep-alive timeout",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, keep_alive_ms),
		.def = "0",
		.help = "Keep-alive timeout (KATO) in ms (0: the library's default)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "reconnect_delay_ms",
		.lname = "Reconnect delay",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, reconnect_delay_ms),
		.def = "0",
		.help = "Pause between reconnect attempts in ms (0: the library's default)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "ctrl_loss_tmo_ms",
		.lname = "Controller loss timeout",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct sluice_fio_options, ctrl_loss_tmo_ms),
		.def = "0",
		.help = "Give up reconnecting (fail outstanding I/O) after this many ms (0: the library's default)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/* Where a file lives: parsed from the filename or the options. */
struct sluice_target {
	char traddr[SLUICE_MAX_ADDR];
	uint16_t port;
	char subnqn[SLUICE_MAX_NQN];
	uint32_t nsid;
};

/* Per file (f->engine_data). */
struct sluice_file {
	struct sluice_target target;
	uint32_t block_size;
	uint64_t blocks;
};

/* Per job (td->io_ops_data). */
struct sluice_data {
	sluice_controller *ctrl;
	sluice_queue *queue;
	struct sluice_target target; /* the controller all files share */
	struct io_u **events;
	struct sluice_completion *completions;
	unsigned int nr_events;
	unsigned int max_events;
	int reported_status; /* log only the first NVMe error status */
};

static int fio_sluice_parse_target(struct thread_data *td, const char *name,
			       struct sluice_target *t)
{
	struct sluice_fio_options *o = td->eo;
	const char *rest, *slash;
	size_t len;

	memset(t, 0, sizeof(*t));
	t->port = o->trsvcid ? o->trsvcid : SLUICE_DEFAULT_PORT;
	t->nsid = o->nsid ? o->nsid : 1;

	if (strncmp(name, SLUICE_URL_PREFIX, strlen(SLUICE_URL_PREFIX)) != 0) {
		/* a plain label; the options name the target */
		if (!o->traddr || !*o->traddr || !o->subnqn || !*o->subnqn) {
			log_err("sluice: set traddr= and subnqn= (or filename=tcp\\://ADDR\\:PORT/SUBNQN/NSID, colons escaped)\n");
			return 1;
		}
		snprintf(t->traddr, sizeof(t->traddr), "%s", o->traddr);
		snprintf(t->subnqn, sizeof(t->subnqn), "%s", o->subnqn);
		return 0;
	}

	/* tcp://ADDR[:PORT]/SUBNQN[/NSID]; ADDR may be [IPv6] */
	rest = name + strlen(SLUICE_URL_PREFIX);
	slash = strchr(rest, '/');
	if (!slash || slash == rest) {
		log_err("sluice: filename '%s': expected tcp://ADDR:PORT/SUBNQN/NSID\n", name);
		return 1;
	}
	{
		const char *host = rest, *host_end = slash, *colon = NULL;
		char port[16];

		if (*host == '[') {
			const char *close = memchr(host, ']', slash - host);

			if (!close) {
				log_err("sluice: filename '%s': unterminated [IPv6] address\n", name);
				return 1;
			}
			host++;
			host_end = close;
			if (close + 1 < slash && close[1] == ':')
				colon = close + 1;
		} else {
			colon = memchr(host, ':', slash - host);
			if (colon)
				host_end = colon;
		}
		len = host_end - host;
		if (!len || len >= sizeof(t->traddr)) {
			log_err("sluice: filename '%s': bad address\n", name);
			return 1;
		}
		memcpy(t->traddr, host, len);
		if (colon) {
			char *end;
			unsigned long p;

			len = slash - colon - 1;
			if (!len || len >= sizeof(port)) {
				log_err("sluice: filename '%s': bad port\n", name);
				return 1;
			}
			memcpy(port, colon + 1, len);
			port[len] = '\0';
			p = strtoul(port, &end, 10);
			if (*end || !p || p > 65535) {
				log_err("sluice: filename '%s': bad port '%s'\n", name, port);
				return 1;
			}
			t->port = p;
		}
	}

	rest = slash + 1;
	len = strlen(rest);
	slash = strrchr(rest, '/');
	if (slash && slash[1]) {
		char *end;
		unsigned long n = strtoul(slash + 1, &end, 10);

		if (*end || !n || n >= 0xffffffffUL) {
			log_err("sluice: filename '%s': bad namespace id '%s'\n", name, slash + 1);
			return 1;
		}
		t->nsid = n;
		len = slash - rest;
	} else if (slash) {
		len = slash - rest; /* trailing '/' */
	}
	if (!len || len >= sizeof(t->subnqn)) {
		log_err("sluice: filename '%s': bad subsystem NQN\n", name);
		return 1;
	}
	memcpy(t->subnqn, rest, len);
	return 0;
}

static int fio_sluice_same_controller(const struct sluice_target *a, const struct sluice_target *b)
{
	return a->port == b->port && !strcmp(a->traddr, b->traddr) &&
	       !strcmp(a->subnqn, b->subnqn);
}

/* Largest block size of any data direction the job uses. */
static unsigned long long fio_sluice_max_bs(struct thread_data *td)
{
	unsigned long long bs = td->o.max_bs[DDIR_READ];

	if (td->o.max_bs[DDIR_WRITE] > bs)
		bs = td->o.max_bs[DDIR_WRITE];
	if (td->o.max_bs[DDIR_TRIM] > bs)
		bs = td->o.max_bs[DDIR_TRIM];
	return bs;
}

static int fio_sluice_connect_target(struct thread_data *td, const struct sluice_target *t,
				 sluice_controller **ctrl)
{
	struct sluice_fio_options *o = td->eo;
	struct sluice_connect_options opts;
	int ret;

	sluice_connect_options_init(&opts);
	opts.traddr = t->traddr;
	opts.trsvcid = t->port;
	opts.subnqn = t->subnqn;
	opts.hostnqn = o->hostnqn && *o->hostnqn ? o->hostnqn : NULL;
	opts.nr_io_queues = 1;
	if (!o->host_io || !*o->host_io || !strcmp(o->host_io, "adaptive")) {
		opts.io_mode = SLUICE_IO_ADAPTIVE;
	} else if (!strcmp(o->host_io, "busy-poll")) {
		opts.io_mode = SLUICE_IO_BUSY_POLL;
	} else if (!strcmp(o->host_io, "sleep")) {
		opts.io_mode = SLUICE_IO_SLEEP;
	} else if (!strcmp(o->host_io, "blocking")) {
		opts.io_mode = SLUICE_IO_BLOCKING;
	} else {
		log_err("sluice: host_io=%s: expected adaptive, busy-poll, sleep or blocking\n", o->host_io);
		return -EINVAL;
	}
	opts.hdr_digest = o->hdr_digest;
	opts.data_digest = o->data_digest;
	opts.command_timeout_ms = o->command_timeout_ms;
	opts.keep_alive_timeout_ms = o->keep_alive_ms;
	opts.reconnect_delay_ms = o->reconnect_delay_ms;
	opts.controller_loss_timeout_ms = o->ctrl_loss_tmo_ms;
	opts.max_transfer_bytes = o->max_transfer;
	/* The environment keeps the key out of job files and the process list. */
	opts.tls_key = o->tls_key && *o->tls_key ? o->tls_key : getenv("SLUICE_TLS_KEY");
	opts.tls_flags = (o->tls_identity == 0 ? SLUICE_TLS_IDENTITY_V0 : 0) | (o->tls_compat ? SLUICE_TLS_COMPAT : 0);
	if (o->queue_size) {
		opts.queue_size = o->queue_size;
	} else {
		unsigned long long max_transfer = o->max_transfer ? o->max_transfer : SLUICE_DEFAULT_MAX_TRANSFER;
		unsigned long long per_io = (fio_sluice_max_bs(td) + max_transfer - 1) / max_transfer;
		unsigned long long want = (unsigned long long)td->o.iodepth * (per_io ? per_io : 1) + 1;

		if (want < SLUICE_QUEUE_SIZE_MIN)
			want = SLUICE_QUEUE_SIZE_MIN;
		if (want > SLUICE_QUEUE_SIZE_MAX)
			want = SLUICE_QUEUE_SIZE_MAX;
		opts.queue_size = want;
	}

	/* Several addresses in traddr: one namespace through every one of them. */
	if (strchr(t->traddr, ','))
		ret = sluice_connect_multipath(&opts, t->nsid, ctrl);
	else
		ret = sluice_connect(&opts, ctrl);
	if (ret < 0) {
		log_err("sluice: %s\n", sluice_last_error());
		return ret;
	}
	return 0;
}

static struct sluice_data *fio_sluice_get_data(struct thread_data *td)
{
	struct sluice_data *sd = td->io_ops_data;

	if (!sd) {
		sd = calloc(1, sizeof(*sd));
		td->io_ops_data = sd;
	}
	return sd;
}

/*
 * Runs in the main fio process (before the jobs fork), once per job: names a
 * default file if there is none, parses every file's target, and probes the
 * namespaces for their size. The probe connection is closed again here.
 */
static int fio_sluice_setup(struct thread_data *td)
{
	struct sluice_fio_options *o = td->eo;
	struct sluice_data *sd = fio_sluice_get_data(td);
	sluice_controller *ctrl = NULL;
	struct fio_file *f;
	unsigned int i;
	int ret = 0;

	if (!sd) {
		log_err("sluice: out of memory\n");
		return 1;
	}
	if (!td->files_index) {
		char name[64];

		snprintf(name, sizeof(name), "sluice-ns%u", o->nsid ? o->nsid : 1);
		add_file(td, name, 0, 0);
		td->o.nr_files = td->o.nr_files ? : 1;
		td->o.open_files++;
	}

	for_each_file(td, f, i) {
		struct sluice_file *sf = f->engine_data;

		if (!sf) {
			sf = calloc(1, sizeof(*sf));
			if (!sf) {
				log_err("sluice: out of memory\n");
				return 1;
			}
			f->engine_data = sf;
		}
		if (fio_sluice_parse_target(td, f->file_name, &sf->target))
			return 1;
		if (i == 0) {
			sd->target = sf->target;
		} else if (!fio_sluice_same_controller(&sd->target, &sf->target)) {
			log_err("sluice: file %s is on another controller than %s: "
				"use one job per controller\n", f->file_name, td->files[0]->file_name);
			return 1;
		}
	}

	if (fio_sluice_connect_target(td, &sd->target, &ctrl))
		return 1;

	for_each_file(td, f, i) {
		struct sluice_file *sf = f->engine_data;
		int rc = sluice_controller_namespace_info(ctrl, sf->target.nsid, &sf->blocks,
							  &sf->block_size);

		if (rc < 0) {
			log_err("sluice: namespace %u of %s: %s\n", sf->target.nsid,
				sf->target.subnqn, sluice_last_error());
			ret = 1;
			break;
		}
		f->real_file_size = sf->blocks * sf->block_size;
		f->filetype = FIO_TYPE_BLOCK;
		fio_file_set_size_known(f);

		for (int ddir = 0; ddir < DDIR_RWDIR_CNT; ddir++) {
			if (td->o.min_bs[ddir] % sf->block_size || td->o.max_bs[ddir] % sf->block_size) {
				log_err("sluice: bs for %s (%llu..%llu) is not a multiple of the "
					"%u-byte blocks of namespace %u\n", io_ddir_name(ddir),
					td->o.min_bs[ddir], td->o.max_bs[ddir], sf->block_size,
					sf->target.nsid);
				ret = 1;
				break;
			}
		}
		if (ret)
			break;
	}

	if (sluice_disconnect(ctrl) < 0)
		log_err("sluice: disconnect after probing: %s\n", sluice_last_error());
	return ret;
}

/* Runs in the job's process or thread: its own controller and queue. */
static int fio_sluice_init(struct thread_data *td)
{
	struct sluice_data *sd = fio_sluice_get_data(td);
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;

	if (!sd) {
		log_err("sluice: out of memory\n");
		return 1;
	}
	if (!sd->target.traddr[0]) {
		/* ->setup did not run in this job (should not happen) */
		if (!td->files_index || fio_sluice_parse_target(td, td->files[0]->file_name, &sd->target))
			return 1;
	}

	sd->max_events = depth;
	sd->events = calloc(depth, sizeof(*sd->events));
	sd->completions = calloc(depth, sizeof(*sd->completions));
	if (!sd->events || !sd->completions) {
		log_err("sluice: out of memory\n");
		return 1;
	}

	if (fio_sluice_connect_target(td, &sd->target, &sd->ctrl))
		return 1;
	if (sluice_take_queue(sd->ctrl, 0, &sd->queue) < 0) {
		log_err("sluice: take I/O queue: %s\n", sluice_last_error());
		return 1;
	}
	dprint(FD_IO, "sluice: connected to %s:%u %s, queue depth %d\n", sd->target.traddr,
	       sd->target.port, sd->target.subnqn, sluice_queue_depth(sd->queue));
	return 0;
}

static void fio_sluice_cleanup(struct thread_data *td)
{
	struct sluice_data *sd = td->io_ops_data;
	struct fio_file *f;
	unsigned int i;

	if (!sd)
		return;
	if (sd->queue)
		sluice_queue_release(sd->queue);
	if (sd->ctrl && sluice_disconnect(sd->ctrl) < 0)
		log_err("sluice: disconnect: %s\n", sluice_last_error());
	free(sd->events);
	free(sd->completions);
	free(sd);
	td->io_ops_data = NULL;

	for_each_file(td, f, i) {
		free(f->engine_data);
		f->engine_data = NULL;
	}
}

static int fio_sluice_open_file(struct thread_data *td, struct fio_file *f)
{
	if (!f->engine_data) {
		log_err("sluice: file %s was not set up\n", f->file_name);
		return 1;
	}
	return 0;
}

static int fio_sluice_close_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int fio_sluice_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct sluice_file *sf = f->engine_data;

	/* ->setup has probed the namespace and set the size */
	if (sf && sf->block_size) {
		f->real_file_size = sf->blocks * sf->block_size;
		fio_file_set_size_known(f);
		return 0;
	}
	return 1;
}

static int fio_sluice_prep(struct thread_data *td, struct io_u *io_u)
{
	struct sluice_file *sf = io_u->file->engine_data;

	io_u->engine_data = NULL;
	if (!ddir_rw(io_u->ddir) && io_u->ddir != DDIR_TRIM)
		return 0;
	if (io_u->offset % sf->block_size || io_u->xfer_buflen % sf->block_size) {
		log_err("sluice: I/O at %llu length %llu is not aligned to %u-byte blocks\n",
			io_u->offset, io_u->xfer_buflen, sf->block_size);
		io_u->error = EINVAL;
		return 1;
	}
	return 0;
}

static enum fio_q_status fio_sluice_queue(struct thread_data *td, struct io_u *io_u)
{
	struct sluice_data *sd = td->io_ops_data;
	struct sluice_file *sf = io_u->file->engine_data;
	uint64_t tag = (uintptr_t)io_u;
	uint64_t lba = io_u->offset / sf->block_size;
	uint64_t blocks = io_u->xfer_buflen / sf->block_size;
	uint32_t nsid = sf->target.nsid;
	int ret;

	fio_ro_check(td, io_u);

	switch (io_u->ddir) {
	case DDIR_READ:
		ret = sluice_submit_read(sd->queue, nsid, lba, blocks, io_u->xfer_buf, tag);
		break;
	case DDIR_WRITE:
		/* fio leaves an io_u's buffer alone until the engine returns its
		 * event, so the data can go out straight from it. */
		ret = sluice_submit_write_in_place(sd->queue, nsid, lba, blocks, io_u->xfer_buf, 0, tag);
		break;
	case DDIR_TRIM:
		ret = sluice_submit_trim(sd->queue, nsid, lba, blocks, tag);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		ret = sluice_submit_flush(sd->queue, nsid, tag);
		break;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}

	if (ret < 0) {
		log_err("sluice: submit %s: %s\n", io_ddir_name(io_u->ddir), sluice_last_error());
		io_u->error = -ret;
		return FIO_Q_COMPLETED;
	}
	return FIO_Q_QUEUED;
}

static int fio_sluice_commit(struct thread_data *td)
{
	/* ->queue has sent the command already */
	return 0;
}

static int fio_sluice_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			    const struct timespec *t)
{
	struct sluice_data *sd = td->io_ops_data;
	int timeout_ms = -1;
	int ret;

	if (max > sd->max_events)
		max = sd->max_events;
	if (min > max)
		min = max;
	if (t) {
		long long ms = (long long)t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000;

		timeout_ms = ms > 0x7fffffff ? 0x7fffffff : (int)ms;
	}

	ret = sluice_reap(sd->queue, min, max, timeout_ms, sd->completions);
	if (ret < 0) {
		log_err("sluice: reap: %s\n", sluice_last_error());
		return ret;
	}

	for (int i = 0; i < ret; i++) {
		const struct sluice_completion *c = &sd->completions[i];
		struct io_u *io_u = (struct io_u *)(uintptr_t)c->user_tag;

		io_u->error = c->error ? -c->error : 0;
		if (c->sct || c->sc) {
			/* kept for ->errdetails */
			io_u->engine_data = (void *)(uintptr_t)(0x10000u | (c->sct << 8) | c->sc);
			if (!sd->reported_status) {
				sd->reported_status = 1;
				log_err("sluice: %s at offset %llu failed with NVMe status sct=%#x sc=%#x%s\n",
					io_ddir_name(io_u->ddir), io_u->offset, c->sct, c->sc,
					c->dnr ? " (do not retry)" : "");
			}
		} else if (c->error && !sd->reported_status) {
			sd->reported_status = 1;
			log_err("sluice: %s at offset %llu failed: %s\n", io_ddir_name(io_u->ddir),
				io_u->offset, strerror(-c->error));
		}
		sd->events[i] = io_u;
	}
	sd->nr_events = ret;
	return ret;
}

static struct io_u *fio_sluice_event(struct thread_data *td, int event)
{
	struct sluice_data *sd = td->io_ops_data;

	if (event < 0 || (unsigned int)event >= sd->nr_events)
		return NULL;
	return sd->events[event];
}

static const char *fio_sluice_status_name(unsigned int sct, unsigned int sc)
{
	if (sct == 0) {
		switch (sc) {
		case 0x01: return "invalid opcode";
		case 0x02: return "invalid field";
		case 0x04: return "data transfer error";
		case 0x06: return "internal error";
		case 0x07: return "aborted by request";
		case 0x0b: return "invalid namespace";
		case 0x80: return "LBA out of range";
		case 0x81: return "capacity exceeded";
		case 0x82: return "namespace not ready";
		}
	} else if (sct == 2) {
		switch (sc) {
		case 0x80: return "write fault";
		case 0x81: return "unrecovered read error";
		case 0x86: return "access denied";
		}
	} else if (sct == 3) {
		switch (sc) {
		case 0x70: return "host pathing error: the controller was lost (ctrl_loss_tmo_ms)";
		case 0x71: return "command aborted by host: it timed out (command_timeout_ms)";
		}
	}
	return "";
}

static char *fio_sluice_errdetails(struct io_u *io_u)
{
	uintptr_t status = (uintptr_t)io_u->engine_data;
	unsigned int sct = (status >> 8) & 0x7, sc = status & 0xff;
	const char *name;
	char *msg;

	if (!(status & 0x10000))
		return NULL;
	name = fio_sluice_status_name(sct, sc);
	msg = malloc(160);
	if (msg)
		snprintf(msg, 160, "NVMe status sct=%#x sc=%#x%s%s", sct, sc, *name ? ": " : "", name);
	return msg;
}

static struct ioengine_ops ioengine = {
	.name = SLUICE_ENGINE_NAME,
	.version = FIO_IOOPS_VERSION,
	/*
	 * DISKLESSIO: the "files" are namespaces on the network, not paths (no stat,
	 * mkdir, cache invalidation or disk stats); NODISKUTIL: no /sys disk stats;
	 * NOEXTEND: a namespace has a fixed size; RAWIO: block-aligned, page-aligned
	 * buffers, like direct I/O to a block device.
	 */
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_RAWIO,
	.setup = fio_sluice_setup,
	.init = fio_sluice_init,
	.prep = fio_sluice_prep,
	.queue = fio_sluice_queue,
	.commit = fio_sluice_commit,
	.getevents = fio_sluice_getevents,
	.event = fio_sluice_event,
	.errdetails = fio_sluice_errdetails,
	.cleanup = fio_sluice_cleanup,
	.open_file = fio_sluice_open_file,
	.close_file = fio_sluice_close_file,
	.get_file_size = fio_sluice_get_file_size,
	.options = options,
	.option_struct_size = sizeof(struct sluice_fio_options),
};

/* fio looks up get_ioengine (or a symbol named like the engine) after dlopen. */
void get_ioengine(struct ioengine_ops **ioengine_ptr);
void get_ioengine(struct ioengine_ops **ioengine_ptr)
{
	*ioengine_ptr = &ioengine;
}

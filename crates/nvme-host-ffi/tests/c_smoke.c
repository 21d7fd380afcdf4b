/*
 * C smoke test of libsluice_host through its public header only.
 *
 * Usage: c_smoke TRADDR PORT SUBNQN
 * The target must have namespace 1 with at least 4 MiB. Built and run by
 * tests/c_smoke.rs against an in-process Sluice target; exits 0 when every check
 * passed and prints "c_smoke: N checks passed".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice_host.h"

static int checks;

#define CHECK(cond, ...)                                                              \
	do {                                                                          \
		checks++;                                                             \
		if (!(cond)) {                                                        \
			fprintf(stderr, "c_smoke: FAILED at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                 \
			fprintf(stderr, " (last error: %s)\n", sluice_last_error());  \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* A byte of the pattern for block `lba`, offset `i`, generation `gen`. */
static uint8_t pattern(uint64_t lba, size_t i, unsigned gen)
{
	return (uint8_t)(lba * 31 + i * 7 + gen * 101 + (i >> 9));
}

static void fill(uint8_t *buf, uint64_t lba, size_t bytes, uint32_t bs, unsigned gen)
{
	for (size_t i = 0; i < bytes; i++)
		buf[i] = pattern(lba + i / bs, i % bs, gen);
}

/* Reap until `want` completions arrived (each must succeed); returns the tags' sum. */
static uint64_t reap_all(sluice_queue *q, unsigned want)
{
	struct sluice_completion c[16];
	uint64_t tag_sum = 0;
	unsigned got = 0;

	while (got < want) {
		unsigned left = want - got;
		int n = sluice_reap(q, left < 16 ? left : 16, 16, 10000, c);

		CHECK(n > 0, "sluice_reap returned %d with %u of %u completions", n, got, want);
		for (int i = 0; i < n; i++) {
			CHECK(c[i].error == 0, "request %" PRIu64 " failed: error %d sct %u sc %u",
			      c[i].user_tag, c[i].error, c[i].sct, c[i].sc);
			tag_sum += c[i].user_tag;
		}
		got += n;
	}
	return tag_sum;
}

int main(int argc, char **argv)
{
	struct sluice_connect_options opts;
	sluice_controller *ctrl = NULL;
	sluice_queue *q0 = NULL, *q1 = NULL, *again = NULL;
	uint64_t blocks = 0;
	uint32_t bs = 0;
	int rc;

	if (argc != 4) {
		fprintf(stderr, "usage: %s TRADDR PORT SUBNQN\n", argv[0]);
		return 2;
	}
	printf("c_smoke: libsluice_host %s, target %s:%s %s\n", sluice_version(), argv[1], argv[2], argv[3]);

	/* argument errors */
	CHECK(sluice_connect(NULL, &ctrl) == -EINVAL && ctrl == NULL, "NULL options");
	CHECK(strstr(sluice_last_error(), "opts") != NULL, "error text names the argument");
	sluice_connect_options_init(&opts);
	opts.traddr = argv[1];
	CHECK(sluice_connect(&opts, &ctrl) == -EINVAL, "no subnqn");
	CHECK(sluice_submit_flush(NULL, 1, 0) == -EINVAL, "NULL queue");
	CHECK(sluice_queue_release(NULL) == 0 && sluice_disconnect(NULL) == 0, "NULL release");

	/* a wrong subsystem NQN is refused by the target */
	opts.trsvcid = (uint16_t)atoi(argv[2]);
	opts.subnqn = "nqn.2026-11.io.sluice:no-such-subsystem";
	opts.connect_timeout_ms = 5000;
	rc = sluice_connect(&opts, &ctrl);
	CHECK(rc < 0 && ctrl == NULL, "connect to an unknown subsystem returned %d", rc);
	printf("c_smoke: unknown subsystem: %d (%s)\n", rc, sluice_last_error());

	/* connect: two I/O queues, small queues so the backlog and splitting are used */
	opts.subnqn = argv[3];
	opts.nr_io_queues = 2;
	opts.queue_size = 8;
	opts.hdr_digest = 1;
	opts.data_digest = 1;
	rc = sluice_connect(&opts, &ctrl);
	CHECK(rc == 0 && ctrl != NULL, "connect returned %d", rc);
	rc = sluice_controller_io_queue_count(ctrl);
	CHECK(rc >= 1, "io queue count %d", rc);
	int nr_queues = rc;

	rc = sluice_controller_namespace_info(ctrl, 1, &blocks, &bs);
	CHECK(rc == 0 && bs >= 512 && blocks * bs >= (4u << 20), "namespace 1: rc %d, %" PRIu64 " x %u", rc, blocks, bs);
	rc = sluice_controller_namespace_info(ctrl, 77, &blocks, &bs);
	CHECK(rc < 0, "namespace 77 should not exist (rc %d)", rc);
	CHECK(sluice_controller_namespace_info(ctrl, 1, &blocks, &bs) == 0, "namespace 1 again");
	printf("c_smoke: namespace 1: %" PRIu64 " blocks of %u bytes, %d I/O queue(s)\n", blocks, bs, nr_queues);

	CHECK(sluice_take_queue(ctrl, 0, &q0) == 0 && q0, "take queue 0");
	CHECK(sluice_take_queue(ctrl, 0, &again) == -EBUSY && again == NULL, "queue 0 twice");
	CHECK(sluice_take_queue(ctrl, 1000, &again) == -EINVAL, "queue 1000");
	if (nr_queues > 1)
		CHECK(sluice_take_queue(ctrl, 1, &q1) == 0 && q1, "take queue 1");
	else
		q1 = q0;
	int depth = sluice_queue_depth(q0);
	CHECK(depth >= 1 && depth < 8, "queue depth %d for queue_size 8", depth);

	/* reaping with nothing outstanding returns at once */
	struct sluice_completion c[4];
	CHECK(sluice_reap(q0, 1, 4, -1, c) == 0, "empty reap");

	/* 1 MiB write on q1 (split into several commands, more than the queue depth) */
	const size_t big = 1u << 20;
	const uint64_t big_lba = 64;
	uint8_t *wbuf = malloc(big), *rbuf = malloc(big);
	CHECK(wbuf && rbuf, "malloc");
	fill(wbuf, big_lba, big, bs, 1);
	CHECK(sluice_submit_write(q1, 1, big_lba, big / bs, wbuf, 0, 11) == 0, "1 MiB write");
	memset(wbuf, 0xee, big); /* the library copied it */
	CHECK(reap_all(q1, 1) == 11, "write tag");

	/* and read it back on q0 */
	memset(rbuf, 0, big);
	CHECK(sluice_submit_read(q0, 1, big_lba, big / bs, rbuf, 12) == 0, "1 MiB read");
	CHECK(sluice_queue_outstanding(q0) == 1, "one outstanding");
	CHECK(reap_all(q0, 1) == 12, "read tag");
	fill(wbuf, big_lba, big, bs, 1);
	CHECK(memcmp(wbuf, rbuf, big) == 0, "1 MiB read back differs");

	/* the same 1 MiB in place (sent from wbuf itself, kept until its completion),
	 * over a different pattern, and read back */
	fill(wbuf, big_lba, big, bs, 3);
	CHECK(sluice_submit_write_in_place(q1, 1, big_lba, big / bs, wbuf, 0, 13) == 0, "1 MiB write in place");
	CHECK(reap_all(q1, 1) == 13, "write in place tag");
	memset(rbuf, 0, big);
	CHECK(sluice_submit_read(q0, 1, big_lba, big / bs, rbuf, 14) == 0, "1 MiB read");
	CHECK(reap_all(q0, 1) == 14, "read tag");
	CHECK(memcmp(wbuf, rbuf, big) == 0, "1 MiB written in place reads back differently");
	CHECK(sluice_submit_write_in_place(q0, 1, 0, 1, NULL, 0, 1) == -EINVAL, "NULL write-in-place buffer");

	/* 64 single-block writes with FUA, then 64 reads, all queued before reaping */
	enum { N = 64 };
	uint8_t *small = malloc((size_t)N * bs), *back = calloc(N, bs);
	CHECK(small && back, "malloc");
	uint64_t want = 0;
	for (unsigned i = 0; i < N; i++) {
		uint64_t lba = 4096 + 3 * i;
		fill(small + (size_t)i * bs, lba, bs, bs, 2);
		CHECK(sluice_submit_write(q0, 1, lba, 1, small + (size_t)i * bs, 1, 1000 + i) == 0, "write %u", i);
		want += 1000 + i;
	}
	CHECK(sluice_queue_outstanding(q0) == N, "64 outstanding, depth %d", depth);
	CHECK(reap_all(q0, N) == want, "write tags");
	for (unsigned i = 0; i < N; i++)
		CHECK(sluice_submit_read(q0, 1, 4096 + 3 * i, 1, back + (size_t)i * bs, 2000 + i) == 0, "read %u", i);
	reap_all(q0, N);
	CHECK(memcmp(small, back, (size_t)N * bs) == 0, "small reads differ");

	/* flush, trim */
	CHECK(sluice_submit_flush(q0, 1, 77) == 0, "flush");
	CHECK(reap_all(q0, 1) == 77, "flush tag");
	CHECK(sluice_submit_trim(q0, 1, 4096, 256, 78) == 0, "trim");
	CHECK(reap_all(q0, 1) == 78, "trim tag");

	/* bad requests fail at submit and queue nothing */
	CHECK(sluice_submit_read(q0, 1, blocks - 1, 2, rbuf, 1) == -EINVAL, "read past the end");
	CHECK(strstr(sluice_last_error(), "beyond the end") != NULL, "error text");
	CHECK(sluice_submit_write(q0, 1, 0, 1, NULL, 0, 1) == -EINVAL, "NULL write buffer");
	CHECK(sluice_submit_read(q0, 0, 0, 1, rbuf, 1) == -EINVAL, "nsid 0");
	CHECK(sluice_submit_read(q0, 77, 0, 1, rbuf, 1) < 0, "inactive namespace");
	CHECK(sluice_queue_outstanding(q0) == 0, "nothing outstanding");

	/* disconnect refuses while queues are held */
	CHECK(sluice_disconnect(ctrl) == -EBUSY, "disconnect with queues held");
	if (q1 != q0)
		CHECK(sluice_queue_release(q1) == 0, "release q1");
	CHECK(sluice_queue_release(q0) == 0, "release q0");
	rc = sluice_disconnect(ctrl);
	CHECK(rc == 0, "disconnect returned %d", rc);

	free(wbuf);
	free(rbuf);
	free(small);
	free(back);
	printf("c_smoke: %d checks passed\n", checks);
	return 0;
}

/* The C API, used from a program compiled as C99 (not C++): every call of
 * shmbus.h, its statuses, and its refusals of bad arguments. */
#define _XOPEN_SOURCE 700 /* pwrite, in strict C99 */
#include <shmbus/shmbus.h>

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
static char bus_name[64];
static char bus_name2[64];

#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,     \
              __LINE__, #cond, shmbus_last_error());                              \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)

#define CHECK_STATUS(expr, want)                                                  \
  do {                                                                            \
    int got_ = (int)(expr);                                                       \
    if (got_ != (int)(want)) {                                                    \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s); last error: %s\n", \
              __FILE__, __LINE__, #expr, got_, shmbus_status_str(got_), (int)(want),  \
              shmbus_status_str((int)(want)), shmbus_last_error());                 \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)

static const int64_t one_second = 1000000000;

static void test_invalid_arguments(void) {
  shmbus_bus* bus = (shmbus_bus*)1;
  shmbus_message m;
  void* data = NULL;
  size_t n = 0;
  CHECK_STATUS(shmbus_bus_create(NULL, NULL, &bus), SHMBUS_INVALID_ARGUMENT);
  CHECK(bus == NULL); /* outputs are cleared on failure */
  CHECK(strstr(shmbus_last_error(), "name is NULL") != NULL);
  CHECK_STATUS(shmbus_bus_create(bus_name, NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_bus_open(NULL, -1, &bus), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_open(NULL, NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_publish(NULL, "x", 1, 0, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_claim(NULL, 1, 0, &data, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_commit(NULL, 0), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_publish_batch(NULL, NULL, NULL, 0, 0, &n), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_producer_close(NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_consumer_open(NULL, NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_consumer_next(NULL, 0, &m), SHMBUS_READ_ERROR);
  CHECK(shmbus_consumer_read_batch(NULL, &m, 1, 0, NULL) == -1);
  CHECK_STATUS(shmbus_inspect(NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_bus_get_info(NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK(shmbus_bus_head(NULL) == 0);
  CHECK(shmbus_consumer_cursor(NULL) == 0);
  shmbus_bus_close(NULL);
  shmbus_producer_destroy(NULL);
  shmbus_consumer_destroy(NULL);
  shmbus_snapshot_free(NULL);

  /* Setup errors keep the library's one-line reasons. */
  CHECK_STATUS(shmbus_bus_create("bad/name", NULL, &bus), SHMBUS_INVALID_NAME);
  CHECK(strstr(shmbus_last_error(), "bad/name") != NULL);
  {
    shmbus_bus_options o;
    shmbus_bus_options_init(&o);
    o.capacity = 1000; /* not a power of two */
    CHECK_STATUS(shmbus_bus_create(bus_name, &o, &bus), SHMBUS_INVALID_OPTIONS);
    shmbus_bus_options_init(&o);
    o.policy = 7;
    CHECK_STATUS(shmbus_bus_create(bus_name, &o, &bus), SHMBUS_INVALID_ARGUMENT);
  }
  CHECK_STATUS(shmbus_bus_open("shmbus-c-test-no-such-bus", 0, &bus), SHMBUS_NOT_FOUND);
  CHECK(strcmp(shmbus_status_str(SHMBUS_NOT_FOUND), "not found") == 0);
  CHECK(strcmp(shmbus_status_str(SHMBUS_TOO_LARGE), "payload too large") == 0);
}

static void test_block_bus(void) {
  shmbus_bus_options o;
  shmbus_bus *bus = NULL, *again = NULL, *opened = NULL;
  shmbus_producer *p = NULL, *p2 = NULL;
  shmbus_consumer *early = NULL, *late = NULL, *from_seq = NULL;
  shmbus_consumer_options co;
  shmbus_bus_info info;
  shmbus_message m;
  shmbus_message batch[16];
  shmbus_batch_result br;
  shmbus_snapshot* snap = NULL;
  char big[1200];
  char want[64];
  void* claim = NULL;
  uint64_t seq = 99;
  size_t published = 0;
  int i, removed = -1;
  const char* texts[3] = {"alpha", "beta", "gamma"};
  size_t sizes[3];

  shmbus_bus_options_init(&o);
  CHECK(o.capacity == 0 && shmbus_default_capacity(256) == 16384 && o.record_size == 256 && o.policy == SHMBUS_POLICY_BLOCK && o.mode == 0600);
  o.capacity = 16;
  o.record_size = 128;
  o.max_readers = 4;
  CHECK_STATUS(shmbus_bus_create(bus_name, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_bus_create(bus_name, &o, &again), SHMBUS_ALREADY_EXISTS);
  CHECK(strstr(shmbus_last_error(), bus_name) != NULL);
  CHECK(shmbus_bus_exists(bus_name) == 1);
  CHECK_STATUS(shmbus_bus_open(bus_name, -1, &opened), SHMBUS_OK);
  CHECK_STATUS(shmbus_bus_get_info(opened, &info), SHMBUS_OK);
  CHECK(strcmp(info.name, bus_name) == 0);
  CHECK(info.capacity == 16 && info.record_size == 128 && info.max_payload == 104);
  CHECK(info.max_message == 8 * 128 - 24); /* half the ring's records, one header */
  CHECK(info.policy == SHMBUS_POLICY_BLOCK && info.max_readers == 4);

  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &early), SHMBUS_OK);
  shmbus_consumer_options_init(&co);
  co.name = "late";
  co.start = SHMBUS_START_LATEST;
  CHECK_STATUS(shmbus_consumer_open(opened, &co, &late), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p2), SHMBUS_PRODUCER_ACTIVE);
  CHECK(p2 == NULL);
  CHECK(strstr(shmbus_last_error(), "pid") != NULL);

  CHECK_STATUS(shmbus_producer_publish(p, "hello", 5, SHMBUS_FOREVER, &seq), SHMBUS_OK);
  CHECK(seq == 0);
  CHECK_STATUS(shmbus_producer_publish(p, NULL, 0, 0, NULL), SHMBUS_OK); /* empty message */
  CHECK_STATUS(shmbus_producer_publish(p, NULL, 3, 0, NULL), SHMBUS_INVALID_ARGUMENT);
  memset(big, 'x', sizeof big);
  CHECK_STATUS(shmbus_producer_publish(p, big, 1001, 0, NULL), SHMBUS_TOO_LARGE);
  CHECK(strstr(shmbus_last_error(), "1001 bytes, max 1000") != NULL);
  CHECK(strstr(shmbus_last_error(), bus_name) != NULL);
  CHECK_STATUS(shmbus_producer_publish(p, big, 104, 0, NULL), SHMBUS_OK);

  /* Claim, write in place, commit part of it. */
  CHECK_STATUS(shmbus_producer_commit(p, 0), SHMBUS_NO_CLAIM);
  CHECK_STATUS(shmbus_producer_claim(p, 1001, 0, &claim, NULL), SHMBUS_TOO_LARGE);
  snprintf(want, sizeof want, "1001 bytes, max %u", (unsigned)info.max_message);
  CHECK(strstr(shmbus_last_error(), want) != NULL);
  CHECK(claim == NULL);
  CHECK_STATUS(shmbus_producer_claim(p, 64, 0, &claim, &seq), SHMBUS_OK);
  CHECK(claim != NULL && seq == 3);
  CHECK_STATUS(shmbus_producer_publish(p, "x", 1, 0, NULL), SHMBUS_CLAIM_PENDING);
  {
    void* second = (void*)1;
    CHECK_STATUS(shmbus_producer_claim(p, 1, 0, &second, NULL), SHMBUS_CLAIM_PENDING);
    CHECK(second == NULL);
  }
  if (claim) memcpy(claim, "in place", 8);
  CHECK_STATUS(shmbus_producer_commit(p, 65), SHMBUS_NO_CLAIM);
  CHECK_STATUS(shmbus_producer_commit(p, 8), SHMBUS_OK);

  for (i = 0; i < 3; ++i) sizes[i] = strlen(texts[i]);
  CHECK_STATUS(shmbus_producer_publish_batch(p, (const void* const*)texts, sizes, 3, 0, &published),
               SHMBUS_OK);
  CHECK(published == 3);
  CHECK(shmbus_producer_next_seq(p) == 7);
  CHECK(shmbus_bus_head(bus) == 7);

  /* The earliest reader sees everything, byte-exact and in order. */
  CHECK_STATUS(shmbus_consumer_next(early, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 0 && m.size == 5 && memcmp(m.data, "hello", 5) == 0 && m.records == 1 && m.reserved == 0);
  CHECK_STATUS(shmbus_consumer_next(early, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 1 && m.size == 0);
  CHECK_STATUS(shmbus_consumer_next(early, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 2 && m.size == 104 && memcmp(m.data, big, 104) == 0);
  CHECK(shmbus_consumer_read_batch(early, batch, 16, one_second, &br) == 4);
  CHECK(batch[0].seq == 3 && batch[0].size == 8 && memcmp(batch[0].data, "in place", 8) == 0);
  for (i = 0; i < 3; ++i) {
    CHECK(batch[1 + i].seq == (uint64_t)(4 + i));
    CHECK(batch[1 + i].size == sizes[i] && memcmp(batch[1 + i].data, texts[i], sizes[i]) == 0);
  }
  CHECK(br.lost == 0 && br.corrupt == 0 && br.end_of_stream == 0);
  CHECK_STATUS(shmbus_consumer_next(early, 0, &m), SHMBUS_READ_TIMEOUT);
  CHECK(m.records == 0 && m.data == NULL && m.size == 0);
  CHECK(shmbus_consumer_cursor(early) == 7 && shmbus_consumer_delivered(early) == 7);

  /* A reader from a retained sequence, and one from a sequence not yet published. */
  shmbus_consumer_options_init(&co);
  co.start = SHMBUS_START_SEQUENCE;
  co.start_seq = 5;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &from_seq), SHMBUS_OK);
  CHECK_STATUS(shmbus_consumer_next(from_seq, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 5 && m.size == 4 && memcmp(m.data, "beta", 4) == 0);
  shmbus_consumer_destroy(from_seq);
  co.start_seq = 1000;
  from_seq = (shmbus_consumer*)1;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &from_seq), SHMBUS_NOT_RETAINED);
  CHECK(from_seq == NULL);
  co.start = 9;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &from_seq), SHMBUS_INVALID_ARGUMENT);

  /* The inspection snapshot sees the lagging 'late' reader (it attached at 0,
   * before anything was published, and has read nothing). */
  CHECK_STATUS(shmbus_inspect(bus_name, &snap), SHMBUS_OK);
  if (snap) {
    int found = 0;
    size_t k;
    CHECK(snap->head == 7 && snap->published == 7);
    CHECK(snap->producer_attached == 1 && snap->producer_pid == (int32_t)getpid());
    CHECK(snap->producer_liveness == SHMBUS_ALIVE && snap->producer_closed == 0);
    CHECK(snap->info.capacity == 16 && snap->info.max_payload == 104 && snap->info.max_message == 1000);
    CHECK(snap->reader_count == 2);
    for (k = 0; k < snap->reader_count; ++k) {
      const shmbus_reader_view* r = &snap->readers[k];
      CHECK(r->pid == (int32_t)getpid() && r->liveness == SHMBUS_ALIVE);
      CHECK(snap->reader_evicted != NULL && snap->reader_evicted[k] == 0);
      if (strcmp(r->name, "late") == 0) {
        found = 1;
        CHECK(r->cursor == 0 && r->lag == 7 && r->delivered == 0);
      }
    }
    CHECK(found);
    shmbus_snapshot_free(snap);
  }

  /* A full block ring: publish times out while 'late' holds it back. */
  for (i = 0; i < 9; ++i) CHECK_STATUS(shmbus_producer_publish(p, "f", 1, 0, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_publish(p, "f", 1, 1000000, NULL), SHMBUS_TIMEOUT);
  CHECK(strstr(shmbus_last_error(), "full") != NULL);
  CHECK_STATUS(shmbus_producer_claim(p, 1, 0, &claim, NULL), SHMBUS_TIMEOUT);
  shmbus_consumer_destroy(late);
  CHECK_STATUS(shmbus_producer_publish(p, "g", 1, one_second, NULL), SHMBUS_OK);

  /* Close: the reader drains what was published, then sees end of stream. */
  CHECK_STATUS(shmbus_producer_close(p), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_publish(p, "h", 1, 0, NULL), SHMBUS_CLOSED);
  for (i = 0; i < 10; ++i) {
    CHECK_STATUS(shmbus_consumer_next(early, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == (uint64_t)(7 + i));
  }
  CHECK_STATUS(shmbus_consumer_next(early, one_second, &m), SHMBUS_READ_END_OF_STREAM);
  CHECK(m.end_reason == SHMBUS_END_CLOSED);
  shmbus_producer_destroy(p);

  /* A new producer takes over and continues the sequence. */
  CHECK_STATUS(shmbus_producer_open(opened, NULL, &p2), SHMBUS_OK);
  CHECK(shmbus_producer_next_seq(p2) == 17);
  shmbus_producer_destroy(p2);

  shmbus_consumer_destroy(early);
  shmbus_bus_close(opened);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name, &removed), SHMBUS_OK);
  CHECK(removed == 1);
  CHECK_STATUS(shmbus_bus_remove(bus_name, &removed), SHMBUS_OK);
  CHECK(removed == 0);
  CHECK(shmbus_bus_exists(bus_name) == 0);
}

static void test_overwrite_bus_reports_losses(void) {
  shmbus_bus_options o;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer* c = NULL;
  shmbus_message m;
  uint64_t i;
  shmbus_bus_options_init(&o);
  o.capacity = 8;
  o.record_size = 64;
  o.policy = SHMBUS_POLICY_OVERWRITE;
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &c), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  shmbus_bus_close(bus); /* the producer and consumer keep the mapping */
  for (i = 0; i < 20; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_LOST);
  CHECK(m.lost == 12);
  for (i = 12; i < 20; ++i) {
    uint64_t v = 0;
    CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == i && m.size == sizeof v);
    if (m.size == sizeof v) memcpy(&v, m.data, sizeof v);
    CHECK(v == i);
  }
  CHECK(shmbus_consumer_lost(c) == 12);
  shmbus_producer_destroy(p); /* closes: end of stream */
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_END_OF_STREAM);
  shmbus_consumer_destroy(c);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* The snapshot lists the remembered name once: held (by this process) or
 * not, and where a resume under it continues. */
static void check_bookmark(const char* name, int held, uint64_t cursor) {
  shmbus_snapshot* snap = NULL;
  size_t k, found = 0;
  CHECK_STATUS(shmbus_inspect(bus_name2, &snap), SHMBUS_OK);
  if (!snap) return;
  CHECK(snap->bookmark_count >= 1 && snap->bookmarks != NULL);
  for (k = 0; k < snap->bookmark_count; ++k) {
    const shmbus_bookmark_view* b = &snap->bookmarks[k];
    if (strcmp(b->name, name) != 0) continue;
    ++found;
    CHECK(b->held == held);
    CHECK(b->holder_pid == (held ? (int32_t)getpid() : 0));
    CHECK(b->cursor == cursor);
    CHECK(b->updated_ns > 0);
  }
  CHECK(found == 1);
  shmbus_snapshot_free(snap);
}

static void test_durable_reader_resumes(void) {
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer *c = NULL, *twin = NULL;
  shmbus_consumer_options co;
  shmbus_message m;
  uint64_t i;
  CHECK_STATUS(shmbus_bus_create(bus_name2, NULL, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  for (i = 0; i < 10; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);

  shmbus_consumer_options_init(&co);
  co.name = "keeper";
  co.start = SHMBUS_START_RESUME;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_OK);
  CHECK(shmbus_consumer_resumed(c) == 0); /* a new name starts at the oldest record */
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &twin), SHMBUS_NAME_IN_USE);
  CHECK(strstr(shmbus_last_error(), "keeper") != NULL);
  for (i = 0; i < 4; ++i) {
    CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == i);
  }
  shmbus_consumer_destroy(c); /* leaves its cursor under its name */
  check_bookmark("keeper", 0, 4);

  c = NULL;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_OK);
  CHECK(shmbus_consumer_resumed(c) == 1 && shmbus_consumer_resume_gap(c) == 0);
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 4);
  check_bookmark("keeper", 1, 4); /* held by the reader again; updated at its attach */
  shmbus_consumer_destroy(c);
  check_bookmark("keeper", 0, 5); /* left at the next sequence to read */
  c = NULL;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_OK);
  co.durable = 2;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &twin), SHMBUS_INVALID_ARGUMENT);
  co.durable = 0; /* SHMBUS_START_RESUME makes it durable anyway */
  shmbus_consumer_destroy(c);
  check_bookmark("keeper", 0, 5);

  /* Moving and forgetting a remembered name. */
  {
    shmbus_name_move mv;
    int moved = -1, forgotten = -1;
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", SHMBUS_TO_SEQUENCE, 2, &mv, &moved), SHMBUS_OK);
    CHECK(moved == 1 && mv.from == 5 && mv.to == 2 && mv.oldest == 0 && mv.head == 10);
    check_bookmark("keeper", 0, 2);
    c = NULL;
    CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_OK);
    CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == 2);
    moved = -1;
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", SHMBUS_TO_LATEST, 0, &mv, &moved), SHMBUS_NAME_IN_USE);
    CHECK(moved == 0 && strstr(shmbus_last_error(), "keeper") != NULL);
    CHECK_STATUS(shmbus_forget_reader_name(bus_name2, "keeper", &forgotten), SHMBUS_NAME_IN_USE);
    shmbus_consumer_destroy(c); /* leaves 3 */
    check_bookmark("keeper", 0, 3);
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", SHMBUS_TO_SEQUENCE, 11, &mv, &moved), SHMBUS_NOT_RETAINED);
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", SHMBUS_TO_TIME, 1, &mv, &moved), SHMBUS_NOT_RETAINED);
    CHECK(strstr(shmbus_last_error(), "timestamp") != NULL); /* the producer stamps nothing by default */
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", 4, 0, &mv, &moved), SHMBUS_INVALID_ARGUMENT);
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, NULL, SHMBUS_TO_LATEST, 0, &mv, &moved), SHMBUS_INVALID_ARGUMENT);
    check_bookmark("keeper", 0, 3); /* no refusal moved it */
    CHECK_STATUS(shmbus_move_reader_name_in(NULL, bus_name2, "keeper", SHMBUS_TO_LATEST, 0, NULL, &moved), SHMBUS_OK);
    CHECK(moved == 1);
    check_bookmark("keeper", 0, 10);
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "keeper", SHMBUS_TO_EARLIEST, 0, &mv, NULL), SHMBUS_OK);
    CHECK(mv.from == 10 && mv.to == 0);
    moved = -1;
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "nobody", SHMBUS_TO_EARLIEST, 0, &mv, &moved), SHMBUS_OK);
    CHECK(moved == 0 && mv.to == 0 && mv.from == 0);
    CHECK_STATUS(shmbus_forget_reader_name(bus_name2, "keeper", &forgotten), SHMBUS_OK);
    CHECK(forgotten == 1);
    CHECK_STATUS(shmbus_forget_reader_name_in(NULL, bus_name2, "keeper", &forgotten), SHMBUS_OK);
    CHECK(forgotten == 0);
    CHECK_STATUS(shmbus_forget_reader_name(bus_name2, NULL, &forgotten), SHMBUS_INVALID_ARGUMENT);
    CHECK_STATUS(shmbus_forget_reader_name(bus_name2, "", &forgotten), SHMBUS_INVALID_OPTIONS);
    CHECK_STATUS(shmbus_move_reader_name(bus_name2, "a-name-of-thirty-two-bytes-.....", SHMBUS_TO_LATEST, 0, &mv,
                                         &moved),
                 SHMBUS_INVALID_OPTIONS);
  }
  shmbus_producer_destroy(p);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* A stray store clears a live reader's slot state (offset 512 + 128 x slot
 * + 8 in the segment file): the producer laps it; the reader is told
 * SHMBUS_READ_EVICTED with the exact loss, and reads on from there. */
static void test_evicted_reader_is_told(void) {
  shmbus_bus_options o;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer* c = NULL;
  shmbus_message m;
  shmbus_batch_result br;
  char path[128];
  uint32_t zero = 0;
  uint64_t i;
  int fd;
  shmbus_bus_options_init(&o);
  o.capacity = 8;
  o.record_size = 64;
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &c), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  snprintf(path, sizeof path, "/dev/shm/shmbus.%s", bus_name2);
  fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  CHECK(pwrite(fd, &zero, sizeof zero, 512 + 128 * (off_t)shmbus_consumer_slot(c) + 8) == sizeof zero);
  close(fd);
  for (i = 0; i < 20; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);
  {
    shmbus_snapshot* snap = NULL;
    size_t k, seen = 0;
    CHECK_STATUS(shmbus_inspect(bus_name2, &snap), SHMBUS_OK);
    if (snap) {
      CHECK(snap->reader_count >= 1 && snap->reader_evicted != NULL);
      for (k = 0; k < snap->reader_count; ++k)
        if (snap->readers[k].slot == shmbus_consumer_slot(c)) {
          CHECK(snap->reader_evicted[k] == 1);
          ++seen;
        }
      CHECK(seen == 1);
    }
    shmbus_snapshot_free(snap);
  }
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_EVICTED);
  CHECK(m.lost == 12 && m.seq == 12);
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 12);
  /* Again, through a batch read. */
  fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  CHECK(pwrite(fd, &zero, sizeof zero, 512 + 128 * (off_t)shmbus_consumer_slot(c) + 8) == sizeof zero);
  close(fd);
  for (i = 20; i < 40; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);
  CHECK(shmbus_consumer_read_batch(c, &m, 1, one_second, &br) == 0);
  CHECK(br.evicted == 1 && br.lost == 32 - 13);
  CHECK(shmbus_consumer_cursor(c) == 32);
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(c);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* A best-effort reader of a block bus is never waited for, and is told
 * exactly what it missed. */
static void test_best_effort_reader(void) {
  shmbus_bus_options o;
  shmbus_consumer_options co;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer* c = NULL;
  shmbus_message m;
  uint64_t i;
  shmbus_bus_options_init(&o);
  o.capacity = 8;
  o.record_size = 64;
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  shmbus_consumer_options_init(&co);
  CHECK(co.best_effort == 0);
  co.best_effort = 2;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_INVALID_ARGUMENT);
  co.best_effort = 1;
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &c), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  for (i = 0; i < 30; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_LOST);
  CHECK(m.lost == 22);
  CHECK_STATUS(shmbus_consumer_next(c, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 22 && m.size == sizeof i && memcmp(m.data, &(uint64_t){22}, sizeof i) == 0);
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(c);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* A producer with a hold limit lets a stuck reader go: told once, then its exact loss; the snapshot names it. */
static void test_hold_limit(void) {
  shmbus_bus_options o;
  shmbus_producer_options po;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer* c = NULL;
  shmbus_snapshot* snap = NULL;
  shmbus_batch_result br;
  shmbus_message m[4];
  uint64_t i;
  shmbus_bus_options_init(&o);
  o.capacity = 8;
  o.record_size = 64;
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  shmbus_producer_options_init(&po);
  CHECK(po.max_hold_ns == SHMBUS_FOREVER);
  po.max_hold_ns = 10 * 1000 * 1000;
  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &c), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, &po, &p), SHMBUS_OK);
  /* The ring holds 8; the 9th publish waits 10 ms, lets the reader go, goes on. */
  for (i = 0; i < 20; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, one_second, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_inspect(bus_name2, &snap), SHMBUS_OK);
  if (snap) {
    CHECK(snap->readers_let_go == 1);
    CHECK(snap->reader_count == 1 && snap->readers[0].best_effort == 1 && snap->readers[0].let_go_ns != 0);
    shmbus_snapshot_free(snap);
  }
  CHECK(shmbus_consumer_read_batch(c, m, 4, 0, &br) == 0);
  CHECK(br.let_go == 1 && br.evicted == 0 && br.stale_view == 0);
  CHECK(shmbus_consumer_read_batch(c, m, 4, 0, &br) == 4);
  CHECK(br.lost == 12 && m[0].seq == 12);
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(c);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);

  /* The same at run time, with no hold limit: shmbus_let_go_reader(). */
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &c), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  for (i = 0; i < 8; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, one_second, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_TIMEOUT); /* held by the reader */
  CHECK_STATUS(shmbus_let_go_reader(bus_name2, shmbus_consumer_slot(c)), SHMBUS_OK);
  for (i = 8; i < 20; ++i) CHECK_STATUS(shmbus_producer_publish(p, &i, sizeof i, 0, NULL), SHMBUS_OK);
  CHECK_STATUS(shmbus_let_go_reader(bus_name2, shmbus_consumer_slot(c)), SHMBUS_INVALID_OPTIONS);
  CHECK(strstr(shmbus_last_error(), "does not hold the producer: it was let go at") != NULL);
  CHECK_STATUS(shmbus_let_go_reader(bus_name2, 3), SHMBUS_NOT_FOUND);
  CHECK_STATUS(shmbus_let_go_reader(NULL, 0), SHMBUS_INVALID_ARGUMENT);
  CHECK(shmbus_consumer_read_batch(c, m, 4, 0, &br) == 0);
  CHECK(br.let_go == 1);
  CHECK(shmbus_consumer_read_batch(c, m, 4, 0, &br) == 4);
  CHECK(br.lost == 12 && m[0].seq == 12);
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(c);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* Bytes of message `seq` in the spanning test: its sequence in every byte
 * position, so a view of the wrong message or the wrong records differs. */
static void fill_pattern(unsigned char* to, size_t n, uint64_t seq) {
  size_t k;
  for (k = 0; k < n; ++k) to[k] = (unsigned char)(seq * 131 + k * 7 + k / 64);
}

static int has_pattern(const void* data, size_t n, uint64_t seq) {
  unsigned char want[512];
  if (n > sizeof want) return 0;
  fill_pattern(want, n, seq);
  return memcmp(data, want, n) == 0;
}

struct expected {
  uint64_t seq;
  size_t size;
  uint32_t records;
};

/* Messages longer than one record (max_payload) take consecutive records:
 * publish, claim + commit and publish_batch write them, next and read_batch
 * deliver each as one contiguous view, byte-exact, with `records` saying
 * where the next message's sequence starts. On a block bus the holding
 * reader reads in place, the best-effort one a checked copy; on an
 * overwrite bus both copy. */
static void test_spanning_messages(uint32_t policy) {
  shmbus_bus_options o;
  shmbus_consumer_options co;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer *by_next = NULL, *by_batch = NULL;
  shmbus_bus_info info;
  shmbus_message m;
  shmbus_message batch[16];
  shmbus_batch_result br;
  unsigned char payload[512];
  unsigned char small_a[8], small_b[8], batch_big[200];
  const void* items[3];
  size_t sizes[3], published = 0, got = 0, k;
  void* claim = NULL;
  uint64_t seq = 0;
  int64_t n;
  int rounds = 0;
  /* 16 records of 64 bytes: max_payload 40, max_message 8 x 64 - 24 = 488. */
  const struct expected want[] = {
      {0, 5, 1},    /* publish, one record */
      {1, 100, 2},  /* publish: 24 + 100 bytes take 2 records */
      {3, 300, 6},  /* claim(300), commit */
      {9, 40, 1},   /* exactly max_payload: one record */
      {10, 8, 1},   /* publish_batch: small, spanning, small */
      {11, 200, 4},
      {15, 8, 1}};
  const size_t count = sizeof want / sizeof want[0];

  shmbus_bus_options_init(&o);
  o.capacity = 16;
  o.record_size = 64;
  o.policy = policy;
  CHECK_STATUS(shmbus_bus_create(bus_name2, &o, &bus), SHMBUS_OK);
  if (!bus) return;
  CHECK_STATUS(shmbus_bus_get_info(bus, &info), SHMBUS_OK);
  CHECK(info.max_payload == 40 && info.max_message == 488 && info.reserved == 0);
  CHECK_STATUS(shmbus_consumer_open(bus, NULL, &by_next), SHMBUS_OK);
  shmbus_consumer_options_init(&co);
  co.name = "batch";
  co.best_effort = 1; /* a checked copy also on the block bus */
  CHECK_STATUS(shmbus_consumer_open(bus, &co, &by_batch), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_open(bus, NULL, &p), SHMBUS_OK);
  if (!by_next || !by_batch || !p) goto done;

  fill_pattern(payload, 5, 0);
  CHECK_STATUS(shmbus_producer_publish(p, payload, 5, 0, &seq), SHMBUS_OK);
  CHECK(seq == 0);
  fill_pattern(payload, 100, 1);
  CHECK_STATUS(shmbus_producer_publish(p, payload, 100, 0, &seq), SHMBUS_OK);
  CHECK(seq == 1 && shmbus_producer_next_seq(p) == 3);
  CHECK_STATUS(shmbus_producer_claim(p, 300, 0, &claim, &seq), SHMBUS_OK);
  CHECK(seq == 3 && claim != NULL);
  if (claim) fill_pattern((unsigned char*)claim, 300, 3); /* one contiguous writable span */
  CHECK_STATUS(shmbus_producer_commit(p, 300), SHMBUS_OK);
  CHECK(shmbus_producer_next_seq(p) == 9);
  fill_pattern(payload, 40, 9);
  CHECK_STATUS(shmbus_producer_publish(p, payload, 40, 0, &seq), SHMBUS_OK);
  CHECK(seq == 9);
  fill_pattern(small_a, sizeof small_a, 10);
  fill_pattern(batch_big, sizeof batch_big, 11);
  fill_pattern(small_b, sizeof small_b, 15);
  items[0] = small_a;
  items[1] = batch_big;
  items[2] = small_b;
  sizes[0] = sizeof small_a;
  sizes[1] = sizeof batch_big;
  sizes[2] = sizeof small_b;
  CHECK_STATUS(shmbus_producer_publish_batch(p, items, sizes, 3, 0, &published), SHMBUS_OK);
  CHECK(published == 3 && shmbus_producer_next_seq(p) == 16 && shmbus_bus_head(bus) == 16);

  /* One at a time. */
  for (k = 0; k < count; ++k) {
    CHECK_STATUS(shmbus_consumer_next(by_next, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == want[k].seq && m.size == want[k].size && m.records == want[k].records);
    CHECK(m.data != NULL && has_pattern(m.data, m.size, m.seq));
    if (k + 1 < count) CHECK(want[k + 1].seq == m.seq + m.records);
  }
  CHECK_STATUS(shmbus_consumer_next(by_next, 0, &m), SHMBUS_READ_TIMEOUT);
  CHECK(shmbus_consumer_cursor(by_next) == 16 && shmbus_consumer_delivered(by_next) == count &&
        shmbus_consumer_lost(by_next) == 0);

  /* In batches: the same messages in order. A checked copy of a message
   * longer than max_payload comes alone in its batch. */
  while (got < count && rounds++ < 20) {
    n = shmbus_consumer_read_batch(by_batch, batch, 16, one_second, &br);
    CHECK(n >= 1 && br.lost == 0 && br.corrupt == 0);
    if (n < 1) break;
    for (k = 0; k < (size_t)n && got < count; ++k, ++got) {
      const shmbus_message* b = &batch[k];
      CHECK(b->seq == want[got].seq && b->size == want[got].size && b->records == want[got].records);
      CHECK(b->data != NULL && has_pattern(b->data, b->size, b->seq));
      if (b->size > info.max_payload) CHECK(n == 1);
    }
  }
  CHECK(got == count);
  CHECK(shmbus_consumer_read_batch(by_batch, batch, 16, 0, &br) == 0);
  CHECK(shmbus_consumer_cursor(by_batch) == 16 && shmbus_consumer_lost(by_batch) == 0);

  /* The longest message from sequence 28 would cross the end of the ring:
   * it starts the next lap at 32, and the records between are padding that
   * loses nothing. */
  for (k = 16; k < 28; ++k) CHECK_STATUS(shmbus_producer_publish(p, "s", 1, 0, NULL), SHMBUS_OK);
  for (k = 16; k < 28; ++k) {
    CHECK_STATUS(shmbus_consumer_next(by_next, one_second, &m), SHMBUS_READ_MESSAGE);
    CHECK(m.seq == k && m.records == 1);
  }
  CHECK(shmbus_consumer_read_batch(by_batch, batch, 16, one_second, &br) == 12);
  fill_pattern(payload, 488, 32);
  CHECK_STATUS(shmbus_producer_publish(p, payload, 488, 0, &seq), SHMBUS_OK);
  CHECK(seq == 32 && shmbus_producer_next_seq(p) == 40);
  CHECK_STATUS(shmbus_consumer_next(by_next, one_second, &m), SHMBUS_READ_MESSAGE);
  CHECK(m.seq == 32 && m.size == 488 && m.records == 8 && has_pattern(m.data, m.size, 32));
  CHECK(shmbus_consumer_read_batch(by_batch, batch, 16, one_second, &br) == 1);
  CHECK(br.lost == 0 && batch[0].seq == 32 && batch[0].size == 488 && batch[0].records == 8 &&
        has_pattern(batch[0].data, 488, 32));
  CHECK(shmbus_consumer_lost(by_next) == 0 && shmbus_consumer_lost(by_batch) == 0);

  /* One byte over max_message is refused, naming both sizes; so is a batch
   * item (the ones before it are published). */
  CHECK_STATUS(shmbus_producer_publish(p, payload, 489, 0, NULL), SHMBUS_TOO_LARGE);
  CHECK(strstr(shmbus_last_error(), "489 bytes, max 488") != NULL);
  sizes[1] = 489;
  items[1] = payload;
  CHECK_STATUS(shmbus_producer_publish_batch(p, items, sizes, 3, 0, &published), SHMBUS_TOO_LARGE);
  CHECK(published == 1 && strstr(shmbus_last_error(), "489 bytes, max 488") != NULL);

done:
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(by_next);
  shmbus_consumer_destroy(by_batch);
  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove(bus_name2, NULL), SHMBUS_OK);
}

/* Two buses in one wait set: wait() and the descriptor name the one with news. */
static void test_wait_set(void) {
  char names[2][64];
  shmbus_bus* buses[2] = {NULL, NULL};
  shmbus_producer* ps[2] = {NULL, NULL};
  shmbus_consumer* cs[2] = {NULL, NULL};
  shmbus_consumer* ready[4];
  shmbus_wait_set* set = NULL;
  shmbus_message m;
  struct pollfd pfd;
  int i, fd;
  CHECK_STATUS(shmbus_wait_set_new(NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK_STATUS(shmbus_wait_set_add(NULL, NULL), SHMBUS_INVALID_ARGUMENT);
  CHECK(shmbus_wait_set_wait(NULL, 0, ready, 4) == -1);
  CHECK(shmbus_wait_set_fd(NULL) == -1);
  shmbus_wait_set_destroy(NULL);
  CHECK_STATUS(shmbus_wait_set_new(NULL, &set), SHMBUS_OK);
  for (i = 0; i < 2; ++i) {
    snprintf(names[i], sizeof names[i], "c-api-ws-%d-%ld", i, (long)getpid());
    CHECK_STATUS(shmbus_bus_create(names[i], NULL, &buses[i]), SHMBUS_OK);
    CHECK_STATUS(shmbus_consumer_open(buses[i], NULL, &cs[i]), SHMBUS_OK);
    CHECK_STATUS(shmbus_producer_open(buses[i], NULL, &ps[i]), SHMBUS_OK);
    CHECK_STATUS(shmbus_wait_set_add(set, cs[i]), SHMBUS_OK);
  }
  CHECK_STATUS(shmbus_wait_set_add(set, cs[0]), SHMBUS_INVALID_OPTIONS);
  CHECK(shmbus_wait_set_wait(set, 1000000, ready, 4) == 0);
  fd = shmbus_wait_set_fd(set);
  CHECK(fd >= 0);
  CHECK(shmbus_wait_set_wait(set, 0, ready, 4) == 0);
  pfd.fd = fd;
  pfd.events = POLLIN;
  CHECK(poll(&pfd, 1, 20) == 0);
  CHECK_STATUS(shmbus_producer_publish(ps[1], "ws", 2, SHMBUS_FOREVER, NULL), SHMBUS_OK);
  CHECK(poll(&pfd, 1, 5000) == 1);
  CHECK(shmbus_wait_set_wait(set, 0, ready, 4) == 1);
  CHECK(ready[0] == cs[1]);
  CHECK(shmbus_consumer_next(ready[0], 0, &m) == SHMBUS_READ_MESSAGE);
  CHECK(m.size == 2 && memcmp(m.data, "ws", 2) == 0);
  CHECK(shmbus_wait_set_wait(set, 0, ready, 4) == 0);
  CHECK_STATUS(shmbus_wait_set_remove(set, cs[1]), SHMBUS_OK);
  CHECK_STATUS(shmbus_producer_publish(ps[1], "no", 2, SHMBUS_FOREVER, NULL), SHMBUS_OK);
  CHECK(shmbus_wait_set_wait(set, 20000000, ready, 4) == 0); /* not a member any more */
  shmbus_wait_set_destroy(set);
  for (i = 0; i < 2; ++i) {
    shmbus_producer_destroy(ps[i]);
    shmbus_consumer_destroy(cs[i]);
    shmbus_bus_close(buses[i]);
    shmbus_bus_remove(names[i], NULL);
  }
}

/* Buses in a directory of the caller's choice: the _in calls, shmbus_set_dir
 * and $SHMBUS_DIR; a bus of one directory is not seen from another. */
static void test_bus_directories(void) {
  char a[] = "/dev/shm/shmbus-capi.XXXXXX";
  char b[] = "/dev/shm/shmbus-capi.XXXXXX";
  char path[256], missing[128];
  const char* name = "c-api-dir";
  shmbus_bus* bus = NULL;
  shmbus_bus* again = NULL;
  shmbus_snapshot* snap = NULL;
  shmbus_bus_options o;
  int removed = -1;
  if (!mkdtemp(a) || !mkdtemp(b)) {
    CHECK(!"mkdtemp");
    return;
  }
  shmbus_bus_options_init(&o);
  o.capacity = 64;
  o.record_size = 128;
  CHECK_STATUS(shmbus_bus_create_in(a, name, &o, &bus), SHMBUS_OK);
  snprintf(path, sizeof path, "%s/shmbus.%s", a, name);
  CHECK(access(path, F_OK) == 0);
  CHECK(shmbus_bus_exists_in(a, name) == 1);
  CHECK(shmbus_bus_exists_in(b, name) == 0);
  CHECK(shmbus_bus_exists(name) == 0);
  CHECK_STATUS(shmbus_bus_open_in(b, name, &again), SHMBUS_NOT_FOUND);
  CHECK(strstr(shmbus_last_error(), b) != NULL);
  CHECK_STATUS(shmbus_bus_open_in(a, name, &again), SHMBUS_OK);
  shmbus_bus_close(again);
  CHECK_STATUS(shmbus_inspect_in(a, name, &snap), SHMBUS_OK);
  if (snap) {
    CHECK(snap->dir != NULL && strcmp(snap->dir, a) == 0);
    CHECK(snap->pages != NULL && strncmp(snap->pages, "tmpfs", 5) == 0);
    CHECK(snap->page_size >= 4096);
  }
  shmbus_snapshot_free(snap);
  CHECK_STATUS(shmbus_bus_open_or_create_in(a, name, &o, &again), SHMBUS_OK);
  shmbus_bus_close(again);
  /* Other options than the bus's own: refused, naming both, unless _as_is. */
  {
    shmbus_bus_options other = o;
    shmbus_bus_info info;
    other.record_size = o.record_size * 2;
    CHECK_STATUS(shmbus_bus_open_or_create_in(a, name, &other, &again), SHMBUS_OPTIONS_DIFFER);
    CHECK(strstr(shmbus_last_error(), "exists as block") != NULL);
    CHECK(strcmp(shmbus_status_str(SHMBUS_OPTIONS_DIFFER), "options differ") == 0);
    CHECK_STATUS(shmbus_bus_open_or_create_as_is_in(a, name, &other, &again), SHMBUS_OK);
    CHECK_STATUS(shmbus_bus_get_info(again, &info), SHMBUS_OK);
    CHECK(info.record_size == o.record_size);
    shmbus_bus_close(again);
  }

  /* The process default, over $SHMBUS_DIR, over /dev/shm. */
  setenv("SHMBUS_DIR", b, 1);
  CHECK(strcmp(shmbus_dir(), b) == 0);
  CHECK(shmbus_bus_exists(name) == 0);
  CHECK_STATUS(shmbus_set_dir(a), SHMBUS_OK);
  CHECK(strcmp(shmbus_dir(), a) == 0);
  CHECK(shmbus_bus_exists(name) == 1);
  CHECK_STATUS(shmbus_set_dir(NULL), SHMBUS_OK);
  unsetenv("SHMBUS_DIR");
  CHECK(strcmp(shmbus_dir(), "/dev/shm") == 0);

  snprintf(missing, sizeof missing, "%s/missing", a);
  CHECK_STATUS(shmbus_set_dir(missing), SHMBUS_BAD_DIRECTORY);
  CHECK(strstr(shmbus_last_error(), missing) != NULL);
  CHECK(strcmp(shmbus_status_str(SHMBUS_BAD_DIRECTORY), "bad directory") == 0);
  CHECK_STATUS(shmbus_bus_create_in(missing, name, &o, &again), SHMBUS_BAD_DIRECTORY);

  shmbus_bus_close(bus);
  CHECK_STATUS(shmbus_bus_remove_in(b, name, &removed), SHMBUS_OK);
  CHECK(removed == 0);
  CHECK_STATUS(shmbus_bus_remove_in(a, name, &removed), SHMBUS_OK);
  CHECK(removed == 1);
  rmdir(a);
  rmdir(b);
}

int main(void) {
  snprintf(bus_name, sizeof bus_name, "c-api-test-%ld", (long)getpid());
  snprintf(bus_name2, sizeof bus_name2, "c-api-test-ow-%ld", (long)getpid());
  CHECK(strlen(shmbus_version()) > 0);
  test_invalid_arguments();
  test_block_bus();
  test_overwrite_bus_reports_losses();
  test_durable_reader_resumes();
  test_evicted_reader_is_told();
  test_best_effort_reader();
  test_hold_limit();
  test_spanning_messages(SHMBUS_POLICY_BLOCK);
  test_spanning_messages(SHMBUS_POLICY_OVERWRITE);
  test_wait_set();
  test_bus_directories();
  shmbus_bus_remove(bus_name, NULL);
  shmbus_bus_remove(bus_name2, NULL);
  if (failures) {
    fprintf(stderr, "c_api_test: %d checks failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}

/* shmbus — the C API (C99; usable from C++ too).
 *
 * The same bus as the C++ API (shmbus.hpp), behind opaque handles, for C
 * programs and for other languages' foreign-function interfaces.
 *
 * Rules that hold for every function here:
 *  - No exception, signal or longjmp ever leaves a call. A function that can
 *    fail returns a shmbus_status (SHMBUS_OK is 0) or, for reads, a
 *    shmbus_read_status with SHMBUS_READ_ERROR; the reason, one line naming
 *    the bus, is then in shmbus_last_error(), which is per thread.
 *  - Every pointer argument is checked: a NULL handle or output pointer, a
 *    NULL data pointer with a non-zero size, a size or count out of range is
 *    SHMBUS_INVALID_ARGUMENT, never a crash.
 *  - Handles are not thread-safe: one thread at a time per producer or
 *    consumer (different handles may be used from different threads).
 *  - Timeouts are nanoseconds; SHMBUS_FOREVER (any negative value) waits as
 *    long as it takes, 0 only looks.
 *  - A bus handle may be closed while producers or consumers made from it
 *    are still open: they keep the mapping alive.
 *
 * A minimal round trip:
 *
 *   shmbus_bus* bus; shmbus_producer* p; shmbus_consumer* c; shmbus_message m;
 *   if (shmbus_bus_create("ticks", NULL, &bus) != SHMBUS_OK) {
 *     fprintf(stderr, "%s\n", shmbus_last_error()); return 1;
 *   }
 *   shmbus_consumer_open(bus, NULL, &c);   // from the earliest record
 *   shmbus_producer_open(bus, NULL, &p);
 *   shmbus_producer_publish(p, "hi", 2, SHMBUS_FOREVER, NULL);
 *   if (shmbus_consumer_next(c, 1000000000, &m) == SHMBUS_READ_MESSAGE)
 *     printf("#%llu %.*s\n", (unsigned long long)m.seq, (int)m.size, (const char*)m.data);
 *   shmbus_producer_destroy(p); shmbus_consumer_destroy(c); shmbus_bus_close(bus);
 *   shmbus_bus_remove("ticks", NULL);
 */
#ifndef SHMBUS_SHMBUS_H
#define SHMBUS_SHMBUS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define SHMBUS_API __attribute__((visibility("default")))
#else
#define SHMBUS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes ------------------------------------------------------ */

/* 1..23 are the setup errors of the C++ API (shmbus::Errc), same values. */
typedef enum shmbus_status {
  SHMBUS_OK = 0,
  SHMBUS_INVALID_NAME = 1,       /* empty, too long, '/', "..", leading '.' or '-' */
  SHMBUS_INVALID_OPTIONS = 2,    /* capacity not a power of two, record size not a multiple of 8, ... */
  SHMBUS_ALREADY_EXISTS = 3,     /* create on a bus that exists */
  SHMBUS_NOT_FOUND = 4,          /* open on a bus that does not exist */
  SHMBUS_PERMISSION_DENIED = 5,  /* the segment exists but may not be opened, mapped or removed */
  SHMBUS_NO_SPACE = 6,           /* the bus directory (/dev/shm) cannot hold the segment */
  SHMBUS_NOT_A_BUS = 7,          /* wrong magic number */
  SHMBUS_VERSION_MISMATCH = 8,   /* another layout version */
  SHMBUS_TRUNCATED = 9,          /* the segment is smaller than its header says */
  SHMBUS_CORRUPT = 10,           /* an impossible header field or offset */
  SHMBUS_NOT_READY = 11,         /* the creator never finished initialising the segment */
  SHMBUS_PRODUCER_ACTIVE = 12,   /* another live process is the producer (the message names it) */
  SHMBUS_READER_TABLE_FULL = 13, /* every reader slot holds a live reader */
  SHMBUS_NOT_RETAINED = 14,      /* the start sequence is not (or no longer) in the ring */
  SHMBUS_SYSTEM = 15,            /* an operating-system call failed */
  SHMBUS_TIMEOUT = 16,           /* a wait ran out (setup waits, and publish/claim on a full block bus) */
  SHMBUS_FOREIGN_OWNER = 17,     /* the segment belongs to a user this process does not trust */
  SHMBUS_INSECURE_MODE = 18,     /* open_or_create found a more permissive mode than asked */
  SHMBUS_NOT_ALLOCATED = 19,     /* the segment is sparse (would raise SIGBUS) */
  SHMBUS_NAME_IN_USE = 20,       /* a live durable reader holds this name (the message names its pid) */
  SHMBUS_BOOKMARKS_FULL = 21,    /* every bookmark holds a durable name (shmbus-inspect gc --forget) */
  SHMBUS_UNSAFE_FILE = 22,       /* the bus path is a FIFO, device, symlink or has more than one link */
  SHMBUS_BAD_DIRECTORY = 23,     /* the bus directory is missing, not a directory, not tmpfs/hugetlbfs */
  SHMBUS_OPTIONS_DIFFER = 24,    /* open_or_create found the bus with other options than asked */

  SHMBUS_INVALID_ARGUMENT = 100, /* NULL handle or pointer, size or value out of range */
  SHMBUS_OUT_OF_MEMORY = 101,
  SHMBUS_INTERNAL = 102,         /* an unexpected C++ exception; see shmbus_last_error() */
  SHMBUS_TOO_LARGE = 110,        /* payload longer than the bus's max_message */
  SHMBUS_CLOSED = 111,           /* the producer was closed or detached */
  SHMBUS_CLAIM_PENDING = 112,    /* publish or claim while a claim is open: commit it first */
  SHMBUS_NO_CLAIM = 113          /* commit without an open claim, or larger than the claim */
} shmbus_status;

/* A short constant description of a status ("timeout", "not found", ...). */
SHMBUS_API const char* shmbus_status_str(int status);

/* The message of the last failed call on this thread (one line, naming the
 * bus), or "" if none failed yet. Valid until the next failing call on this
 * thread. Successful calls leave it as it was. */
SHMBUS_API const char* shmbus_last_error(void);

#define SHMBUS_FOREVER ((int64_t)-1)

/* The library's version, e.g. "0.4.0". */
SHMBUS_API const char* shmbus_version(void);

/* ---- Buses ------------------------------------------------------------- */

typedef struct shmbus_bus shmbus_bus;

typedef enum shmbus_policy {
  SHMBUS_POLICY_BLOCK = 1,     /* never overwrite what a live reader has not read */
  SHMBUS_POLICY_OVERWRITE = 2  /* never wait; readers that fall behind are told how much they lost */
} shmbus_policy;

typedef struct shmbus_bus_options {
  uint64_t capacity;     /* records in the ring, a power of two >= 2; 0 (the default): the power of
                            two whose ring is nearest 4 MiB, at least 64 (shmbus_default_capacity()) */
  uint32_t record_size;  /* bytes per record, 24-byte header included, multiple of 8 (default 256) */
  uint32_t policy;       /* shmbus_policy (default SHMBUS_POLICY_BLOCK) */
  uint32_t max_readers;  /* reader slots, 1..1024 (default 16) */
  uint32_t mode;         /* permission bits of the segment (default 0600) */
} shmbus_bus_options;

/* Fills `options` with the defaults above. */
SHMBUS_API void shmbus_bus_options_init(shmbus_bus_options* options);
/* The capacity a bus of `record_size`-byte records gets when its options say 0. */
SHMBUS_API uint64_t shmbus_default_capacity(uint32_t record_size);

/* Creates a bus exclusively (SHMBUS_ALREADY_EXISTS if it exists). `options`
 * may be NULL for the defaults. The whole segment is reserved up front. */
SHMBUS_API shmbus_status shmbus_bus_create(const char* name, const shmbus_bus_options* options,
                                           shmbus_bus** out);

/* Opens an existing bus, validating its header against the real segment
 * size. Never waits: a bus appears under its name only once its creator has
 * finished it, so `ready_timeout_ns` is unused (kept for compatibility). */
SHMBUS_API shmbus_status shmbus_bus_open(const char* name, int64_t ready_timeout_ns,
                                         shmbus_bus** out);

/* Creates the bus, or opens it if it exists with the options asked (policy,
 * capacity, record size, reader slots; capacity 0 stands for
 * shmbus_default_capacity(record_size)): one with others is refused,
 * SHMBUS_OPTIONS_DIFFER, shmbus_last_error() naming both. The _as_is calls
 * join an existing bus with its own options instead (check
 * shmbus_bus_info() if they matter). */
SHMBUS_API shmbus_status shmbus_bus_open_or_create(const char* name,
                                                   const shmbus_bus_options* options,
                                                   shmbus_bus** out);
SHMBUS_API shmbus_status shmbus_bus_open_or_create_as_is(const char* name,
                                                         const shmbus_bus_options* options,
                                                         shmbus_bus** out);

/* Where buses live. Every call without `_in` uses the default directory:
 * the one shmbus_set_dir() set in this process, else $SHMBUS_DIR (when set
 * and not empty), else /dev/shm. The `_in` calls take the directory first
 * (NULL: the default). A directory must exist and be on tmpfs or hugetlbfs
 * (SHMBUS_BAD_DIRECTORY otherwise); on hugetlbfs a segment is rounded up to
 * whole huge pages. A bus in one directory is not visible from another. */
SHMBUS_API shmbus_status shmbus_set_dir(const char* dir); /* NULL or "": back to $SHMBUS_DIR, /dev/shm */
/* The default directory, as given. Valid until the next call on this thread. */
SHMBUS_API const char* shmbus_dir(void);
SHMBUS_API shmbus_status shmbus_bus_create_in(const char* dir, const char* name,
                                              const shmbus_bus_options* options, shmbus_bus** out);
SHMBUS_API shmbus_status shmbus_bus_open_in(const char* dir, const char* name, shmbus_bus** out);
SHMBUS_API shmbus_status shmbus_bus_open_or_create_in(const char* dir, const char* name,
                                                      const shmbus_bus_options* options,
                                                      shmbus_bus** out);
SHMBUS_API shmbus_status shmbus_bus_open_or_create_as_is_in(const char* dir, const char* name,
                                                            const shmbus_bus_options* options,
                                                            shmbus_bus** out);
SHMBUS_API shmbus_status shmbus_bus_remove_in(const char* dir, const char* name, int* removed);
SHMBUS_API int shmbus_bus_exists_in(const char* dir, const char* name);

/* Releases the handle (NULL is ignored). Producers and consumers made from it
 * stay usable. */
SHMBUS_API void shmbus_bus_close(shmbus_bus* bus);

/* Removes a bus's name; processes that have it mapped keep using it.
 * `*removed` (may be NULL) is 1 if it existed, 0 if not (still SHMBUS_OK). */
SHMBUS_API shmbus_status shmbus_bus_remove(const char* name, int* removed);

/* 1 if a segment of that name exists, 0 if not or the name is invalid. */
SHMBUS_API int shmbus_bus_exists(const char* name);

/* Byte offsets: name 0, policy 204, capacity 208, record_size 216,
 * max_payload 220, max_message 224, max_readers 228, layout_version 232,
 * reserved 236, segment_size 240, creation_time_ns 248; 256 bytes in all. */
typedef struct shmbus_bus_info {
  char name[201];           /* NUL-terminated */
  uint32_t policy;          /* shmbus_policy */
  uint64_t capacity;
  uint32_t record_size;
  uint32_t max_payload;     /* longest message that fits one record (record_size - 24) */
  uint32_t max_message;     /* longest message the bus accepts: a longer one than max_payload takes
                               consecutive records (at most half the ring, and at most 1 GiB) */
  uint32_t max_readers;
  uint32_t layout_version;
  uint32_t reserved;        /* 0 */
  uint64_t segment_size;
  uint64_t creation_time_ns;  /* CLOCK_REALTIME */
} shmbus_bus_info;

SHMBUS_API shmbus_status shmbus_bus_get_info(const shmbus_bus* bus, shmbus_bus_info* out);

/* Next sequence to be published, and the oldest still retained (0 for NULL). */
SHMBUS_API uint64_t shmbus_bus_head(const shmbus_bus* bus);
SHMBUS_API uint64_t shmbus_bus_oldest(const shmbus_bus* bus);

/* ---- Waiting ----------------------------------------------------------- */

typedef enum shmbus_wait_strategy {
  SHMBUS_WAIT_BUSY_SPIN = 0,  /* spin only: burns a core */
  SHMBUS_WAIT_SPIN_YIELD = 1, /* spin, then sched_yield(); never sleeps */
  SHMBUS_WAIT_ADAPTIVE = 2    /* spin, yield, then sleep on a futex (the default) */
} shmbus_wait_strategy;

typedef struct shmbus_wait_options {
  uint32_t strategy;      /* shmbus_wait_strategy */
  int64_t spin_time_ns;   /* default 2000 */
  int64_t yield_time_ns;  /* default 20000 */
} shmbus_wait_options;

/* ---- Producer ---------------------------------------------------------- */

typedef struct shmbus_producer shmbus_producer;

typedef enum shmbus_timestamps {
  SHMBUS_TIMESTAMPS_OFF = 0,     /* records carry timestamp 0 (the default; fastest) */
  SHMBUS_TIMESTAMPS_COARSE = 1,  /* the kernel's last tick, 1-4 ms resolution */
  SHMBUS_TIMESTAMPS_PRECISE = 2  /* CLOCK_REALTIME in ns */
} shmbus_timestamps;

typedef struct shmbus_producer_options {
  shmbus_wait_options wait;           /* how publish/claim wait for space */
  uint32_t timestamps;                /* shmbus_timestamps */
  uint32_t wait_for_readers;          /* open waits until this many live consumers are attached */
  int64_t wait_for_readers_timeout_ns;/* SHMBUS_FOREVER by default; SHMBUS_TIMEOUT when it runs out */
  int64_t max_hold_ns;                /* block bus: a reader that holds the producer back without moving
                                         for this long of its waiting is let go (it gets
                                         SHMBUS_READ_LET_GO and reads on as a best-effort one);
                                         SHMBUS_FOREVER (the default): never */
} shmbus_producer_options;

SHMBUS_API void shmbus_producer_options_init(shmbus_producer_options* options);

/* Takes the bus's producer role. SHMBUS_PRODUCER_ACTIVE (naming the pid) if a
 * live process holds it; a dead holder is taken over and the sequence
 * continues. `options` may be NULL. */
SHMBUS_API shmbus_status shmbus_producer_open(shmbus_bus* bus, const shmbus_producer_options* options,
                                              shmbus_producer** out);

/* Copies `size` bytes (up to the bus's max_message) into the next record
 * and publishes it; a message longer than max_payload takes consecutive
 * records. `seq` (may be NULL) receives its sequence number. Returns
 * SHMBUS_OK, SHMBUS_TOO_LARGE (the reason names both sizes),
 * SHMBUS_TIMEOUT (block bus full for the whole timeout), SHMBUS_CLOSED,
 * SHMBUS_CLAIM_PENDING or SHMBUS_INVALID_ARGUMENT. */
SHMBUS_API shmbus_status shmbus_producer_publish(shmbus_producer* producer, const void* data,
                                                 size_t size, int64_t timeout_ns, uint64_t* seq);

/* Reserves the next record (records, for `size` > max_payload) for `size`
 * bytes, up to max_message, to be written in place: `*data` points into the
 * shared segment, one contiguous span writable for `size` bytes until
 * shmbus_producer_commit(). `seq` may be NULL. Same statuses as publish. */
SHMBUS_API shmbus_status shmbus_producer_claim(shmbus_producer* producer, size_t size,
                                               int64_t timeout_ns, void** data, uint64_t* seq);

/* Publishes the open claim with its first `size` bytes (<= the claimed size;
 * SHMBUS_NO_CLAIM otherwise or when nothing is claimed). */
SHMBUS_API shmbus_status shmbus_producer_commit(shmbus_producer* producer, size_t size);

/* Publishes `count` messages (each up to max_message) in order, with one
 * head update per run of one-record messages. `*published` (required)
 * receives how many were published: all, or fewer on a timeout or a
 * too-large message (returned as SHMBUS_TIMEOUT / SHMBUS_TOO_LARGE). */
SHMBUS_API shmbus_status shmbus_producer_publish_batch(shmbus_producer* producer,
                                                       const void* const* data, const size_t* sizes,
                                                       size_t count, int64_t timeout_ns,
                                                       size_t* published);

/* Marks end-of-stream and gives up the producer role; consumers drain what was
 * published and then read SHMBUS_READ_END_OF_STREAM. Later publishes return
 * SHMBUS_CLOSED. */
SHMBUS_API shmbus_status shmbus_producer_close(shmbus_producer* producer);

/* Gives up the role WITHOUT end-of-stream: consumers wait for a new producer. */
SHMBUS_API shmbus_status shmbus_producer_detach(shmbus_producer* producer);

/* Next sequence this producer will publish (0 for NULL). */
SHMBUS_API uint64_t shmbus_producer_next_seq(const shmbus_producer* producer);

/* Frees the handle; closes the stream first unless close or detach was called.
 * NULL is ignored. */
SHMBUS_API void shmbus_producer_destroy(shmbus_producer* producer);

/* ---- Consumer ---------------------------------------------------------- */

typedef struct shmbus_consumer shmbus_consumer;

typedef enum shmbus_start {
  SHMBUS_START_EARLIEST = 0,  /* the oldest retained record */
  SHMBUS_START_LATEST = 1,    /* only messages published after attaching */
  SHMBUS_START_SEQUENCE = 2,  /* start_seq; SHMBUS_NOT_RETAINED if gone */
  SHMBUS_START_RESUME = 3     /* where the durable reader `name` stopped (implies durable); the
                                 oldest retained record for a new name. Messages after its
                                 bookmark that are gone count in lost and resume_gap */
} shmbus_start;

typedef struct shmbus_consumer_options {
  const char* name;    /* shown by shmbus-inspect; up to 31 bytes (longer: SHMBUS_INVALID_OPTIONS);
                          NULL: "consumer" */
  uint32_t start;      /* shmbus_start */
  uint64_t start_seq;  /* with SHMBUS_START_SEQUENCE */
  /* 1: a durable reader. It holds `name` exclusively while attached
   * (SHMBUS_NAME_IN_USE otherwise) and leaves its cursor in the bus under
   * that name when it detaches or dies, for SHMBUS_START_RESUME. A
   * remembered name never holds a block producer back. */
  uint32_t durable;
  /* 1: a best-effort reader: it never holds a block bus's producer back;
   * lapped, it gets SHMBUS_READ_LOST with the exact count (ConsumerOptions::
   * hold_producer = false in C++). 0 (the default): it holds it. */
  uint32_t best_effort;
  shmbus_wait_options wait;
} shmbus_consumer_options;

SHMBUS_API void shmbus_consumer_options_init(shmbus_consumer_options* options);

/* Takes a reader slot (SHMBUS_READER_TABLE_FULL if none is free).
 * `options` may be NULL (earliest, named "consumer"). */
SHMBUS_API shmbus_status shmbus_consumer_open(shmbus_bus* bus, const shmbus_consumer_options* options,
                                              shmbus_consumer** out);

typedef enum shmbus_read_status {
  SHMBUS_READ_ERROR = -1,          /* invalid argument; see shmbus_last_error() */
  SHMBUS_READ_MESSAGE = 0,         /* the message is in *out */
  SHMBUS_READ_TIMEOUT = 1,         /* nothing new within the timeout */
  SHMBUS_READ_END_OF_STREAM = 2,   /* producer closed or died and everything was read */
  SHMBUS_READ_LOST = 3,            /* overwrite bus or best-effort reader: out->lost messages were
                                      overwritten */
  SHMBUS_READ_CORRUPT = 4,         /* the record at out->seq was impossible; skipped */
  SHMBUS_READ_EVICTED = 5,         /* this consumer's slot was taken from it (a stray store, or freed
                                      by force): it took it back and goes on at out->seq; out->lost
                                      messages before that are gone, and the previous call's view
                                      may have been overwritten */
  SHMBUS_READ_LET_GO = 6           /* the producer's hold limit (max_hold_ns) ran out while it waited
                                      for this reader, or shmbus_let_go_reader(): from here it reads as a best-effort reader
                                      (laps are SHMBUS_READ_LOST); it goes on at out->seq, nothing
                                      lost yet; the previous call's view may have been overwritten */
} shmbus_read_status;

/* Why a stream ended (with SHMBUS_READ_END_OF_STREAM). */
typedef enum shmbus_end_reason {
  SHMBUS_END_NONE = 0,
  SHMBUS_END_CLOSED = 1,         /* the producer closed the bus */
  SHMBUS_END_PRODUCER_DIED = 2,  /* the producer died without closing it */
  SHMBUS_END_REMOVED = 3         /* the bus was removed by force */
} shmbus_end_reason;

/* One message. `data` points into shared memory (block bus) or into the
 * consumer's own buffer (overwrite bus, best-effort reader); either way it is valid until the
 * next read call on the same consumer, and one contiguous `size` bytes, also
 * for a message that spans records.
 * Sequence numbers count records: a message longer than the bus's
 * max_payload takes `records` of them, and the next message's seq is at
 * least seq + records.
 * Byte offsets on LP64: seq 0, timestamp_ns 8, data 16, size 24, lost 32,
 * end_reason 40, stale_view 44, records 48, reserved 52; 56 bytes in all. */
typedef struct shmbus_message {
  uint64_t seq;
  uint64_t timestamp_ns;  /* CLOCK_REALTIME at publish, or 0 */
  const void* data;
  size_t size;
  uint64_t lost;          /* with SHMBUS_READ_LOST and SHMBUS_READ_EVICTED */
  uint32_t end_reason;    /* shmbus_end_reason, with SHMBUS_READ_END_OF_STREAM */
  uint32_t stale_view;    /* with SHMBUS_READ_EVICTED and SHMBUS_READ_LET_GO: 1 if the message
                             the previous call returned was overwritten while it was held */
  uint32_t records;       /* with SHMBUS_READ_MESSAGE: records the message takes (1 if it fits
                             one); 0 otherwise */
  uint32_t reserved;      /* 0 */
} shmbus_message;

/* The next message, waiting up to `timeout_ns`. */
SHMBUS_API shmbus_read_status shmbus_consumer_next(shmbus_consumer* consumer, int64_t timeout_ns,
                                                   shmbus_message* out);

typedef struct shmbus_batch_result {
  uint64_t lost;       /* messages lost (overwrite) before or between those returned */
  uint64_t corrupt;    /* records skipped as corrupt */
  int end_of_stream;   /* 1 if the stream ended after these */
  uint32_t end_reason; /* shmbus_end_reason, with end_of_stream */
  int evicted;         /* 1 if the consumer's slot was taken from it (see SHMBUS_READ_EVICTED):
                          nothing was read, `lost` says what is gone */
  int stale_view;      /* with evicted or let_go: a message from the previous call was overwritten */
  int let_go;          /* 1 if the producer stopped waiting for this reader (see SHMBUS_READ_LET_GO):
                          nothing was read */
} shmbus_batch_result;

/* Up to `max` messages available now (waiting up to `timeout_ns` for the
 * first) into out[0..]; their data stays valid until the next read call.
 * Returns the number read (0 on a timeout or end of stream), or -1 on an
 * invalid argument. `result` may be NULL. A loss in `result` comes before
 * out[0] and covers every sequence since the message before it (padding
 * included); one met after messages are in hand ends the batch and is
 * told by the next call. */
SHMBUS_API int64_t shmbus_consumer_read_batch(shmbus_consumer* consumer, shmbus_message* out,
                                              size_t max, int64_t timeout_ns,
                                              shmbus_batch_result* result);

/* Next sequence this consumer will read; messages delivered and lost so far;
 * its slot in the reader table (0 for NULL). */
SHMBUS_API uint64_t shmbus_consumer_cursor(const shmbus_consumer* consumer);
SHMBUS_API uint64_t shmbus_consumer_delivered(const shmbus_consumer* consumer);
SHMBUS_API uint64_t shmbus_consumer_lost(const shmbus_consumer* consumer);
SHMBUS_API uint32_t shmbus_consumer_slot(const shmbus_consumer* consumer);
/* SHMBUS_START_RESUME: 1 if the name had a bookmark (0: a new name), and how
 * many messages after the bookmark were gone (also counted in lost). */
SHMBUS_API int shmbus_consumer_resumed(const shmbus_consumer* consumer);
SHMBUS_API uint64_t shmbus_consumer_resume_gap(const shmbus_consumer* consumer);

/* Releases the reader slot and frees the handle. NULL is ignored. */
SHMBUS_API void shmbus_consumer_destroy(shmbus_consumer* consumer);

/* ---- Waiting on many consumers from one thread ----
 *
 * A wait set holds up to 127 consumers. shmbus_wait_set_wait() returns those
 * with news (a message, a loss, the end of the stream, a slot taken) until
 * their news is read; shmbus_wait_set_fd() gives a descriptor for epoll,
 * poll or an event loop: readable once a member may have news; then call
 * shmbus_wait_set_wait(set, 0, ...), which keeps it readable while it
 * returns members and makes it quiet when it returns none. A member must be
 * removed before it is destroyed. One thread at a time per set. */
typedef struct shmbus_wait_set shmbus_wait_set;

/* `wait` may be NULL (the default spin, yield, then sleep). */
SHMBUS_API shmbus_status shmbus_wait_set_new(const shmbus_wait_options* wait, shmbus_wait_set** out);
/* SHMBUS_INVALID_OPTIONS if it is a member already or the set is full. */
SHMBUS_API shmbus_status shmbus_wait_set_add(shmbus_wait_set* set, shmbus_consumer* consumer);
/* Nothing if it is not a member. */
SHMBUS_API shmbus_status shmbus_wait_set_remove(shmbus_wait_set* set, shmbus_consumer* consumer);
/* Waits up to `timeout_ns` for news; stores up to `max` members with news in
 * `ready` (in the order they were added) and returns how many (0 after the
 * timeout), or -1 on a bad argument. */
SHMBUS_API int64_t shmbus_wait_set_wait(shmbus_wait_set* set, int64_t timeout_ns, shmbus_consumer** ready,
                                        size_t max);
/* The descriptor (owned by the set: do not close it), or -1 (see
 * shmbus_last_error()). */
SHMBUS_API int shmbus_wait_set_fd(shmbus_wait_set* set);
/* NULL is ignored. */
SHMBUS_API void shmbus_wait_set_destroy(shmbus_wait_set* set);

/* ---- Inspection -------------------------------------------------------- */

/* Decided by the kernel: every role is held through a lock it drops when the
 * holder's process exits, in any PID or mount namespace. Pids are labels, as
 * the holder sees itself (a container's process may show as pid 1). */
typedef enum shmbus_liveness {
  SHMBUS_ALIVE = 0,
  SHMBUS_DEAD = 1,    /* nobody holds the role's lock: its process is gone */
  SHMBUS_LIVENESS_UNKNOWN = 2  /* the lock could not be tested; never treated as dead */
} shmbus_liveness;

typedef struct shmbus_reader_view {
  uint32_t slot;
  int32_t pid;
  uint32_t liveness;          /* shmbus_liveness */
  int sleeping;               /* 1 if asleep waiting for data */
  char name[32];              /* NUL-terminated */
  uint64_t cursor;            /* next sequence it will read */
  uint64_t lag;               /* head - cursor */
  uint64_t delivered;
  uint64_t lost;
  uint64_t attach_time_ns;    /* CLOCK_REALTIME */
  uint64_t last_active_ns;    /* CLOCK_REALTIME of its last batch or wait */
  int best_effort;            /* 1: a block bus's reader that does not hold the producer */
  uint64_t let_go_ns;         /* CLOCK_REALTIME the producer let it go (hold limit), 0 if never */
} shmbus_reader_view;

/* A durable reader name remembered in the bus (shmbus_consumer_options.name
 * with durable): where SHMBUS_START_RESUME under that name continues. */
typedef struct shmbus_bookmark_view {
  uint32_t index;             /* its place in the bus's bookmark table */
  int held;                   /* 1 if a live reader holds the name now */
  int32_t holder_pid;         /* with held, else 0 */
  char name[32];              /* NUL-terminated */
  uint64_t cursor;            /* next sequence a resume under this name reads */
  uint64_t updated_ns;        /* CLOCK_REALTIME the name was created, its holder detached, or reset moved it */
} shmbus_bookmark_view;

typedef struct shmbus_snapshot {
  shmbus_bus_info info;
  uint64_t head;
  uint64_t oldest;
  uint64_t last_publish_ns;
  /* counters */
  uint64_t published;
  uint64_t producer_waits;
  uint64_t producer_wait_ns;
  uint64_t wakeups;
  uint64_t readers_reclaimed;
  uint64_t readers_let_go;    /* readers a producer stopped waiting for (hold limit) */
  uint32_t data_sleepers;
  /* producer */
  int producer_attached;
  int32_t producer_pid;
  uint32_t producer_liveness;  /* shmbus_liveness */
  int producer_closed;
  int producer_waiting_for_space;
  int64_t producer_blocked_on_slot;  /* -1 if none */
  uint32_t takeovers;
  /* readers (slots in use) */
  size_t reader_count;
  shmbus_reader_view* readers;
  /* remembered reader names (after the readers: the snapshot is allocated
   * by the library, so older callers are not affected) */
  size_t bookmark_count;
  shmbus_bookmark_view* bookmarks;
  /* where the segment lives and what backs it (after the bookmarks, for
   * the same reason); NUL-terminated, owned by the snapshot */
  const char* dir;      /* the directory of the segment, absolute */
  const char* pages;    /* e.g. "tmpfs, 4 KiB pages", "hugetlbfs, 2 MiB huge pages" */
  uint64_t page_size;   /* bytes: the huge page size on hugetlbfs, else the base page size */
  /* reader_count entries, one per element of `readers` (NULL when there are
   * none): 1 if a live reader's slot state was overwritten (a stray store
   * into the segment; it is told SHMBUS_READ_EVICTED at its next call) */
  const int* reader_evicted;
} shmbus_snapshot;

/* A consistent-enough copy of a bus's header, counters and reader table,
 * read without attaching (no reader slot, nothing disturbed). Free it with
 * shmbus_snapshot_free. */
SHMBUS_API shmbus_status shmbus_inspect(const char* name, shmbus_snapshot** out);
SHMBUS_API shmbus_status shmbus_inspect_in(const char* dir, const char* name, shmbus_snapshot** out);
SHMBUS_API void shmbus_snapshot_free(shmbus_snapshot* snapshot);

/* ---- Remembered reader names ------------------------------------------- */

/* Where shmbus_move_reader_name() puts a remembered reader name. */
typedef enum shmbus_name_target {
  SHMBUS_TO_EARLIEST = 0,  /* the oldest message the bus retains */
  SHMBUS_TO_LATEST = 1,    /* the head: only messages published from now on */
  SHMBUS_TO_SEQUENCE = 2,  /* `value`: a sequence from oldest to head, not inside a message that spans records */
  SHMBUS_TO_TIME = 3       /* the first retained message (in sequence order) stamped at `value`
                              (CLOCK_REALTIME ns) or later */
} shmbus_name_target;

/* What shmbus_move_reader_name() did. Offsets: every field is 8 bytes, in
 * this order, 48 bytes in all. */
typedef struct shmbus_name_move {
  uint64_t from;          /* where the name would have resumed (its cursor, as stored) */
  uint64_t to;            /* where it resumes now */
  uint64_t oldest;        /* the bus when it moved: oldest retained ... */
  uint64_t head;          /* ... and head */
  uint64_t timestamp_ns;  /* SHMBUS_TO_TIME: the timestamp of the message at `to`; 0 when no
                             retained stamped message is that late (`to` is then the head) */
  uint64_t unstamped;     /* SHMBUS_TO_TIME: messages passed over that carry no timestamp */
} shmbus_name_move;

/* Moves the remembered reader name `reader` of bus `name` so that the next
 * consumer resuming under it (SHMBUS_START_RESUME) starts at `target`
 * (`value` for SHMBUS_TO_SEQUENCE and SHMBUS_TO_TIME, else unused). Holds
 * the name's lock while it looks and writes, so no reader takes the name
 * meanwhile. `*moved` (may be NULL) is 1 if it moved, 0 if no such name is
 * remembered (SHMBUS_OK either way); `out` (may be NULL) gets what was done.
 * Errors: SHMBUS_NAME_IN_USE (a live reader holds the name; the message
 * names its pid), SHMBUS_NOT_RETAINED (a sequence outside oldest..head or
 * inside a message that spans records, the message saying where the next
 * message starts; or a time when no retained message carries a timestamp),
 * SHMBUS_INVALID_OPTIONS (`reader` is empty or longer than 31 bytes: no
 * reader could hold it). */
SHMBUS_API shmbus_status shmbus_move_reader_name(const char* name, const char* reader, uint32_t target,
                                                 uint64_t value, shmbus_name_move* out, int* moved);
SHMBUS_API shmbus_status shmbus_move_reader_name_in(const char* dir, const char* name, const char* reader,
                                                    uint32_t target, uint64_t value, shmbus_name_move* out,
                                                    int* moved);
/* Forgets the remembered reader name `reader` of bus `name`: a consumer
 * resuming under it starts afresh. `*forgotten` (may be NULL) is 1 if it
 * was remembered, 0 if not. SHMBUS_NAME_IN_USE while a live reader holds it;
 * SHMBUS_INVALID_OPTIONS for a name no reader could hold. */
SHMBUS_API shmbus_status shmbus_forget_reader_name(const char* name, const char* reader, int* forgotten);
SHMBUS_API shmbus_status shmbus_forget_reader_name_in(const char* dir, const char* name, const char* reader,
                                                      int* forgotten);
/* Lets the reader in slot `slot` of bus `name` go at once, as a producer's
 * hold limit does: it no longer holds the producer (woken if it waits for
 * space), reads on as a best-effort reader and is told what it loses
 * (SHMBUS_READ_LET_GO, then losses). SHMBUS_NOT_FOUND: no reader in that
 * slot, or one whose process is gone (its slot is freed instead);
 * SHMBUS_INVALID_OPTIONS: the reader does not hold the producer (best-effort,
 * let go already, an overwrite bus); shmbus_last_error() says which.
 * `shmbus-inspect let-go` is the same call. */
SHMBUS_API shmbus_status shmbus_let_go_reader(const char* name, uint32_t slot);
SHMBUS_API shmbus_status shmbus_let_go_reader_in(const char* dir, const char* name, uint32_t slot);

#ifdef __cplusplus
}
#endif

#endif /* SHMBUS_SHMBUS_H */

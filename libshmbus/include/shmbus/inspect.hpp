// shmbus — looking inside a bus without taking part in it.
//
// An Inspector maps a bus read-only, holds no reader slot and never disturbs
// the producer or consumers. It is what shmbus-inspect is built on; everything
// it reports comes from the segment's header, reader table and counters.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shmbus/bus.hpp"
#include "shmbus/liveness.hpp"

namespace shmbus {

struct ProducerView {
  bool attached = false;          // a process holds the producer role
  pid_t pid = 0;                  // the holder, or the last holder (a label)
  std::uint64_t start_ticks = 0;  // its start time from its /proc, 0 if it had none (a label)
  std::uint32_t pid_namespace = 0;  // inode of its PID namespace, 0 if unknown (a label)
  Liveness liveness = Liveness::dead;
  bool closed = false;            // end-of-stream was marked
  // Blocked on a full ring (block policy): from the first publish or claim
  // that found no room until one finds room or the role is given up. Calls
  // that time out in between do not end the wait: a caller that retries (the
  // Python module waits in 100 ms slices) is one wait, since waiting_since_ns.
  bool waiting_for_space = false;
  // The reader holding it back: named when the wait begins, looked at again
  // every 50 ms while it lasts.
  std::optional<std::uint32_t> blocked_on_slot;
  std::uint64_t waiting_since_ns = 0;  // CLOCK_REALTIME the current wait began, 0 if not waiting
  std::uint32_t takeovers = 0;    // producers that took the bus over
  std::uint64_t max_hold_ns = 0;  // its hold limit (ProducerOptions::max_hold), 0 = none
  // Alive but stopped (SIGSTOP, a debugger): publishes nothing until resumed.
  // Told only of a process of this PID namespace, by its /proc (false otherwise).
  bool stopped = false;
};

struct ReaderView {
  std::uint32_t slot = 0;
  pid_t pid = 0;                  // a label (see Liveness)
  std::uint64_t start_ticks = 0;  // its start time from its /proc, 0 if it had none (a label)
  std::uint32_t pid_namespace = 0;  // inode of its PID namespace, 0 if unknown (a label)
  std::uint64_t generation = 0;   // the slot's attachments and reclaims: tells one attachment from the next
  Liveness liveness = Liveness::dead;
  std::string name;
  // Next sequence it will read, as the reader last stored it (what the
  // producer sees): exact while it waits, after a call that found nothing,
  // and at detach; otherwise up to capacity/16 - 1 (at most 31) behind the
  // reader's own Consumer::cursor(), never ahead (consumer_impl.hpp: stored at
  // the start of a call every capacity/16 reads, and before every wait).
  std::uint64_t cursor = 0;
  std::uint64_t delivered = 0;    // stored with the cursor
  std::uint64_t lost = 0;
  std::uint64_t attach_time_ns = 0;    // CLOCK_REALTIME
  std::uint64_t last_active_ns = 0;    // CLOCK_REALTIME of its last batch or wait
  bool sleeping = false;          // asleep on the data futex
  bool best_effort = false;       // a `block` bus's reader that does not hold the producer
                                  // (ConsumerOptions::hold_producer = false), or one
                                  // the producer let go
  std::uint64_t let_go_ns = 0;    // CLOCK_REALTIME the producer let it go (hold limit), 0 = never
  // Its slot was taken from it: the slot's state word is free while the
  // slot still has an owner (a stray store, a slot freed by force), so the
  // producer no longer counts its cursor and may lap it. A live reader is
  // told at its next call (ReadStatus::evicted) and takes the slot back.
  bool evicted = false;
  // Alive but stopped (SIGSTOP, a debugger): reads nothing until resumed.
  // Told only of a process of this PID namespace, by its /proc (false otherwise).
  bool stopped = false;
};

// A durable reader name remembered in the bus (ConsumerOptions::durable).
struct BookmarkView {
  std::uint32_t index = 0;
  std::string name;
  std::uint64_t cursor = 0;       // where Start::resume continues
  std::uint64_t updated_ns = 0;   // CLOCK_REALTIME the name was created, its holder detached, or reset moved it
  bool held = false;              // a live reader holds the name now
  pid_t holder_pid = 0;           // with held
  std::uint32_t holder_pid_namespace = 0;  // with held: inode of its PID namespace, 0 if unknown
};

struct Counters {
  std::uint64_t published = 0;        // messages published (== head)
  std::uint64_t producer_waits = 0;   // times the producer found the ring full
  std::uint64_t producer_wait_ns = 0; // time the producer spent waiting for space
  std::uint64_t wakeups = 0;          // futex wake calls made (data and space)
  std::uint64_t readers_reclaimed = 0;// dead reader slots reclaimed
  std::uint64_t readers_let_go = 0;   // readers a producer stopped waiting for (hold limit)
  std::uint32_t data_sleepers = 0;    // consumers asleep on the data futex now
};

struct Snapshot {
  BusInfo info;
  std::uint64_t head = 0;
  std::uint64_t oldest = 0;
  std::uint64_t last_publish_ns = 0;  // CLOCK_REALTIME timestamp of record head-1, or 0
  Counters counters;
  ProducerView producer;
  std::vector<ReaderView> readers;    // slots in use only
  std::vector<BookmarkView> bookmarks;  // remembered reader names
  bool removed = false;               // removed by force: every stream has ended
};

// Something in a snapshot a person should know of or act on.
struct Warning {
  // dead_reader, producer_dead, producer_blocked, reader_evicted, reader_let_go,
  // reader_lagging
  std::string kind;
  std::optional<std::uint32_t> slot;  // the reader it is about
  std::string message;                // one line, naming who (and what to do)
};

// A snapshot judged, as shmbus-inspect shows it (and Python's
// Inspector.snapshot() reports it).
struct Diagnosis {
  bool producer_alive = false;  // attached and alive
  // The reader holding the alive producer back on a full ring: the slot the
  // producer last named, while a reader in that slot is still behind (not
  // one that gc freed or that a newcomer took since). Not necessarily a
  // full ring behind: one message may need up to half the ring, after
  // padding of up to half a ring (a span).
  std::optional<std::uint32_t> blocked_on_slot;
  // Most urgent first: dead readers, a dead producer, a blocked producer,
  // evicted readers, readers let go, then readers more than half a ring behind.
  std::vector<Warning> warnings;
};
Diagnosis diagnose(const Snapshot& s);

// Untrusted bytes (a reader's name, a payload) for a person: printable ASCII
// as it is, \n \t \r \\ \" escaped, any other byte as \xNN.
std::string escape_ascii(std::span<const std::byte> bytes);
// A reader's name as shown: escaped, "-" if empty.
std::string display_name(std::string_view name);

// A copy of one record, read with the same torn-read check a consumer uses.
struct RecordView {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ns = 0;
  std::uint32_t length = 0;
  std::vector<std::byte> payload;
  // A gap marker (Producer::skip_to) holds no message: the stream continues
  // at gap_to; gap_lost says whether the sequences before it count as lost
  // (false: the bus started at gap_to).
  std::uint64_t gap_to = 0;
  bool gap_lost = false;
  bool padding = false;   // a gap marker that pads the end of a lap before a span (lost is false)
  std::uint32_t records = 1;  // slots the message takes (more than 1: it spans records; 0: impossible, corrupt)
  // The slot holds the inside of a span that began at an earlier sequence:
  // no header of its own, nothing else is set.
  bool inside = false;
};

struct Problem {
  std::string where;  // "header.capacity", "reader[3]", "record 1234 (slot 210)"
  std::string what;
};

class Inspector {
 public:
  // Maps the bus read-only and validates it like Bus::open (owner, allocation,
  // header). Throws Error. `dir` as in OpenOptions::dir (empty: bus_dir()).
  static Inspector open(std::string_view name, const Trust& trust = {}, std::string_view dir = {});
  ~Inspector();
  Inspector(Inspector&&) noexcept;
  Inspector& operator=(Inspector&&) noexcept;

  const BusInfo& info() const noexcept;
  Snapshot snapshot() const;

  // The record holding `seq` if it is still in the ring and committed.
  std::optional<RecordView> record(std::uint64_t seq) const;

  // Validates the whole segment: header, reader table, and every record's
  // framing (length, sequence matching its slot). Empty when clean.
  // On a live bus the producer rewrites records (and readers their
  // cursors) while they are read: a part that looks wrong is looked at
  // again, as a seqlock reader re-reads, and is a problem only once two
  // looks in a row read the same words and an unfinished write of a live
  // producer does not explain what they found (a record committed ahead
  // of the head it has yet to store). A part that never held still over
  // several milliseconds of looks is not judged: it goes to `undecided`
  // (where, and why), which is no sign of damage.
  std::vector<Problem> check() const;
  std::vector<Problem> check(std::vector<Problem>& undecided) const;

 private:
  struct Impl;
  Inspector();
  std::unique_ptr<Impl> impl_;
};

// Reclaims the slots of dead readers of `name` (maps the bus read-write).
// Returns the reclaimed readers as they were.
// Every call below takes the bus directory as OpenOptions::dir does.
std::vector<ReaderView> reclaim_dead_readers(std::string_view name, const Trust& trust = {},
                                             std::string_view dir = {});

// Lets the reader in slot `slot` of bus `name` go at once (maps the bus
// read-write), as a producer's hold limit does (ProducerOptions::max_hold):
// from now on it does not hold the producer, which is woken if it waits for
// space; the reader reads on as a best-effort reader, told at its next reads
// what it loses (ReadStatus::lost), and snapshots show it let go
// (ReaderView::let_go_ns). With `generation`, only that attachment of the
// slot (ReaderView::generation) is let go. Returns the reader as it was;
// should the slot change hands in the instant between the look and the
// let-go, the reader now in it is the one let go, and the one returned.
// Throws Error:
//   Errc::not_found        no such slot, no reader in it (or not that
//                          attachment), or one whose holder was gone (its
//                          slot is freed instead)
//   Errc::invalid_options  the reader does not hold the producer (an
//                          overwrite bus, a best-effort reader, one let go
//                          already); the message says which
ReaderView let_go_reader(std::string_view name, std::uint32_t slot,
                         std::optional<std::uint64_t> generation = std::nullopt, const Trust& trust = {},
                         std::string_view dir = {});

// Removes what creations of bus `name` that were killed mid-way left in
// its directory (.shmbus.NAME.XXXXXX files nobody is building any more, by
// their lock: never one a live creator holds; the bus itself was never
// there). Returns their paths. Creating the bus again does the same.
std::vector<std::string> remove_abandoned_creations(std::string_view name, std::string_view dir = {});

// Drops the remembered reader name `reader` of bus `name`. Returns false if
// there is none; throws Errc::name_in_use if a live reader holds it, and
// Errc::invalid_options for a name no reader could hold (empty, or longer
// than 31 bytes).
bool forget_reader_name(std::string_view name, std::string_view reader, const Trust& trust = {},
                        std::string_view dir = {});

// Where move_reader_name() puts a remembered reader name.
struct ReaderNameTarget {
  enum class Kind {
    earliest,  // the oldest message the bus retains
    latest,    // the head: only messages published from now on
    sequence,  // `value`, a sequence from oldest to head, not inside a message that spans records
    time,      // the first retained message (in sequence order) stamped at `value` (CLOCK_REALTIME ns) or later
  };
  Kind kind = Kind::earliest;
  std::uint64_t value = 0;
};

// What move_reader_name() did.
struct ReaderNameMove {
  std::uint64_t from = 0;    // where the name would have resumed (its cursor, as stored)
  std::uint64_t to = 0;      // where it resumes now
  std::uint64_t oldest = 0;  // the bus when it moved: oldest retained ...
  std::uint64_t head = 0;    // ... and head
  // Kind::time: the timestamp of the message at `to`; 0 when no retained
  // stamped message is that late (`to` is then the head).
  std::uint64_t timestamp_ns = 0;
  std::uint64_t unstamped = 0;  // Kind::time: messages passed over that carry no timestamp
};

// Moves the remembered reader name `reader` of bus `name` (maps the bus
// read-write) so that the next consumer resuming under it
// (Start::resume) starts at `target`. Holds the name's lock while it looks
// and writes, so no reader can take the name meanwhile. Returns nullopt if
// no such name is remembered. Throws Error:
//   Errc::name_in_use   a live reader holds the name (the message names its pid)
//   Errc::invalid_options  `reader` is empty or longer than 31 bytes
//   Errc::not_retained  a sequence outside oldest..head, or inside a message
//                       that spans records (the message says where the next
//                       message starts); a time when no retained message
//                       carries a timestamp (the producer did not stamp them:
//                       ProducerOptions::timestamps)
std::optional<ReaderNameMove> move_reader_name(std::string_view name, std::string_view reader,
                                               ReaderNameTarget target, const Trust& trust = {},
                                               std::string_view dir = {});

// Whether any live process holds a role in the segment of bus `name`
// (producer, reader or durable name, or a creator still building it), by
// its role locks: needs no valid header. nullopt if it cannot be told (the
// segment cannot be opened, or the test failed).
std::optional<bool> segment_in_use(std::string_view name, std::string_view dir = {});

// Removes a bus that processes still use: unlinks the segment, then ends
// every consumer's stream (EndReason::removed) and makes its producer's
// next publish fail with PublishStatus::closed, so nobody runs on in an
// unlinked segment. Nothing is told if the unlink fails (Errc::permission_denied:
// in /dev/shm only a segment's owner or root may remove it). Returns false
// if there was no such bus.
bool remove_in_use(std::string_view name, const Trust& trust = {}, std::string_view dir = {});

struct ListEntry {
  std::string name;            // bus name (segment name without "shmbus.")
  std::uint64_t file_size = 0;
  std::optional<Snapshot> snapshot;  // when it validated
  std::string error;           // why it did not
};

// Every shmbus segment in `dir` (empty: bus_dir()), sorted by name. Files
// that are not named shmbus.* are skipped. Throws Errc::bad_directory if
// `dir` is missing, not a directory, or not on tmpfs or hugetlbfs.
std::vector<ListEntry> list_buses(const Trust& trust = {}, std::string_view dir = {});

// A file a bus is built in: a creation makes the bus under a temporary name
// beside it (.shmbus.NAME.XXXXXX), holding a lock on the file while it
// works, and renames it to shmbus.NAME once complete.
struct CreationFile {
  std::string name;             // the bus it is (or was) to become
  std::string path;
  std::uint64_t file_size = 0;  // its memory, reserved at the start
  // alive: a creator is building it now. dead: its creator was killed
  // mid-way and the file is a leftover, hidden by its leading '.':
  // remove_abandoned_creations() (shmbus-inspect gc or rm of the bus) and
  // the next creation of the bus remove it. unknown: its lock could not be
  // tested (a file we may not open, or not a regular file): left alone.
  Liveness creator = Liveness::unknown;
};

// Every such file in `dir` (empty: bus_dir()), sorted by bus name, then
// path. Tests each file's lock without taking it. Throws
// Errc::bad_directory as list_buses() does.
std::vector<CreationFile> list_creations(std::string_view dir = {});

}  // namespace shmbus

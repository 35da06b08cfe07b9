/* Uses the installed C API: create a bus, publish, read, inspect, remove. */
#include <shmbus/shmbus.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "install-check-c";
  const char text[] = "from C through an installed shmbus";
  shmbus_bus_options o;
  shmbus_bus* bus = NULL;
  shmbus_producer* p = NULL;
  shmbus_consumer* c = NULL;
  shmbus_snapshot* snap = NULL;
  shmbus_message m;
  int ok = 0;
  shmbus_bus_options_init(&o);
  o.capacity = 64;
  o.record_size = 128;
  if (shmbus_bus_create(name, &o, &bus) != SHMBUS_OK || shmbus_consumer_open(bus, NULL, &c) != SHMBUS_OK ||
      shmbus_producer_open(bus, NULL, &p) != SHMBUS_OK ||
      shmbus_producer_publish(p, text, sizeof text, SHMBUS_FOREVER, NULL) != SHMBUS_OK ||
      shmbus_inspect(name, &snap) != SHMBUS_OK) {
    fprintf(stderr, "%s\n", shmbus_last_error());
  } else if (shmbus_consumer_next(c, 1000000000, &m) == SHMBUS_READ_MESSAGE && m.size == sizeof text &&
             memcmp(m.data, text, sizeof text) == 0 && m.records == 1 && snap->head == 1 &&
             snap->reader_count == 1 && snap->info.max_message == 32 * 128 - 24) {
    ok = 1;
  }
  printf("%s (C, shmbus %s): %s\n", name, shmbus_version(), ok ? "message received" : "wrong message");
  shmbus_snapshot_free(snap);
  shmbus_producer_destroy(p);
  shmbus_consumer_destroy(c);
  shmbus_bus_close(bus);
  shmbus_bus_remove(name, NULL);
  return ok ? 0 : 1;
}

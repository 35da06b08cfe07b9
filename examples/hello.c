/* docs/c.md's example: create a bus, publish three messages, read them. */
#include <shmbus/shmbus.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "hello-c";
  const char* texts[] = {"hello", "from", "C"};
  shmbus_bus_options options;
  shmbus_bus* bus;
  shmbus_consumer* consumer;
  shmbus_producer* producer;
  shmbus_message m;
  int i, received = 0;

  shmbus_bus_options_init(&options);
  options.capacity = 1024;   /* records in the ring (a power of two) */
  options.record_size = 128; /* bytes per record, header included */
  if (shmbus_bus_create(name, &options, &bus) != SHMBUS_OK ||
      shmbus_consumer_open(bus, NULL, &consumer) != SHMBUS_OK || /* from the oldest record */
      shmbus_producer_open(bus, NULL, &producer) != SHMBUS_OK) {
    fprintf(stderr, "hello: %s\n", shmbus_last_error()); /* one line naming the bus */
    return 1;
  }
  for (i = 0; i < 3; ++i) {
    if (shmbus_producer_publish(producer, texts[i], strlen(texts[i]), SHMBUS_FOREVER, NULL) != SHMBUS_OK)
      return 1;
  }
  shmbus_producer_close(producer); /* end-of-stream, once everything is read */

  while (shmbus_consumer_next(consumer, 1000000000 /* ns */, &m) == SHMBUS_READ_MESSAGE) {
    printf("#%llu %.*s\n", (unsigned long long)m.seq, (int)m.size, (const char*)m.data);
    ++received;
  }
  printf("received %d messages\n", received);
  shmbus_producer_destroy(producer);
  shmbus_consumer_destroy(consumer);
  shmbus_bus_close(bus);
  shmbus_bus_remove(name, NULL);
  return received == 3 ? 0 : 1;
}

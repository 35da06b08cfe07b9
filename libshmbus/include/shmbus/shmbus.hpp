// shmbus — a shared-memory message bus. Include this for the whole API.
#pragma once

#include "shmbus/bus.hpp"
#include "shmbus/consumer.hpp"
#include "shmbus/errors.hpp"
#include "shmbus/inspect.hpp"
#include "shmbus/liveness.hpp"
#include "shmbus/producer.hpp"
#include "shmbus/wait.hpp"
#include "shmbus/wait_set.hpp"

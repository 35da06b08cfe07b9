// shmbus-inspect let-go — lets a reader that holds a `block` bus's producer
// go at run time, the twin of the producer's --max-hold: the reader stops
// holding the producer at once, reads on as a best-effort reader and is
// told what it loses.
#pragma once

#include <string>

namespace shmbus::inspect_tool {

// `reader`: a slot number as show prints it, or the reader's name (refused
// when several live readers share it). Exit 0 when let go; a reader that
// does not hold the producer is refused (exit 1, code "refused").
int run_let_go(const std::string& bus, const std::string& reader, bool json);

}  // namespace shmbus::inspect_tool

// How the ranks of a collective checkpoint operation agree: each step ends with every rank
// contributing its outcome (nothing, or an error) to one all-gather, and either every rank goes
// on or every rank throws the same error listing each failing rank. A rank that failed alone and
// threw would leave the others waiting in their next collective.
// The strings travel through comm/string_gather.h, as the Engine's agreements do.
// Thread-safety: collective; one thread per rank.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zrt::checkpoint {

// What one rank has to report: nothing, a bad input (InvalidArgument) or an I/O failure.
struct Outcome {
  enum class Kind : char { Ok = 'o', Invalid = 'a', Io = 'i' };
  Kind kind = Kind::Ok;
  std::string message;
  static Outcome of(const std::exception& e);
  bool ok() const { return kind == Kind::Ok; }
};

// Throws on every rank when any rank's outcome is an error: InvalidArgument when every error is
// one, else IoError; the message is `what` and one line per failing rank.
void agree(comm::Communicator& comm, const Outcome& mine, const std::string& what);

// Runs `body` on this rank, turning what it throws into an Outcome, then agrees.
template <class Body>
void runAgreed(comm::Communicator& comm, const std::string& what, Body&& body) {
  Outcome o;
  try {
    body();
  } catch (const std::exception& e) {
    o = Outcome::of(e);
  }
  agree(comm, o, what);
}

}  // namespace zrt::checkpoint

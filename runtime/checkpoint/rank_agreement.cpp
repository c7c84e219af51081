#include "runtime/checkpoint/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/agreed_failure.h"
#include "comm/string_gather.h"
#include "core/error.h"
#include "runtime/collective_failure.h"

namespace zrt::checkpoint {

Outcome Outcome::of(const std::exception& e) {
  Outcome o;
  o.kind = dynamic_cast<const InvalidArgument*>(&e) ? Kind::Invalid : Kind::Io;
  o.message = e.what();
  if (o.message.empty()) o.message = "(an error without a message)";
  return o;
}

void agree(comm::Communicator& comm, const Outcome& mine, const std::string& what) {
  const std::string wire = mine.ok() ? std::string() : static_cast<char>(mine.kind) + mine.message;
  std::vector<std::string> all = comm::allGatherStrings(comm, wire);
  all[static_cast<std::size_t>(comm.rank())] = wire;  // heard even through a silent backend
  bool allInvalid = true;
  for (std::string& failure : all) {
    if (failure.empty()) continue;
    allInvalid = allInvalid && failure[0] == static_cast<char>(Outcome::Kind::Invalid);
    failure.erase(0, 1);
  }
  const std::string report = describeFailures(all);
  if (report.empty()) return;
  comm::markAgreedFailure();
  if (allInvalid) throw InvalidArgument(what + report);
  throw IoError(what + report);
}

}  // namespace zrt::checkpoint

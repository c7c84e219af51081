#include "runtime/checkpoint/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace zrt::checkpoint {

std::vector<std::string> allGatherStrings(comm::Communicator& comm, const std::string& mine) {
  const auto world = static_cast<std::size_t>(comm.size());
  if (world == 1) return {mine};
  // The collectives know float types only; an all-gather only copies, so bytes travel as fp32
  // words unchanged (two words per length).
  std::uint64_t len = mine.size();
  std::vector<std::uint64_t> lens(world);
  comm.allGather(&len, lens.data(), 2, DType::F32);
  const std::uint64_t longest = std::max<std::uint64_t>(len, *std::max_element(lens.begin(), lens.end()));
  const std::uint64_t words = std::max<std::uint64_t>(1, (longest + 3) / 4);
  std::vector<char> send(words * 4, 0), recv(words * 4 * world);
  std::memcpy(send.data(), mine.data(), mine.size());
  comm.allGather(send.data(), recv.data(), words, DType::F32);
  std::vector<std::string> out(world);
  for (std::size_t r = 0; r < world; ++r)
    out[r].assign(recv.data() + r * words * 4, std::min<std::uint64_t>(lens[r], words * 4));
  return out;
}

Outcome Outcome::of(const std::exception& e) {
  Outcome o;
  o.kind = dynamic_cast<const InvalidArgument*>(&e) ? Kind::Invalid : Kind::Io;
  o.message = e.what();
  if (o.message.empty()) o.message = "(an error without a message)";
  return o;
}

void agree(comm::Communicator& comm, const Outcome& mine, const std::string& what) {
  const std::string wire = mine.ok() ? std::string() : static_cast<char>(mine.kind) + mine.message;
  const std::vector<std::string> all = allGatherStrings(comm, wire);
  std::string report;
  bool allInvalid = true;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    allInvalid = allInvalid && all[r][0] == static_cast<char>(Outcome::Kind::Invalid);
    report += "\n  rank " + std::to_string(r) + ": " + all[r].substr(1);
  }
  if (report.empty()) return;
  if (allInvalid) throw InvalidArgument(what + report);
  throw IoError(what + report);
}

}  // namespace zrt::checkpoint

#include "comm/string_gather.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace zrt::comm {

std::vector<std::string> allGatherStrings(Communicator& comm, const std::string& mine) {
  const auto world = static_cast<std::size_t>(comm.size());
  if (world == 1) return {mine};
  // The collectives know float types only; an all-gather only copies, so bytes travel as fp32
  // words unchanged (two words per length).
  std::uint64_t len = mine.size();
  std::vector<std::uint64_t> lens(world);
  comm.allGather(&len, lens.data(), 2, DType::F32);
  // Sized by this rank's length too: a backend that moves nothing leaves every length 0.
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

}  // namespace zrt::comm

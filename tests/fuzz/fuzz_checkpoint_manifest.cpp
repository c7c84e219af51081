// Fuzz target: the checkpoint manifest reader (runtime/checkpoint/manifest.h) through its public
// entry, readManifest(<dir>), which reads <dir>/manifest.json size-capped, parses it and checks
// every size, range, name and the tiling of each state by its files. Bad input must end in a
// zrt::Error; a manifest that is accepted is written back with toJson and must read back equal
// (its checks passed once, so they must pass again).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "runtime/checkpoint/manifest.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zrt::checkpoint;
  zrt::fuzz::writeInput(kManifestName, data, size);
  const std::string dir = zrt::fuzz::scratchDirectory().string();
  Manifest m;
  try {
    m = readManifest(dir);
  } catch (const zrt::Error&) {
    return 0;  // the documented outcome for bad input
  }
  const nlohmann::json again = toJson(m);
  const Manifest back = manifestFromJson(again, "round trip");
  if (toJson(back) != again) __builtin_trap();
  return 0;
}

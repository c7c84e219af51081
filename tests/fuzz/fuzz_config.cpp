// Fuzz target: the DeepSpeed-format config reader (core/config), from text to a resolved
// Config and back to JSON and the start-up printout. Malformed or invalid input must end in a
// zrt::Error (ConfigError names the file and the JSON path); any other exception, a crash, a
// leak or undefined behaviour is a finding. The world size the batch sizes resolve against
// comes from the input's length (1 to 4), so the seeds (plain config files) stay valid JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const int worldSize = 1 + static_cast<int>(size % 4);
  try {
    const zrt::Config config = zrt::parseConfig(text, "fuzz.json", worldSize);
    const std::string resolved = zrt::toJson(config).dump();
    const std::string printout = zrt::describe(config);
    if (resolved.empty() || printout.empty()) __builtin_trap();
  } catch (const zrt::Error&) {
    // The documented outcome for bad input.
  }
  return 0;
}

// Fuzz target: the safetensors reader (runtime/checkpoint/safetensors.h) on a file holding the
// fuzzer's bytes: the 8-byte header length, the JSON header, each tensor's dtype, shape and data
// offsets checked against the file. Bad input must end in a zrt::Error. For a file that is
// accepted, every tensor is read whole in its own dtype and as F32 (the offsets were checked, so
// these reads must stay inside the file and succeed).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zrt::checkpoint;
  const std::string path = zrt::fuzz::writeInput("fuzz.safetensors", data, size).string();
  try {
    const SafetensorsReader reader(path);
    for (const SafetensorsTensor& t : reader.tensors()) {
      if (reader.find(t.name) == nullptr) __builtin_trap();
      const std::uint64_t n = t.numel();
      // n elements fit in the file (checked), so these buffers are at most 4x its size.
      std::vector<unsigned char> same(n * zrt::dtypeSize(t.dtype));
      reader.read(t, 0, n, t.dtype, same.data());
      std::vector<float> widened(n);
      reader.read(t, 0, n, zrt::DType::F32, widened.data());
    }
  } catch (const zrt::Error&) {
    // The documented outcome for bad input.
  }
  return 0;
}

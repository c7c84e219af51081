#include "runtime/state_dict.h"

#include "runtime/gathered_parameters.h"

namespace zrt {

std::vector<StateDictEntry> stateDict(Engine& engine) {
  std::vector<StateDictEntry> out;
  for (std::size_t m = 0; m < engine.numModules(); ++m) {
    const GatheredParameters params(engine, m);
    for (const TensorRef& t : params.tensors()) {
      StateDictEntry e{engine.moduleName(m) + "." + *t.name, *t.shape, std::vector<float>(t.numel)};
      for (std::uint64_t i = 0; i < t.numel; ++i) e.values[i] = t.load(i);
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace zrt

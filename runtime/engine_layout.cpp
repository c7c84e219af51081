#include "runtime/engine_layout.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace zrt {

ModelLayout ModelLayout::of(const EngineModel& model, DType dtype, const std::string& configSource) {
  ModelLayout l;
  std::uint64_t trainableAt = 0, frozenAt = 0;
  std::size_t trainableCount = 0, frozenCount = 0;
  l.moduleParams.resize(model.modules.size());
  for (std::size_t m = 0; m < model.modules.size(); ++m) {
    const ModuleSpec& mod = model.modules[m];
    if (!l.moduleByName.emplace(mod.name, m).second)
      ZRT_THROW(InvalidArgument, "engine: two modules are named '", mod.name, "'");
    std::set<std::string> names;
    std::uint64_t scratchAt = 0;
    CoordinatedModule range{mod.name, trainableAt, 0, frozenAt, 0};
    for (const ParamSpec& spec : mod.params) {
      const std::string where = "engine: parameter '" + mod.name + "/" + spec.name + "'";
      if (!names.insert(spec.name).second) ZRT_THROW(InvalidArgument, where, " is registered twice");
      if (spec.group < 0 || static_cast<std::size_t>(spec.group) >= model.groups.size())
        ZRT_THROW(InvalidArgument, where, ": group ", spec.group, " does not exist (",
                  model.groups.size(), " groups)");
      if (!spec.init) ZRT_THROW(InvalidArgument, where, " has no initialiser");
      if (spec.dtype && *spec.dtype != dtype)
        ZRT_THROW(InvalidArgument, where, " is registered as ", nameOf(*spec.dtype), " but ",
                  configSource, " trains in ", nameOf(dtype),
                  "; every parameter trains in the config's precision");
      ParamInfo p;
      p.module = m;
      p.spec = &spec;
      p.numel = numelOf(spec);
      if (spec.trainable) {
        p.offset = trainableAt;
        p.tensor = trainableCount++;
        p.scratchOffset = scratchAt;
        trainableAt += p.numel;
        scratchAt += p.numel;
      } else {
        p.offset = frozenAt;
        p.tensor = frozenCount++;
        frozenAt += p.numel;
      }
      (spec.trainable ? range.trainableCount : range.frozenCount) += p.numel;
      l.moduleParams[m].push_back(l.params.size());
      l.params.push_back(p);
      l.tensors.push_back({mod.name + "/" + spec.name, p.numel, spec.trainable});
    }
    l.widestModule = std::max(l.widestModule, scratchAt);
    l.moduleRanges.push_back(std::move(range));
  }
  l.trainableNumel = trainableAt;
  l.frozenNumel = frozenAt;
  return l;
}

bool ModelLayout::trains(std::size_t module) const {
  for (std::size_t i : moduleParams[module])
    if (params[i].spec->trainable) return true;
  return false;
}

}  // namespace zrt

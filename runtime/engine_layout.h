// Where every registered parameter sits in the model's two flat buffers (trainable, frozen),
// module by module, as the Engine lays them out once at construction. Plain data: the model
// states, the gradient workspace, the stage-3 coordinator and the checkpoint view all read it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "partition/model_states.h"
#include "partition/param_coordinator.h"
#include "runtime/model_spec.h"

namespace zrt {

struct ParamInfo {
  std::size_t module = 0;
  const ParamSpec* spec = nullptr;
  std::uint64_t numel = 0;
  std::uint64_t offset = 0;  // in the trainable or the frozen flat buffer
  std::size_t tensor = 0;    // index among the trainable (bucketer tensors) or frozen tensors
  std::uint64_t scratchOffset = 0;  // trainable: where its gradient sits in the workspace
};

struct ModelLayout {
  std::vector<ParamInfo> params;                    // registration order
  std::vector<std::vector<std::size_t>> moduleParams;  // module -> indices into params
  std::map<std::string, std::size_t> moduleByName;
  std::vector<CoordinatedModule> moduleRanges;      // each module's range in the two buffers
  std::vector<ParamTensor> tensors;                 // for the model states
  std::uint64_t trainableNumel = 0, frozenNumel = 0;
  // The most trainable elements of any one module: the size of the gradient workspace.
  std::uint64_t widestModule = 0;

  // Checks every registration (names, groups, initialisers, dtype) and lays the buffers out;
  // throws InvalidArgument naming the parameter at fault. `model` must outlive the layout.
  static ModelLayout of(const EngineModel& model, DType dtype, const std::string& configSource);

  bool trains(std::size_t module) const;  // has a trainable parameter
};

}  // namespace zrt

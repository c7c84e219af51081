#include "runtime/gathered_parameters.h"

#include <exception>
#include <utility>

#include "core/log.h"

namespace zrt {

GatheredParameters::GatheredParameters(Engine& engine, std::size_t module)
    : engine_(&engine), module_(module), tensors_(engine.parameters(module)) {}

GatheredParameters::GatheredParameters(GatheredParameters&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)), module_(other.module_),
      tensors_(std::move(other.tensors_)) {}

GatheredParameters::~GatheredParameters() {
  if (!engine_) return;
  try {
    engine_->release(module_);
  } catch (const std::exception& e) {
    // A destructor may not throw; the engine reports a module left fetched at its next check.
    logWarning(detail::cat("GatheredParameters: releasing module ", module_, " failed: ", e.what()));
  }
}

}  // namespace zrt

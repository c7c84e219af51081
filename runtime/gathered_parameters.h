// GatheredParameters: module m's parameters for as long as the object lives, as DeepSpeed's
// zero.GatheredParameters: at stage 3 its construction is the fetch (collective: it returns once
// the module is gathered) and its destruction the release, so a forward that throws or returns
// early cannot leave a module fetched and never released; at stages 0-2 the parameters are
// always whole and it only hands them out. Movable, not copyable.
//   {
//     zrt::GatheredParameters w(engine, m);
//     std::span<const float> weight = w[0].as<const float>();
//     ...
//   }  // released here
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/engine.h"
#include "runtime/tensor_ref.h"

namespace zrt {

class GatheredParameters {
 public:
  GatheredParameters(Engine& engine, std::size_t module);
  ~GatheredParameters();
  GatheredParameters(GatheredParameters&& other) noexcept;
  GatheredParameters& operator=(GatheredParameters&&) = delete;
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

  std::size_t size() const { return tensors_.size(); }
  // The module's parameters in registration order.
  const TensorRef& operator[](std::size_t i) const { return tensors_.at(i); }
  const std::vector<TensorRef>& tensors() const { return tensors_; }

 private:
  Engine* engine_;  // null once moved from
  std::size_t module_;
  std::vector<TensorRef> tensors_;
};

}  // namespace zrt

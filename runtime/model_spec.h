// What the caller registers with the Engine: the model as modules (a module is a unit of compute,
// such as one transformer block), each with its parameters (name, shape, an initialiser, whether
// it trains, which parameter group it belongs to). Registration is plain data, so it can be
// built, compared across ranks and hashed without touching any memory.
// Initialisers must produce the same values on every rank: the seeded normal() and the
// constant and explicit-value helpers below do; a caller's own must too.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zrt {

// Fills `out[0 .. numel)` with a parameter's initial values, in fp32 (the engine rounds them to
// the training dtype; the fp32 master copy starts from the rounded values, as a model built in
// fp32 and then cast would).
using Initializer = std::function<void(float* out, std::uint64_t numel)>;

namespace init {
// Normal(mean, stddev) from a generator seeded by `seed` alone: identical on every rank and run.
Initializer normal(std::uint64_t seed, double stddev, double mean = 0.0);
Initializer constant(float value);
// Exactly these values (their count must equal the parameter's numel).
Initializer values(std::vector<float> values);
}  // namespace init

struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  Initializer init;
  bool trainable = true;
  int group = 0;  // index into EngineModel::groups
  // The dtype the caller expects the parameter in; every parameter trains in the config's
  // precision (one flat buffer per kind of state), so a different one is refused, naming it.
  std::optional<DType> dtype{};
};

struct ModuleSpec {
  std::string name;
  std::vector<ParamSpec> params;
};

// A parameter group: its own learning rate and weight decay, as torch.optim's param_groups.
// A negative value means "the config's" (optimizer.params.lr / weight_decay). Under a
// scheduler the group's lr scales with it: lr_group(step) = schedule(step) * lr / config lr.
struct ParamGroup {
  double lr = -1;
  double weightDecay = -1;
};

struct EngineModel {
  std::vector<ModuleSpec> modules;
  std::vector<ParamGroup> groups{ParamGroup{}};
};

// Elements of a shape; throws InvalidArgument naming the parameter for a negative dimension.
std::uint64_t numelOf(const ParamSpec& p);

// One line per parameter ("module/name [d0,d1] trainable group"): what ranks compare to find
// registrations that differ.
std::vector<std::string> describeParams(const EngineModel& model);

}  // namespace zrt

#include "runtime/model_spec.h"

#include <cmath>
#include <algorithm>
#include <random>

#include "core/error.h"

namespace zrt {

namespace init {

Initializer normal(std::uint64_t seed, double stddev, double mean) {
  return [=](float* out, std::uint64_t numel) {
    // Box-Muller over a fixed generator rather than std::normal_distribution, whose algorithm
    // the standard leaves to the library: the values must not depend on how ZRT was built.
    std::mt19937_64 gen(seed);
    const double twoPi = 6.283185307179586;
    auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; };
    for (std::uint64_t i = 0; i < numel; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), t = twoPi * uniform();
      out[i] = static_cast<float>(mean + stddev * r * std::cos(t));
      if (i + 1 < numel) out[i + 1] = static_cast<float>(mean + stddev * r * std::sin(t));
    }
  };
}

Initializer constant(float value) {
  return [=](float* out, std::uint64_t numel) {
    for (std::uint64_t i = 0; i < numel; ++i) out[i] = value;
  };
}

Initializer values(std::vector<float> v) {
  return [v = std::move(v)](float* out, std::uint64_t numel) {
    if (v.size() != numel)
      ZRT_THROW(InvalidArgument, "init::values: ", v.size(), " values for a parameter of ", numel,
                " elements");
    std::copy(v.begin(), v.end(), out);
  };
}

}  // namespace init

std::uint64_t numelOf(const ParamSpec& p) {
  std::uint64_t n = 1;
  for (std::int64_t d : p.shape) {
    if (d < 0) ZRT_THROW(InvalidArgument, "parameter '", p.name, "': negative dimension ", d);
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

std::vector<std::string> describeParams(const EngineModel& model) {
  std::vector<std::string> lines;
  for (const ModuleSpec& m : model.modules) {
    for (const ParamSpec& p : m.params) {
      std::string shape;
      for (std::int64_t d : p.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      lines.push_back(m.name + "/" + p.name + " [" + shape + "] " +
                      (p.trainable ? "trainable" : "frozen") + " group " +
                      std::to_string(p.group));
    }
  }
  return lines;
}

}  // namespace zrt

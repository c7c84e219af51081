// A ParameterSource for tests: every parameter and gradient in host vectors of one dtype (a
// frozen parameter's gradient null, as the Engine gives it), and
// the Engine's protocol checked on every call (parameters paired with release, gradients asked
// once per module per micro-step and in strictly decreasing module order, each handed back with
// backwardDone before the next is asked for). A breach throws std::logic_error, which fails the
// test that made it.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/engine.h"
#include "runtime/model_spec.h"
#include "tools/trainer/model/gpt2.h"

namespace zrt::trainer::test {

class TestSource final : public ParameterSource {
 public:
  // Values from the model's own initialisers, stored in `dtype` (rounded when 16-bit).
  TestSource(const EngineModel& model, DType dtype) : dtype_(dtype) {
    for (const auto& m : model.modules) {
      modules_.emplace_back();
      for (const auto& p : m.params) {
        Tensor t;
        t.name = p.name;
        t.shape = p.shape;
        t.numel = numelOf(p);
        t.trainable = p.trainable;
        std::vector<float> v(t.numel);
        p.init(v.data(), t.numel);
        t.value.resize(t.numel * dtypeSize(dtype));
        t.grad.assign(t.numel * dtypeSize(dtype), 0xAB);  // garbage: the model must overwrite
        modules_.back().push_back(std::move(t));
        set(modules_.size() - 1, modules_.back().size() - 1, v);
      }
    }
    outstanding_.assign(modules_.size(), 0);
  }

  std::size_t numModules() const { return modules_.size(); }
  std::size_t numParams(std::size_t m) const { return modules_[m].size(); }
  const std::string& name(std::size_t m, std::size_t i) const { return modules_[m][i].name; }
  bool trainable(std::size_t m, std::size_t i) const { return modules_[m][i].trainable; }
  DType dtype() const { return dtype_; }

  // The parameter as the model sees it, in fp32.
  std::vector<float> get(std::size_t m, std::size_t i) const { return widen(modules_[m][i].value); }
  void set(std::size_t m, std::size_t i, const std::vector<float>& v) {
    narrow(v, modules_[m][i].value);
  }
  std::vector<float> grad(std::size_t m, std::size_t i) const { return widen(modules_[m][i].grad); }
  const std::vector<unsigned char>& gradBytes(std::size_t m, std::size_t i) const {
    return modules_[m][i].grad;
  }

  // A new micro-step: the model may ask for every module's gradients once more. Checks the
  // previous one reported them all and released every parameters() call.
  void beginMicroStep() {
    for (std::size_t m = 0; m < outstanding_.size(); ++m)
      if (outstanding_[m] != 0)
        throw std::logic_error("module " + std::to_string(m) + " has " +
                               std::to_string(outstanding_[m]) + " unreleased parameters()");
    if (open_ >= 0) throw std::logic_error("gradients(" + std::to_string(open_) + ") not done");
    reported_.clear();
    lastGradModule_ = -1;
  }
  bool allReported() const { return reported_.size() == modules_.size(); }

  std::vector<TensorRef> parameters(std::size_t m) override {
    check(m);
    ++outstanding_[m];
    return refs(m, false);
  }
  void release(std::size_t m) override {
    check(m);
    if (outstanding_[m] == 0)
      throw std::logic_error("release(" + std::to_string(m) + ") without parameters()");
    --outstanding_[m];
  }
  std::vector<TensorRef> gradients(std::size_t m) override {
    check(m);
    if (open_ >= 0)
      throw std::logic_error("gradients(" + std::to_string(m) + ") before backwardDone(" +
                             std::to_string(open_) + ")");
    if (reported_.count(m))
      throw std::logic_error("gradients(" + std::to_string(m) + ") twice in one micro-step");
    // Backward runs the modules in reverse, except module 0 (the tied embedding), which comes
    // last because the head uses it too.
    if (lastGradModule_ >= 0 && m != 0 && static_cast<long>(m) >= lastGradModule_)
      throw std::logic_error("gradients(" + std::to_string(m) + ") after gradients(" +
                             std::to_string(lastGradModule_) + ")");
    open_ = static_cast<long>(m);
    lastGradModule_ = static_cast<long>(m);
    return refs(m, true);
  }
  void backwardDone(std::size_t m) override {
    if (open_ != static_cast<long>(m))
      throw std::logic_error("backwardDone(" + std::to_string(m) + ") without gradients()");
    open_ = -1;
    reported_.insert(m);
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 0;
    bool trainable = true;
    std::vector<unsigned char> value, grad;
  };

  void check(std::size_t m) const {
    if (m >= modules_.size()) throw std::logic_error("module " + std::to_string(m) + " unknown");
  }

  std::vector<TensorRef> refs(std::size_t m, bool grads) {
    std::vector<TensorRef> out;
    for (auto& t : modules_[m]) {
      void* data = grads ? (t.trainable ? t.grad.data() : nullptr) : t.value.data();
      out.push_back(TensorRef{&t.name, &t.shape, data, dtype_, t.numel});
    }
    return out;
  }

  std::vector<float> widen(const std::vector<unsigned char>& bytes) const {
    std::vector<float> out(bytes.size() / dtypeSize(dtype_));
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (dtype_ == DType::F32) {
        std::memcpy(&out[i], bytes.data() + 4 * i, 4);
      } else {
        std::uint16_t b;
        std::memcpy(&b, bytes.data() + 2 * i, 2);
        out[i] = dtype_ == DType::BF16 ? bf16ToFloat(b) : halfToFloat(b);
      }
    }
    return out;
  }
  void narrow(const std::vector<float>& v, std::vector<unsigned char>& bytes) const {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::F32) {
        std::memcpy(bytes.data() + 4 * i, &v[i], 4);
      } else {
        const std::uint16_t b = dtype_ == DType::BF16 ? floatToBf16(v[i]) : floatToHalf(v[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    }
  }

  DType dtype_;
  std::vector<std::vector<Tensor>> modules_;
  std::vector<int> outstanding_;
  std::set<std::size_t> reported_;
  long open_ = -1;
  long lastGradModule_ = -1;
};

// Values far from GPT-2's initialisation, so every path carries a gradient a test can see:
// weights and biases N(0, scale), LayerNorm weights 1 + N(0, scale).
inline void randomise(TestSource& s, std::uint64_t seed, float scale) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (std::size_t m = 0; m < s.numModules(); ++m) {
    for (std::size_t i = 0; i < s.numParams(m); ++i) {
      std::vector<float> v = s.get(m, i);
      const bool lnWeight = s.name(m, i).find("ln_") != std::string::npos &&
                            s.name(m, i).ends_with(".weight");
      for (float& x : v) x = (lnWeight ? 1.0f : 0.0f) + normal(gen);
      s.set(m, i, v);
    }
  }
}

// Random bytes below `vocab`.
inline std::vector<std::uint8_t> randomTokens(std::size_t n, int vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::uint8_t> out(n);
  for (auto& t : out) t = static_cast<std::uint8_t>(gen() % static_cast<std::uint64_t>(vocab));
  return out;
}

}  // namespace zrt::trainer::test

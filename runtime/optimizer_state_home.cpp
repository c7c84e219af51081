#include "runtime/optimizer_state_home.h"

#include "runtime/collective_failure.h"

namespace zrt {
namespace {

class InMemory final : public OptimizerStateHome {
 public:
  InMemory(ModelStates& states, std::uint64_t count) : states_(states), count_(count) {}
  void agreeing(comm::Communicator&, const std::string&, const std::function<void()>& step) override { step(); }
  void forEach(const std::function<void(const OptimizerWindow&)>& update) override {
    const auto& moments = states_.moments();
    update({0, count_, static_cast<float*>(states_.masterWeights().data()),
            moments.empty() ? nullptr : static_cast<float*>(moments[0].data()),
            moments.size() < 2 ? nullptr : static_cast<float*>(moments[1].data())});
  }
  int optimizerThreads() const override { return 0; }
  double takeIoWaitSeconds() override { return 0; }

 private:
  ModelStates& states_;
  std::uint64_t count_;
};

class Swapped final : public OptimizerStateHome {
 public:
  explicit Swapped(OptimizerSwapper& swapper) : swapper_(swapper) {}
  void agreeing(comm::Communicator& comm, const std::string& what, const std::function<void()>& step) override {
    onEveryRankOrNone<PeerError>(comm, what, step);
  }
  // The swap files hold the master weights first, then the moments (engine_assembly.cpp).
  void forEach(const std::function<void(const OptimizerWindow&)>& update) override {
    swapper_.forEach([&](const OptimizerSwapper::Window& w) {
      update({w.begin, w.count, w.states[0], w.states.size() > 1 ? w.states[1] : nullptr,
              w.states.size() > 2 ? w.states[2] : nullptr});
    });
  }
  // A core is left to the I/O threads: an optimizer on every core starves the completions it
  // waits for (zrt-offload-bench --threads shows it).
  int optimizerThreads() const override { return OptimizerSwapper::optimizerThreads(); }
  double takeIoWaitSeconds() override { return swapper_.takeStats().ioWaitSeconds; }

 private:
  OptimizerSwapper& swapper_;
};

}  // namespace

std::unique_ptr<OptimizerStateHome> statesInMemory(ModelStates& states, std::uint64_t count) {
  return std::make_unique<InMemory>(states, count);
}

std::unique_ptr<OptimizerStateHome> statesSwapped(OptimizerSwapper& swapper) {
  return std::make_unique<Swapped>(swapper);
}

}  // namespace zrt

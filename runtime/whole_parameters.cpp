// Stages 0-2: every rank holds every parameter, in the two flat buffers, whole. The optimizer
// updates this rank's shard inside the trainable buffer; on several ranks at stages 1/2 the
// all-gather buckets bring every rank's updated shard to the others.
#include <vector>

#include "core/element_arithmetic.h"
#include "runtime/stage_policy.h"

namespace zrt {
namespace {

class WholeParameters final : public ParameterHome {
 public:
  WholeParameters(const ParameterParts& parts, std::unique_ptr<comm::AllGatherBucketer> gatherer)
      : parts_(parts),
        es_(dtypeSize(parts.dtype)),
        gatherer_(std::move(gatherer)),
        copies_(parts.device ? parts.device->createStream() : nullptr) {}

  char* trainableShard() const override {
    return static_cast<char*>(parts_.states->parameters().data()) +
           parts_.states->trainableLayout().shard.begin * es_;
  }

  std::vector<TensorRef> parameters(std::size_t m) override {
    std::vector<TensorRef> out;
    for (std::size_t i : parts_.layout->moduleParams[m]) {
      const ParamInfo& p = parts_.layout->params[i];
      out.push_back({&p.spec->name, &p.spec->shape, base(p), parts_.dtype, p.numel});
    }
    return out;
  }
  void release(std::size_t) override {}

  void publishUpdate() override {
    if (!gatherer_) return;
    char* full = static_cast<char*>(parts_.states->parameters().data());
    const void* shard = full + parts_.states->trainableLayout().shard.begin * es_;
    void* fulls = full;
    gatherer_->start(std::span<const void* const>(&shard, 1), std::span<void* const>(&fulls, 1));
    gatherer_->finish();
  }

  std::vector<float> value(const ParamInfo& p) const override {
    std::vector<float> out(p.numel);
    const char* at = base(p);
    std::vector<char> down;
    if (copies_) {  // device memory the host cannot touch: read through a copy
      down.resize(p.numel * es_);
      parts_.device->copyAsync(down.data(), at, down.size(), *copies_);
      copies_->synchronize();
      at = down.data();
    }
    for (std::uint64_t i = 0; i < p.numel; ++i) out[i] = zrt::loadElement(parts_.dtype, at, i);
    return out;
  }

 private:
  char* base(const ParamInfo& p) const {
    const StateBuffer& b = p.spec->trainable ? parts_.states->parameters() : parts_.states->frozenParameters();
    return static_cast<char*>(b.data()) + p.offset * es_;
  }

  ParameterParts parts_;
  std::size_t es_;
  std::unique_ptr<comm::AllGatherBucketer> gatherer_;
  std::unique_ptr<Stream> copies_;  // set with parts.device
};

}  // namespace

std::unique_ptr<ParameterHome> wholeParameters(const ParameterParts& parts,
                                               std::unique_ptr<comm::AllGatherBucketer> gatherer) {
  return std::make_unique<WholeParameters>(parts, std::move(gatherer));
}

}  // namespace zrt

// Stage 3: each rank holds its shard of the two flat buffers (with offload_param nvme, part in
// host memory and part on NVMe); the coordinator gathers a module's parameters when they are
// fetched, ahead of time once it has recorded the trace, and the update stays in the shards,
// which makes every gathered copy stale.
#include "core/element_arithmetic.h"
#include "runtime/collective_failure.h"
#include "runtime/stage_policy.h"

namespace zrt {
namespace {

class PartitionedParameters final : public ParameterHome {
 public:
  PartitionedParameters(const ParameterParts& parts, std::unique_ptr<ParamCoordinator> coordinator)
      : parts_(parts), es_(dtypeSize(parts.dtype)), coordinator_(std::move(coordinator)) {}

  char* trainableShard() const override { return static_cast<char*>(parts_.states->parameters().data()); }

  std::vector<TensorRef> parameters(std::size_t m) override {
    const ParamCoordinator::Gathered g = coordinator_->fetch(m);
    const CoordinatedModule& range = parts_.layout->moduleRanges[m];
    std::vector<TensorRef> out;
    for (std::size_t i : parts_.layout->moduleParams[m]) {
      const ParamInfo& p = parts_.layout->params[i];
      const char* at = p.spec->trainable ? g.trainable + (p.offset - range.trainableBegin) * es_
                                         : g.frozen + (p.offset - range.frozenBegin) * es_;
      out.push_back({&p.spec->name, &p.spec->shape, const_cast<char*>(at), parts_.dtype, p.numel});
    }
    return out;
  }
  void release(std::size_t m) override { coordinator_->release(m); }

  void beginPass() override { coordinator_->beginPass(); }
  FetchCounts takeCounts(std::string& unreleased) override {
    const FetchCounts c = coordinator_->takeCounts();
    unreleased = coordinator_->unreleased();
    return c;
  }
  std::optional<std::string> takeIoFailure() override {
    if (!parts_.stores[0]) return std::nullopt;
    return coordinator_->takeIoFailure();
  }
  void endPass() override { coordinator_->endPass(); }

  void publishUpdate() override { coordinator_->refresh(); }
  bool keepsGatheredCopies() const override { return true; }

  // Gathers the parameter's pieces from every rank's shard.
  std::vector<float> value(const ParamInfo& p) const override {
    const ModelStates& states = *parts_.states;
    const FlatLayout& layout = p.spec->trainable ? states.trainableLayout() : states.frozenLayout();
    const StateBuffer& shard = p.spec->trainable ? states.parameters() : states.frozenParameters();
    const char* local = static_cast<const char*>(shard.data());
    std::vector<char> read;  // offload_param nvme: the shard, read whole
    if (ParamShardStore* store = parts_.stores[p.spec->trainable ? 0 : 1]) {
      read.resize(store->count() * es_ + 1);
      onEveryRankOrNone<PeerError>(*parts_.comm, "engine: reading parameters failed:",
                                   [&] { store->readAll(read.data()); });
      local = read.data();
    }
    const int world = parts_.comm->size(), rank = parts_.comm->rank();
    const GatherPieces g = gatherPieces(p.offset, p.numel, layout.shard.count, world, rank);
    std::vector<char> gathered(p.numel * es_);
    parts_.comm->allGather(local + g.sendOffset * es_, gathered.data(), g.counts, parts_.dtype, g.displs);
    std::vector<float> out(p.numel);
    for (std::uint64_t i = 0; i < p.numel; ++i) out[i] = zrt::loadElement(parts_.dtype, gathered.data(), i);
    return out;
  }

 private:
  ParameterParts parts_;
  std::size_t es_;
  std::unique_ptr<ParamCoordinator> coordinator_;
};

}  // namespace

std::unique_ptr<ParameterHome> partitionedParameters(const ParameterParts& parts,
                                                     std::unique_ptr<ParamCoordinator> coordinator) {
  return std::make_unique<PartitionedParameters>(parts, std::move(coordinator));
}

}  // namespace zrt

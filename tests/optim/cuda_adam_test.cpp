// The fused CUDA Adam/AdamW kernel against the CPU paths: the same bits for parameters,
// moments and the parameter copy, for every gradient dtype, copy dtype and weight-decay mode,
// over many tensors of odd sizes (more tensors and more blocks than one launch carries, so
// the host splits the work into several launches and continues a tensor across them).
// Runs on a real GPU; its main exits 77 (skipped) without one.
#include "runtime/optim/cuda_adam.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/build_config.h"
#include "core/device.h"
#include "core/error.h"
#include "runtime/optim/adam.h"
#include "tests/optim/optim_test_util.h"

using namespace zrt;
using namespace zrt::optim;
using namespace zrt::optim::test;

namespace {

struct HostTensor {
  std::vector<float> p, m, v;
  GradBuffer g;
  std::vector<unsigned char> copy;
};

}  // namespace

TEST_CASE("cuda adam: same bits as the CPU, many tensors, every dtype and mode") {
  MemoryLedger ledger("cuda_adam_test");
  auto dev = makeDevice("cuda:0", ledger);
  auto stream = dev->createStream();
  // 40 tensors (> 36 per launch), one of 5.3M elements (> 320 blocks of 16384), odd sizes, an
  // empty one.
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 38; ++i) sizes.push_back(static_cast<std::size_t>(1 + 977 * i));
  sizes.push_back(0);
  sizes.push_back(5'300'001);
  // Random data once; each configuration starts from a copy.
  std::vector<HostTensor> base(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    base[t].p = randomFloats(sizes[t], 10 + t, 0.0f, 1.0f);
    base[t].m = randomFloats(sizes[t], 20 + t, 0.0f, 0.01f);
    base[t].v = randomFloats(sizes[t], 30 + t, 0.0f, 0.01f);
    for (auto& x : base[t].v) x *= x;
  }

  for (DType gt : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<GradBuffer> grads;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      grads.push_back(randomGrads(gt, sizes[t], 40 + t, 0.1));
    }
    for (int copy = -1; copy <= 2; ++copy) {
      for (int mode = 0; mode < 3; ++mode) {
        const DType copyType = copy < 0 ? DType::F16 : static_cast<DType>(copy);
        const std::size_t copyBytes = copy < 0 ? 0 : dtypeSize(copyType);
        std::vector<HostTensor> host(sizes.size());
        std::vector<DeviceMemory> mem;
        std::vector<CudaAdamTensor> dt(sizes.size());
        for (std::size_t t = 0; t < sizes.size(); ++t) {
          const std::size_t n = sizes[t];
          HostTensor& h = host[t];
          h = base[t];
          h.g = grads[t];
          h.copy.assign(n * copyBytes, 0);
          if (n == 0) continue;
          auto put = [&](const void* src, std::size_t bytes, MemTag tag) {
            mem.push_back(dev->allocate(bytes, tag));
            dev->copyAsync(mem.back().data(), src, bytes, *stream);
            return mem.back().data();
          };
          dt[t].param = static_cast<float*>(put(h.p.data(), n * 4, MemTag::Parameters));
          dt[t].expAvg = static_cast<float*>(put(h.m.data(), n * 4, MemTag::OptimizerState));
          dt[t].expAvgSq = static_cast<float*>(put(h.v.data(), n * 4, MemTag::OptimizerState));
          dt[t].grad = put(h.g.data(), n * dtypeSize(gt), MemTag::Gradients);
          if (copy >= 0) {
            mem.push_back(dev->allocate(n * copyBytes, MemTag::Parameters));
            dt[t].paramCopy = mem.back().data();
          }
          dt[t].count = n;
        }
        stream->synchronize();  // uploads done before the CPU side changes its arrays
        for (int step = 1; step <= 3; ++step) {
          AdamHyper hy;
          hy.lr = 1e-3 * step;
          hy.weightDecay = mode == 0 ? 0.0 : 0.02;
          hy.decoupledWeightDecay = mode == 2;
          hy.eps = step == 2 ? 1e-3 : 1e-8;
          hy.step = step;
          hy.gradScale = 1.0 / (64.0 * step);
          cudaAdamStep(hy, CudaAdamBatch{dt, gt, copyType}, *stream);
          for (HostTensor& h : host) {
            AdamState s{h.p.data(), h.m.data(), h.v.data(),
                        h.g.data(), gt,         copy >= 0 ? h.copy.data() : nullptr,
                        copyType,   h.p.size()};
            adamStep(hy, s);
          }
        }
        stream->synchronize();
        for (std::size_t t = 0; t < sizes.size(); ++t) {
          const std::size_t n = sizes[t];
          if (n == 0) continue;
          std::vector<float> p(n), m(n), v(n);
          std::vector<unsigned char> c(n * copyBytes);
          dev->copyAsync(p.data(), dt[t].param, n * 4, *stream);
          dev->copyAsync(m.data(), dt[t].expAvg, n * 4, *stream);
          dev->copyAsync(v.data(), dt[t].expAvgSq, n * 4, *stream);
          if (copy >= 0) dev->copyAsync(c.data(), dt[t].paramCopy, n * copyBytes, *stream);
          stream->synchronize();
          INFO("grad " << nameOf(gt) << " copy " << copy << " mode " << mode << " tensor " << t
                       << " of " << n);
          CHECK(firstDifference(host[t].p.data(), p.data(), n, 4) == "");
          CHECK(firstDifference(host[t].m.data(), m.data(), n, 4) == "");
          CHECK(firstDifference(host[t].v.data(), v.data(), n, 4) == "");
          if (copy >= 0) {
            CHECK(firstDifference(host[t].copy.data(), c.data(), n, copyBytes) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("cuda adam: bad batches are rejected") {
  MemoryLedger ledger("cuda_adam_test");
  auto dev = makeDevice("cuda:0", ledger);
  auto stream = dev->createStream();
  DeviceMemory a = dev->allocate(4096, MemTag::Parameters);
  float* f = a.as<float>();
  std::vector<CudaAdamTensor> ts{{f, f + 64, f + 128, f + 192, f + 256, 10},
                                 {f + 512, f + 576, f + 640, f + 704, nullptr, 10}};
  CHECK_THROWS_WITH_AS(cudaAdamStep(AdamHyper{}, CudaAdamBatch{ts}, *stream),
                       doctest::Contains("either all or none"), InvalidArgument);
  ts[1].grad = nullptr;
  CHECK_THROWS_WITH_AS(cudaAdamStep(AdamHyper{}, CudaAdamBatch{ts}, *stream),
                       doctest::Contains("tensor 1"), InvalidArgument);
  MemoryLedger hostLedger("host");
  auto host = makeDevice("host:1M", hostLedger);
  auto hostStream = host->createStream();
  CHECK_THROWS_WITH_AS(cudaAdamStep(AdamHyper{}, CudaAdamBatch{}, *hostStream),
                       doctest::Contains("not a CUDA stream"), InvalidArgument);
}

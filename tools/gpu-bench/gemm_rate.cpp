#include "tools/gpu-bench/gemm_rate.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "core/timing.h"
#include "tools/trainer/model/cuda/cublas_gemm.h"

namespace zrt::gpubench {

struct GemmRate::Impl {
  Device* device = nullptr;
  std::unique_ptr<Stream> stream;
  DeviceMemory a, b, c;
  std::unique_ptr<trainer::cuda::CublasGemm> gemm;
};

GemmRate::GemmRate(Device& device, GemmShape shape, int repeats)
    : shape_(shape), repeats_(repeats), impl_(std::make_unique<Impl>()) {
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || repeats <= 0)
    ZRT_THROW(InvalidArgument, "gemm: the shape ", shape.m, "x", shape.n, "x", shape.k,
              " and the repeats (", repeats, ") must be > 0");
  Impl& i = *impl_;
  i.device = &device;
  i.stream = device.createStream();
  const auto floats = [](int rows, int cols) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * 4;
  };
  i.a = device.allocate(floats(shape.m, shape.k), MemTag::Activations);
  i.b = device.allocate(floats(shape.k, shape.n), MemTag::Parameters);
  i.c = device.allocate(floats(shape.m, shape.n), MemTag::Activations);
  // 0x3c bytes: about 0.0115 everywhere, finite products (a GEMM's speed does not depend on
  // the values, but denormals or NaNs could).
  device.memsetAsync(i.a.data(), 0x3c, i.a.bytes(), *i.stream);
  device.memsetAsync(i.b.data(), 0x3c, i.b.bytes(), *i.stream);
  i.stream->synchronize();
  i.gemm =
      std::make_unique<trainer::cuda::CublasGemm>(static_cast<cudaStream_t>(i.stream->native()));
}

GemmRate::~GemmRate() = default;

double GemmRate::turn() {
  Impl& i = *impl_;
  const GemmShape& s = shape_;
  const auto t0 = std::chrono::steady_clock::now();
  // C[m,n] = A[m,k] B[k,n], row-major, as a linear layer's forward product.
  for (int r = 0; r < repeats_; ++r)
    i.gemm->gemm(false, false, s.m, s.n, s.k, 1.0f, i.a.as<float>(), s.k, i.b.as<float>(), s.n,
                 0.0f, i.c.as<float>(), s.n);
  i.stream->synchronize();
  return secondsSince(t0);
}

}  // namespace zrt::gpubench

namespace zrt::gpubench {

void GemmRate::verify() {
  Impl& i = *impl_;
  float first = 0;
  i.device->copyAsync(&first, i.c.data(), sizeof first, *i.stream);
  i.stream->synchronize();
  const double x = std::bit_cast<float>(std::uint32_t{0x3c3c3c3c});
  const double expected = static_cast<double>(shape_.k) * x * x;
  // fp32 sums of k equal terms: a relative error well under 1e-3 for any k this bench runs.
  if (!(std::fabs(first - expected) <= 1e-3 * expected))
    ZRT_THROW(ExternalError, "gemm: C[0,0] is ", first, " where the product of the inputs is ",
              expected, ": the GEMM did not compute what was timed");
}

}  // namespace zrt::gpubench

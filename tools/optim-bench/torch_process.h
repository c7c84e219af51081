// torch.optim's AdamW/Adam (foreach=True) on one flat tensor, in a python process kept alive for
// the whole measurement of one size, so that zrt-optim-bench can time a torch step between its
// own steps (turns alternate) instead of in a separate run where the machine's load differs.
// The process holds its own parameters, gradients and moments (16 bytes per parameter) beside
// the bench's. fp32 gradients: torch's CPU optimizers need the gradient in the parameter's dtype.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace zrt::bench {

class TorchProcess {
 public:
  // Starts `python` on the script with `optimizer` (adam or adamw) and `params` parameters; returns
  // once torch has built the optimizer and taken one untimed step. Throws zrt::Error naming the
  // command when the interpreter cannot start or torch is missing.
  TorchProcess(const std::string& python, const std::string& optimizer, std::size_t params);
  ~TorchProcess();
  TorchProcess(const TorchProcess&) = delete;
  TorchProcess& operator=(const TorchProcess&) = delete;

  // Times one optimizer step with `threads` intra-op threads (timed inside python: perf_counter
  // around opt.step()); seconds.
  double step(int threads);
  const std::string& version() const { return version_; }

 private:
  std::string readLine();

  std::string command_, script_, version_;
  pid_t pid_ = -1;
  std::FILE* toChild_ = nullptr;
  std::FILE* fromChild_ = nullptr;
};

}  // namespace zrt::bench
